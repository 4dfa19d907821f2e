"""Typed, Kubernetes-free data the scheduling core and the edge share. By what it describes:

- units and reading: ``units`` (the core's integer units), ``quantity`` (Kubernetes
  quantities as exact integers), ``limits`` (what a real cluster can hold: the bounds on
  what kgpu reads), ``json_text`` (JSON from objects, read within those bounds);
- nodes and their devices: ``node``, ``devices`` (the node agent's report), ``topology``
  (how GPUs connect), ``taints``, ``dra`` (Dynamic Resource Allocation's classes, slices
  and claims);
- what pods ask: ``pod``, ``gpu`` (every dialect's GPU request, normalised), ``card``
  (named kinds of accelerator that quotas count), ``topology_request`` (the level a gang
  asks to be placed within);
- teams and their shares: ``queue``, ``resources`` (resource vectors), ``fair_share``,
  ``ledger`` (what each queue holds and should hold), ``job`` (PodGroups and their tasks),
  ``disruption`` (PodDisruptionBudgets' arithmetic);
- inference and capacity: ``workspace``, ``presets`` (model names to GPU memory),
  ``nodepool`` and ``skus`` (what an autoscaler can launch);
- ``decision``: what a session tells the edge, or the simulator, to do.
"""
