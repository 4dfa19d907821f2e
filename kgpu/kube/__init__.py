"""The Kubernetes edge: the API server's objects into the model, and the processes that act on
the cluster (the live scheduler, the admission webhook, the Workspace controller, the
autoscaler's triggers), one subpackage per job:

- ``api``: calls to the API server, caches (informers), leader election, events, errors.
- ``objects``: one Kubernetes object at a time into the model (Nodes, Pods, Queues,
  PodGroups, Devices, the device-allocation annotation), and the errors that name the field.
- ``snapshot``: the informers' caches into one session's input: the cluster state with every
  bound pod on its recorded devices, the pending pods, the queues and jobs.
- ``live``: the live scheduler: the loop, binding, evictions, waiting, status, metrics.
- ``admission``: the admission webhook: its decisions and its HTTPS server.
- ``workspaces``: Workspaces: the placement check, the workload objects, the controller.
- ``scaling``: the autoscaler's Kubernetes side: trigger pods, Karpenter's objects, its loop.
- ``install``: the objects of ``kgpu manifests``: CRDs, RBAC, Deployments, certificates.
- ``explain``: ``kgpu explain``: where a pod runs, or why it is pending.
"""
