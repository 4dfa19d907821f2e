"""``kgpu manifests``' RBAC: one role per feature, rendered only with the flag that turns
the feature on, namespaced where the work is (issue: the scheduler's account could create a
privileged pod and a Deployment in kube-system, a globalDefault PriorityClass, and patch or
delete any workload cluster-wide)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import kubernetes_validate
from click.testing import CliRunner

from kgpu.cli import main
from kgpu.kube.install.bundle import render_objects
from kgpu.kube.install.options import InstallOptions
from kgpu.kube.scaling.trigger_pods import TriggerPodConfig, render_priority_class
from tests.test_render import K8S_VERSION, by_kind, named

Obj = dict[str, Any]
SA = "system:serviceaccount:kgpu-system:kgpu-scheduler"


def grants(objects: list[Obj], namespace: str | None) -> set[tuple[str, str, str]]:
    """(group, resource, verb) the scheduler's account holds in ``namespace`` (None: in
    every namespace, or cluster-scoped), as the API server's RBAC authorizer would."""
    out = set()
    for binding in by_kind(objects, "ClusterRoleBinding") + by_kind(objects, "RoleBinding"):
        if binding["subjects"][0]["name"] != "kgpu-scheduler":
            continue
        where = binding["metadata"].get("namespace")
        if where is not None and where != namespace:
            continue
        role = named(objects, binding["roleRef"]["kind"], binding["roleRef"]["name"])
        for rule in role["rules"]:
            if "resourceNames" in rule:
                continue  # one object by name, not the resource
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    out |= {(group, resource, verb) for verb in rule["verbs"]}
    return out


def test_the_scheduler_may_create_pods_only_in_the_install_namespace() -> None:
    objects = render_objects(InstallOptions(autoscale=True))
    assert ("", "pods", "create") in grants(objects, "kgpu-system")
    for namespace in ("kube-system", "default", "team-a", None):
        held = grants(objects, namespace)
        assert ("", "pods", "create") not in held
        # never a PriorityClass: the triggers' is installed with the rest
        assert ("scheduling.k8s.io", "priorityclasses", "create") not in held
        # never a DaemonSet, a role, a binding, a secret
        assert not {r for (_, r, _) in held} & {
            "daemonsets",
            "secrets",
            "roles",
            "rolebindings",
            "clusterroles",
            "clusterrolebindings",
            "serviceaccounts",
        }


def test_each_feature_brings_its_rules_and_no_more() -> None:
    base = InstallOptions(webhook=False, workspaces=False, agent=False)
    plain = grants(render_objects(base), "team-a")
    assert ("apps", "deployments", "create") not in plain
    assert ("", "configmaps", "create") not in plain
    assert ("karpenter.sh", "nodeclaims", "list") not in plain
    assert "kgpu-scheduler-install" not in str(render_objects(base))

    with_workspaces = grants(render_objects(InstallOptions(webhook=False, agent=False)), "team-a")
    assert with_workspaces - plain == {
        ("kgpu.io", "workspaces/status", "patch"),
        ("kgpu.io", "workspaces/finalizers", "update"),
        ("", "services", "list"),
        ("", "services", "create"),
        ("apps", "deployments", "list"),
        ("apps", "deployments", "create"),
        ("apps", "deployments", "patch"),
        ("apps", "statefulsets", "list"),
        ("apps", "statefulsets", "create"),
        ("apps", "statefulsets", "patch"),
        ("apps", "statefulsets", "delete"),
        ("leaderworkerset.x-k8s.io", "leaderworkersets", "list"),
        ("leaderworkerset.x-k8s.io", "leaderworkersets", "create"),
        ("leaderworkerset.x-k8s.io", "leaderworkersets", "patch"),
    }
    shares = grants(render_objects(InstallOptions(workspaces=False, agent=False)), "team-a")
    assert shares - plain == {("", "configmaps", v) for v in ("get", "create", "update", "patch")}

    scaling = InstallOptions(webhook=False, workspaces=False, agent=False, autoscale=True)
    objects = render_objects(scaling)
    karpenter = {
        ("karpenter.sh", r, v)
        for r in ("nodeclaims", "nodepools")
        for v in ("get", "list", "watch")
    }
    assert grants(objects, "team-a") - plain == karpenter
    assert grants(objects, "kgpu-system") - grants(render_objects(base), "kgpu-system") == {
        ("", "pods", "create"),
        *karpenter,
    }
    [scheduler] = by_kind(objects, "Deployment")
    args = scheduler["spec"]["template"]["spec"]["containers"][0]["args"]
    assert {"--autoscale", "--trigger-namespace=kgpu-system", "--no-workspaces"} <= set(args)
    params = main.commands["run"].make_context("run", args[1:]).params
    assert (params["autoscale"], params["trigger_namespace"]) == (True, "kgpu-system")


