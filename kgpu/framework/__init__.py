"""The scheduling framework: what plugins and actions are built on. By what it does:

- extension points and outcomes: ``interfaces`` (one Protocol each), ``status`` and
  ``reasons`` (why a node or pod was refused), ``cycle`` (per-cycle data);
- profiles: ``profile`` (plugins, weights, arguments), ``defrag_config`` (the
  defragmentation switch), ``topology_config`` (network topology levels);
- one pod's cycle: ``scheduler`` (PreFilter, Filter, Score, GPU choice) over
  ``shape_cache`` (verdicts and scores kept per pod shape) and ``best_nodes`` (a shape's
  feasible nodes kept ranked while it is placed again and again);
- node groups for inference workspaces: ``groups`` (their extension points),
  ``group_scheduler`` (one cycle);
- the session: ``session_snapshot`` (what it opens over), ``session`` (accounts, jobs,
  placing and undoing), ``session_open`` (its jobs and queue sums, built as it opens),
  ``session_callbacks`` (the session plugins' callbacks and how each kind combines),
  ``session_scratch`` (the actions' typed scratch), ``statement`` (commit or discard),
  ``charges`` (what a GPU request counts toward a quota), ``session_claims`` (DRA claims
  held as pods are placed), ``gc_pause`` (the cycle collector paused while it runs),
  ``session_result`` (what it decided, as data).
"""
