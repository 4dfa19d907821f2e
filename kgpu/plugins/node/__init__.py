"""Node plugins: the PreFilter, Filter, Score and GPU-choice plugins of the pod scheduler
(``kgpu.framework.interfaces``), which judge one pod against the cluster's nodes, one
plugin a module:

- PreFilter: ``gpu_request_check`` (a GPU request no node could ever serve);
- Filter: ``node_unschedulable``, ``node_selector``, ``taint_toleration``,
  ``resource_fit`` (CPU, memory, pod limit), ``gpu_fit`` (GPU model and room),
  ``dra_claims`` (ResourceClaims that can be allocated); and how a filter's verdicts are
  built at the least cost for few or most nodes (``filter_verdicts``, no plugin);
- Score: ``best_fit``, ``dot_product``, ``gpu_clustering``, ``gpu_packing``,
  ``node_placement`` (bin packing or spreading), ``random_score``, ``gpu_topology``
  (NVLink islands), ``fgd`` and ``strand_aware_fgd`` (kgpu's default), which also choose
  a share's GPU;
- GPU choice: ``gpu_tightest``, ``gpu_random``, and the picks they share
  (``gpu_slots``), checked against the node's devices (``device_choice``).
"""
