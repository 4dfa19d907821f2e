"""The trace-driven simulator: traces in, the same core, allocation curves and reports out.

By what it replays:

- openb traces as the FGD paper does (arrivals only): ``openb`` (reading the trace),
  ``arrivals`` (tuning and order), ``openb_run``, ``replay``, ``report``;
- openb traces with departures: ``churn_trace`` (times and phases), ``churn`` (the event
  loop), ``churn_run``, ``churn_defrag`` (moves), ``churn_report`` (plots);
- Kubernetes manifests: ``yaml_documents``, ``manifests``, ``manifest_session`` (Queues
  and PodGroups), ``manifest_workspaces``, ``manifest_dra`` (DRA objects),
  ``manifest_results``;
- autoscaling: ``autoscale_run``, ``provisioner`` (nodes that join), ``autoscale_dra``;
- synthetic workloads: ``synthetic``, ``tenants`` (teams over time),
  ``workspaces`` (inference Workspaces).
"""
