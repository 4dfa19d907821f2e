"""What the scheduler's service account may do, one role per feature, each rendered only
with the flag that turns the feature on (docs/SECURITY.md, "What each account may do").

- ``<name>`` (ClusterRole, always): reading what a session reads (KAI's Queues and
  PodGroups too, never written), and the writes scheduling
  itself makes in the pods' own namespaces: binding, deleting the victims of preemption
  and reclaim, evicting the pods defragmentation moves (and reading PodDisruptionBudgets
  for it: a profile turns it on, not the install), correcting a pod's device annotations
  to the GPUs the kubelet gave, Events, and the status of Queues and PodGroups. No
  ``create`` of any pod anywhere.
- ``<name>-shares`` (ClusterRole, with the webhook): the ConfigMap that carries a share's
  GPU environment, written in the share's own namespace (a pod mounts ConfigMaps of its own
  namespace only, so this cannot be a Role); ``get``/``update``/``patch`` cannot name the
  ConfigMaps (``resourceNames`` takes no prefix), so ``--tenant-namespaces`` is what keeps
  them out of kube-system.
- ``<name>-workspaces`` (ClusterRole, with ``--workspaces``): the Workspace controller's
  Services, Deployments, StatefulSets and LeaderWorkerSets, in each Workspace's namespace.
- ``<name>-kaito`` (ClusterRole, with ``--kaito-workspaces``): KAITO's Workspaces read;
  ``<name>-kaito-workspaces`` (ClusterRole, bound as ``-workspaces`` is): their status
  patched and their finalizers updated (the workload's owner reference).
- ``<name>-autoscale`` (ClusterRole, with ``--autoscale``): Karpenter's NodeClaims and
  NodePools, read.
  The trigger pods' PriorityClass is an object of the install, so the scheduler creates no
  PriorityClass (its ``get`` finds it).
- ``<name>-install`` (Role in the install's namespace, with the webhook or ``--autoscale``):
  ``pods create/delete/patch`` for the reservation pods of shared GPUs and the trigger pods,
  which both live there; the only namespace where the scheduler may create a pod.
- ``<name>-leader-election`` (Role in the install's namespace): the Lease, by name.
- ``<name>-record-key`` (Role in the install's namespace): the Secret with the key that
  signs kgpu's records on pods: create, and get by name.

``--tenant-namespaces a,b`` binds the namespaced writes (``<name>-tenant``: pods delete and
patch, pods/binding; with ``-shares`` and ``-workspaces``) by a RoleBinding in each listed
namespace instead of cluster-wide, so nothing kgpu may write reaches kube-system or any
namespace not listed; reads stay cluster-wide (a session sees the whole cluster).
"""

from __future__ import annotations

from kgpu.kube.install.crds import GROUP
from kgpu.kube.install.options import RBAC, InstallOptions, Obj, object_meta, rbac_rule
from kgpu.kube.install.webhook_config import KAITO_GROUP

# The trigger pods' PriorityClass (kgpu.kube.scaling.trigger_pods.TriggerPodConfig's
# defaults; a test holds the two together): below every real pod, never preempting.
TRIGGER_PRIORITY_CLASS = "kgpu-autoscale-trigger"
TRIGGER_PRIORITY = -5
# Koordinator's Device (kgpu.kube.anchors.koordinator), read by the scheduler.
KOORDINATOR_GROUP = "scheduling.koordinator.sh"
# Volcano's scheduling group (kgpu.kube.anchors.volcano.GROUP; the install imports no model).
VOLCANO_GROUP = "scheduling.volcano.sh"
# resource.k8s.io/v1 (kgpu.kube.snapshot.dra_inventory.DRA_RESOURCES; no import: see above).
DRA_GROUP = "resource.k8s.io"
DRA_KINDS = ["deviceclasses", "resourceslices", "resourceclaims", "resourceclaimtemplates"]


