"""The live scheduler (``kgpu run``): the loop of sessions over cache snapshots, binds and
evictions carried out, pods waiting, Queue and PodGroup status, metrics and health, and the
process that assembles it all. By what it does:

- the process and its loop: ``scheduler_process`` (what ``kgpu run`` starts and stops),
  ``loop`` (sessions over cache snapshots), ``liveness`` and ``health_server`` (/healthz,
  /readyz, /metrics), ``metrics`` (the scheduler's Prometheus series);
- a session's decisions carried out: ``carry_out`` (from the session's result),
  ``handover`` and ``binder`` (binds), ``evictions`` (preemption's and reclaim's victims),
  ``waiting`` (who waits, why, until when), ``status_writer`` (Queue and PodGroup status);
- pods' records and devices: ``record_key`` (the key that signs kgpu's records),
  ``allocation_correction`` (annotations set to the GPUs the kubelet gave),
  ``gpu_reservations`` and ``gpu_env_writer`` (shares held by reservation pods, and their
  GPU environment);
- Dynamic Resource Allocation: ``dra_live`` (caches and the per-session inventory),
  ``dra_claims_writer`` (claims allocated before a bind), ``dra_release`` (claims of pods
  gone);
- defragmentation: ``defrag_live`` (rounds after a session: when, for whom, how many),
  ``defrag_facts`` (what the move rules read, from the caches), ``defrag_evictions`` (moves
  carried out through the Eviction API, events and metrics).
"""
