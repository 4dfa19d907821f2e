"""Session plugins: callbacks into a scheduling session (``SessionPlugin``, opened with
``on_open``) that order queues and jobs, hold gangs together and share capacity."""