def test_defragmentation_may_evict_and_read_budgets_where_it_may_delete() -> None:
    """A profile turns defragmentation on, not the install: its rights come with the base
    roles, and go only where pods may be deleted (an eviction is a delete that budgets may
    refuse)."""
    base = InstallOptions(webhook=False, workspaces=False, agent=False)
    for namespace in ("team-a", None):
        held = grants(render_objects(base), namespace)
        assert {("policy", "poddisruptionbudgets", v) for v in ("list", "watch")} <= held
    assert ("", "pods/eviction", "create") in grants(render_objects(base), "team-a")
    fenced = render_objects(InstallOptions(tenant_namespaces=("team-a",)))
    assert ("", "pods/eviction", "create") in grants(fenced, "team-a")
    for namespace in ("kube-system", "team-b"):
        assert ("", "pods/eviction", "create") not in grants(fenced, namespace)
        assert ("", "pods", "delete") not in grants(fenced, namespace)


def test_the_anchors_objects_are_only_read() -> None:
    """KAI's Queues and PodGroups: get, list and watch, cluster-wide, with every feature
    off; nothing else of KAI's group, and no status of theirs (KAI writes it)."""
    base = InstallOptions(webhook=False, workspaces=False, agent=False)
    for namespace in ("team-a", None):
        kai = {g for g in grants(render_objects(base), namespace) if g[0] == "scheduling.run.ai"}
        assert kai == {
            ("scheduling.run.ai", r, v)
            for r in ("queues", "podgroups")
            for v in ("get", "list", "watch")
        }


def test_the_trigger_priority_class_is_installed_as_the_scheduler_would_make_it() -> None:
    [installed] = by_kind(render_objects(InstallOptions(autoscale=True)), "PriorityClass")
    made = render_priority_class(TriggerPodConfig())
    assert {k: v for k, v in installed.items() if k != "metadata"} == {
        k: v for k, v in made.items() if k != "metadata"
    }
    assert installed["metadata"]["name"] == made["metadata"]["name"]
    assert installed["globalDefault"] is False and installed["value"] < 0
    assert "PriorityClass" not in {o["kind"] for o in render_objects(InstallOptions())}


def test_tenant_namespaces_keep_every_write_out_of_kube_system() -> None:
    opts = InstallOptions(tenant_namespaces=("team-a", "team-b"), autoscale=True)
    objects = render_objects(opts)
    for obj in objects:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    writes = {"create", "update", "patch", "delete"}
    kube_system = {g for g in grants(objects, "kube-system") if g[2] in writes}
    # Events (a node's go to "default") and the cluster-scoped Queues' status only.
    assert kube_system == {
        ("", "events", "create"),
        ("", "events", "patch"),
        ("kgpu.io", "queues/status", "update"),
        ("kgpu.io", "queues/status", "patch"),
    }
    team = grants(objects, "team-a")
    assert {("", "pods/binding", "create"), ("apps", "deployments", "patch")} <= team
    assert ("", "pods", "create") not in team
    result = CliRunner().invoke(main, ["manifests", "--tenant-namespaces", "team-a,Kube_System"])
    assert result.exit_code != 0
    assert '--tenant-namespaces names "Kube_System", expected namespace names' in result.output


def test_servers_listen_on_the_pod_ip_in_the_install() -> None:
    objects = render_objects(InstallOptions())
    for deployment in by_kind(objects, "Deployment"):
        [container] = deployment["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e.get("valueFrom") for e in container["env"]}
        assert env["POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
        # the kubelet expands $(POD_IP) from the environment
        assert {"--metrics-address=$(POD_IP)", "--address=$(POD_IP)"} & set(container["args"])
    [daemonset] = by_kind(objects, "DaemonSet")
    [agent] = daemonset["spec"]["template"]["spec"]["containers"]
    assert "--metrics-address=$(POD_IP)" in agent["args"]


def test_manifests_file_holding_the_private_key_is_readable_by_its_owner_only(
    tmp_path: Path,
) -> None:
    out = tmp_path / "kgpu.yaml"
    out.write_text("old, world-readable\n")
    out.chmod(0o644)
    old = os.umask(0o022)
    try:
        result = CliRunner().invoke(main, ["manifests", "-o", str(out)])
    finally:
        os.umask(old)
    assert result.exit_code == 0, result.output
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert "tls.key" in out.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["kgpu.yaml"]  # no temporary left