def read_rules() -> list[Obj]:
    """What a session reads, cluster-wide (it must see every pod and node)."""
    crs = ["queues", "podgroups", "devices", "workspaces"]
    return [
        rbac_rule([""], ["pods"], ["get", "list", "watch"]),
        rbac_rule([""], ["nodes"], ["get", "list", "watch"]),
        rbac_rule([GROUP], crs, ["get", "list", "watch"]),
        # KAI Scheduler's Queues and PodGroups, read (never written: KAI's own objects).
        rbac_rule(["scheduling.run.ai"], ["queues", "podgroups"], ["get", "list", "watch"]),
        # Volcano's Queues and PodGroups, read beside kgpu's (kgpu.kube.anchors.volcano).
        rbac_rule([VOLCANO_GROUP], ["queues", "podgroups"], ["get", "list", "watch"]),
        # Koordinator's Devices (koordlet's), a node's GPUs where it has no kgpu.io Device.
        rbac_rule([KOORDINATOR_GROUP], ["devices"], ["get", "list", "watch"]),
        # PriorityClasses, cached: a PodGroup's spec.priorityClassName ranks its job; get:
        # whether the trigger pods' class exists.
        rbac_rule(["scheduling.k8s.io"], ["priorityclasses"], ["get", "list", "watch"]),
        # Dynamic Resource Allocation (1.34), cached where served (kgpu.kube.live.dra_live).
        rbac_rule([DRA_GROUP], DRA_KINDS, ["get", "list", "watch"]),
        # PodDisruptionBudgets, cached by defragmentation where a profile turns it on
        # (kgpu.kube.live.defrag_live): the moves the Eviction API would refuse are not planned.
        rbac_rule(["policy"], ["poddisruptionbudgets"], ["get", "list", "watch"]),
        # Events about nodes go to "default", about pods to theirs: any namespace.
        # patch: client-go's way of counting repeats.
        rbac_rule([""], ["events"], ["create", "patch"]),
        # Cluster-scoped objects, whose status the scheduler reports.
        rbac_rule([GROUP], ["queues/status"], ["update", "patch"]),
    ]


def tenant_rules() -> list[Obj]:
    """Writes to pods in their own namespaces: bind; delete the victims of preemption and
    reclaim; evict the pods defragmentation moves; patch the device annotations of a pod
    the kubelet gave other GPUs. PodGroups live with their pods, so their status is
    written there too."""
    return [
        rbac_rule([""], ["pods"], ["delete", "patch"]),
        rbac_rule([""], ["pods/binding"], ["create"]),
        # Defragmentation's moves: an eviction is a delete that the pod's PodDisruptionBudget
        # may refuse, so it grants nothing ``pods delete`` does not.
        rbac_rule([""], ["pods/eviction"], ["create"]),
        rbac_rule([GROUP], ["podgroups/status"], ["update", "patch"]),
        # A Volcano PodGroup's phase (Inqueue, Running) is the scheduler's to report, as
        # Volcano's own scheduler does; its Queues' status stays Volcano's queue controller's.
        rbac_rule([VOLCANO_GROUP], ["podgroups/status"], ["update", "patch"]),
        # A placed pod's ResourceClaims: allocated and reserved before its Binding, and
        # released when it goes, through the status subresource (PUT); the claim itself
        # (PUT) for the delete-protection finalizer added with an allocation, removed
        # after it.
        rbac_rule([DRA_GROUP], ["resourceclaims/status"], ["update"]),
        rbac_rule([DRA_GROUP], ["resourceclaims"], ["update"]),
    ]


def shares_rules() -> list[Obj]:
    """A share's GPU environment (kgpu.kube.objects.gpu_env), in the share's namespace."""
    return [rbac_rule([""], ["configmaps"], ["get", "create", "update", "patch"])]


def workspace_rules() -> list[Obj]:
    """The Workspace controller: it finds a workspace's workload by listing with a label
    selector, creates what is missing, patches replicas to scale, deletes the StatefulSets
    of replicas scaled away, and patches the Workspace's status. Whether the LeaderWorkerSet
    CRD is installed it learns by listing LeaderWorkerSets."""
    return [
        rbac_rule([GROUP], ["workspaces/status"], ["patch"]),
        # The workload's owner reference blocks the Workspace's deletion until it is gone;
        # where OwnerReferencesPermissionEnforcement is on, that takes update on finalizers.
        rbac_rule([GROUP], ["workspaces/finalizers"], ["update"]),
        rbac_rule([""], ["services"], ["list", "create"]),
        rbac_rule(["apps"], ["deployments"], ["list", "create", "patch"]),
        rbac_rule(["apps"], ["statefulsets"], ["list", "create", "patch", "delete"]),
        rbac_rule(["leaderworkerset.x-k8s.io"], ["leaderworkersets"], ["list", "create", "patch"]),
    ]


def kaito_read_rules() -> list[Obj]:
    """KAITO's Workspaces, cached by the runner's informer and read by each pass."""
    return [rbac_rule([KAITO_GROUP], ["workspaces"], ["get", "list", "watch"])]


def kaito_write_rules() -> list[Obj]:
    """KAITO's Workspaces' status, and their finalizers for the workload's owner reference
    (as :func:`workspace_rules` for kgpu's)."""
    return [
        rbac_rule([KAITO_GROUP], ["workspaces/status"], ["patch"]),
        rbac_rule([KAITO_GROUP], ["workspaces/finalizers"], ["update"]),
    ]


def install_namespace_rules() -> list[Obj]:
    """Reservation pods (shares) and trigger pods (``--autoscale``): made, moved to another
    minor, and deleted, in the install's namespace only."""
    return [rbac_rule([""], ["pods"], ["create", "delete", "patch"])]


