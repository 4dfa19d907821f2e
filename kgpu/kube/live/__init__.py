"""The live scheduler (``kgpu run``): the loop of sessions over cache snapshots, binds and
evictions carried out, pods waiting, Queue and PodGroup status, metrics and health, and the
process that assembles it all."""