def autoscale_rules() -> list[Obj]:
    """Karpenter's NodeClaims, read to follow each trigger's node, and its NodePools, read
    to know what nodes may be asked for."""
    return [rbac_rule(["karpenter.sh"], ["nodeclaims", "nodepools"], ["get", "list", "watch"])]


def scheduler_rbac(opts: InstallOptions) -> list[Obj]:
    """The scheduler's ServiceAccount and every role and binding it holds."""
    name = opts.scheduler_name
    sa = {"kind": "ServiceAccount", "name": name, "namespace": opts.namespace}
    objects: list[Obj] = [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": object_meta(opts, name, "scheduler"),
        }
    ]
    cluster: list[tuple[str, list[Obj]]] = [("", read_rules())]
    if opts.autoscale:
        cluster.append(("autoscale", autoscale_rules()))
    kaito = opts.workspaces and opts.kaito_workspaces
    if kaito:
        cluster.append(("kaito", kaito_read_rules()))
    namespaced: list[tuple[str, list[Obj]]] = [("tenant", tenant_rules())]
    if opts.webhook:
        namespaced.append(("shares", shares_rules()))
    if opts.workspaces:
        namespaced.append(("workspaces", workspace_rules()))
    if kaito:
        namespaced.append(("kaito-workspaces", kaito_write_rules()))
    for suffix, rules in cluster:
        role = f"{name}-{suffix}" if suffix else name
        objects.append(_role("ClusterRole", opts, role, None, rules))
        objects.append(_binding("ClusterRoleBinding", opts, role, None, "ClusterRole", sa))
    for suffix, rules in namespaced:
        role = f"{name}-{suffix}"
        objects.append(_role("ClusterRole", opts, role, None, rules))
        # A ClusterRole bound by RoleBindings grants its rules in those namespaces only.
        where: tuple[str | None, ...] = opts.tenant_namespaces or (None,)
        for ns in where:
            kind = "RoleBinding" if ns else "ClusterRoleBinding"
            objects.append(_binding(kind, opts, role, ns, "ClusterRole", sa))
    local: list[tuple[str, list[Obj]]] = [
        ("leader-election", _lease_rules(name)),
        ("record-key", _record_key_rules(name)),
    ]
    if opts.webhook or opts.autoscale:
        local.append(("install", install_namespace_rules()))
    for suffix, rules in local:
        role = f"{name}-{suffix}"
        objects.append(_role("Role", opts, role, opts.namespace, rules))
        objects.append(_binding("RoleBinding", opts, role, opts.namespace, "Role", sa))
    return objects


def _record_key_rules(name: str) -> list[Obj]:
    # The key that signs kgpu's records on pods (kgpu.kube.live.record_key): made at the
    # first start, read after. create cannot be limited by name (RBAC does not know the
    # name before the object); get can.
    return [
        rbac_rule([""], ["secrets"], ["create"]),
        {**rbac_rule([""], ["secrets"], ["get"]), "resourceNames": [f"{name}-record-key"]},
    ]


def _lease_rules(name: str) -> list[Obj]:
    # create cannot name its object (the name is in the body); get and update can.
    return [
        rbac_rule(["coordination.k8s.io"], ["leases"], ["create"]),
        {
            **rbac_rule(["coordination.k8s.io"], ["leases"], ["get", "update"]),
            "resourceNames": [name],
        },
    ]


def trigger_priority_class(opts: InstallOptions) -> Obj:
    """The PriorityClass of ``--autoscale``'s trigger pods, installed with the rest."""
    meta = object_meta(opts, TRIGGER_PRIORITY_CLASS, "scheduler", namespaced=False)
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": meta,
        "value": TRIGGER_PRIORITY,
        "preemptionPolicy": "Never",
        "globalDefault": False,
        "description": "kgpu autoscale trigger pods: below all real work, never preempting",
    }


def _role(
    kind: str, opts: InstallOptions, name: str, namespace: str | None, rules: list[Obj]
) -> Obj:
    meta = object_meta(opts, name, "scheduler", namespaced=namespace is not None)
    if namespace is not None:
        meta["namespace"] = namespace
    return {"apiVersion": f"{RBAC}/v1", "kind": kind, "metadata": meta, "rules": rules}


def _binding(
    kind: str, opts: InstallOptions, role: str, namespace: str | None, role_kind: str, subject: Obj
) -> Obj:
    meta = object_meta(opts, role, "scheduler", namespaced=namespace is not None)
    if namespace is not None:
        meta["namespace"] = namespace
    return {
        "apiVersion": f"{RBAC}/v1",
        "kind": kind,
        "metadata": meta,
        "roleRef": {"apiGroup": RBAC, "kind": role_kind, "name": role},
        "subjects": [subject],
    }
