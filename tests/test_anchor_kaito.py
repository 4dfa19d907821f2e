"""KAITO's ``kaito.sh/v1beta1`` Workspace: every field kgpu reads (kgpu.kube.anchors.kaito),
every malformed value refused naming object, field, value and what is expected; the status
written where KAITO keeps it; the webhook's answer on the seed's Workspace and denial; the
install's rule and rights; and ``kgpu simulate manifests`` on the same objects."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from kgpu.framework.group_scheduler import DENIAL
from kgpu.kube.admission.review import WorkspaceNodes, review
from kgpu.kube.anchors.kaito import (
    KAITO_FINALIZER,
    KaitoOutcome,
    is_kaito,
    kaito_status,
    owned_by_kaito,
    workspace_from_kaito,
)
from kgpu.kube.install.bundle import render_objects, scheduler_args
from kgpu.kube.install.options import InstallOptions
from kgpu.kube.objects.fields import ConversionError
from kgpu.kube.workspaces.controller import REQUEUE_NO_GROUP_S, REQUEUE_NOT_READY_S, reconcile
from kgpu.kube.workspaces.placement_check import group_scheduler, read_workspace
from kgpu.model.workspace import LabelSelector, Operator, Requirement
from kgpu.sim.manifests import simulate_manifests
from tests.anchor_crds.kaito import SEED_DENIAL, seed_workspace, workspace_crd
from tests.workspace_fixtures import k8s_gpu_node

Obj = dict[str, Any]
NOW = "2025-09-03T00:00:00Z"
REF = "Workspace default/workspace-phi-4-mini"


def seed_nodes() -> list[Obj]:
    """The seed's example cluster: {A100, 4, 40960}x2, {A100, 8, 81920}x1, {A10, 1, 24576}x1."""
    return [
        k8s_gpu_node("a100-4-a", "A100", 4, 40960, apps="phi-4-mini"),
        k8s_gpu_node("a100-4-b", "A100", 4, 40960, apps="phi-4-mini"),
        k8s_gpu_node("a100-8-a", "A100", 8, 81920, apps="phi-4-mini"),
        k8s_gpu_node("a10-a", "A10", 1, 24576, apps="phi-4-mini"),
    ]


def with_(path: str, value: object, obj: Obj | None = None) -> Obj:
    """The seed's Workspace with one field set (``a.b.c``)."""
    out = copy.deepcopy(obj or seed_workspace())
    *parents, last = path.split(".")
    cursor = out
    for p in parents:
        cursor = cursor.setdefault(p, {})
    cursor[last] = value
    return out


# ---------------------------------------------------------------------------- fields


def test_the_seed_workspace_maps_field_by_field() -> None:
    ws = workspace_from_kaito(seed_workspace())
    assert ws.key == "default/workspace-phi-4-mini"
    assert ws.selector == LabelSelector((("apps", "phi-4-mini"),))
    assert (ws.replicas, ws.gpu_memory_mib) == (2, 8192)  # 8 GiB per replica, the seed's
    assert (ws.preset, ws.model_id) == ("phi-4-mini-instruct", "microsoft/Phi-4-mini-instruct")
    assert ws.instance_type == ""  # BYO
    assert read_workspace(seed_workspace()) == ws
    # The same object as the API server stores it passes KAITO's schema.
    schema = workspace_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    jsonschema.Draft4Validator(schema).validate(seed_workspace())


def test_instance_type_match_expressions_and_deprecated_fields() -> None:
    obj = with_("resource.instanceType", "Standard_NC24ads_A100_v4")
    obj["resource"]["labelSelector"]["matchExpressions"] = [
        {"key": "zone", "operator": "In", "values": ["a"]}
    ]
    obj["resource"]["count"] = 2
    obj["resource"]["preferredNodes"] = ["a100-4-a"]
    obj["inference"]["preset"]["accessMode"] = "public"
    ws = workspace_from_kaito(obj)
    assert ws.instance_type == "Standard_NC24ads_A100_v4"
    assert ws.selector.match_expressions == (Requirement("zone", Operator.IN, ("a",)),)
    # count and preferredNodes do not move the placement: kgpu derives nodes per replica.
    assert ws.replicas == 2 and ws.gpu_memory_mib == 8192


@pytest.mark.parametrize("replicas", [0, None])
def test_replicas_zero_or_absent_is_one(replicas: int | None) -> None:
    obj = seed_workspace()
    if replicas is None:
        del obj["inference"]["replicas"]
    else:
        obj["inference"]["replicas"] = replicas
    assert workspace_from_kaito(obj).replicas == 1


def test_no_resource_at_all_is_every_node_and_no_namespace_is_default() -> None:
    obj = seed_workspace()
    del obj["resource"]
    del obj["metadata"]["namespace"]
    ws = workspace_from_kaito(obj)
    assert ws.selector == LabelSelector() and ws.key == "default/workspace-phi-4-mini"


MALFORMED = [
    ("metadata", "m", "metadata", '"m"', "a mapping"),
    ("metadata.name", "", "metadata.name", '""', "a non-empty string"),
    ("metadata.namespace", 7, "metadata.namespace", "7", "a string"),
    ("resource", [], "resource", "[]", "a mapping"),
    ("resource.instanceType", 5, "resource.instanceType", "5", "a string"),
    ("resource.count", 0, "resource.count", "0", "a whole number, at least 1"),
    ("resource.count", "2", "resource.count", '"2"', "a whole number, at least 1"),
    ("resource.preferredNodes", "n1", "resource.preferredNodes", '"n1"', "a list of node names"),
    ("resource.preferredNodes", [""], "resource.preferredNodes", '[""]', "a list of node names"),
    ("resource.labelSelector", "apps", "resource.labelSelector", '"apps"', "a mapping"),
    (
        "resource.labelSelector.matchLabels",
        {"apps": 1},
        "resource.labelSelector.matchLabels[apps]",
        "1",
        "a string (quote it in YAML)",
    ),
    (
        "resource.labelSelector.matchExpressions",
        [{"key": "z", "operator": "Near", "values": ["a"]}],
        "resource.labelSelector.matchExpressions[0].operator",
        '"Near"',
        "one of In, NotIn, Exists, DoesNotExist",
    ),
    (
        "resource.labelSelector.matchExpressions",
        [{"key": "z", "operator": "In"}],
        "resource.labelSelector.matchExpressions[0].values",
        "[]",
        "at least one value",
    ),
    ("inference", None, "inference", "null", "a mapping with preset.name"),
    ("inference.replicas", -1, "inference.replicas", "-1", "a whole number, at least 0"),
    ("inference.replicas", "2", "inference.replicas", '"2"', "a whole number, at least 0"),
    ("inference.replicas", True, "inference.replicas", "true", "a whole number, at least 0"),
    ("inference.preset", "phi", "inference.preset", '"phi"', "a mapping"),
    ("inference.preset.name", "gpt-9", "inference.preset.name", '"gpt-9"', "one of "),
    ("inference.preset.name", 4, "inference.preset.name", "4", "a string"),
    ("inference.preset.accessMode", "open", "inference.preset.accessMode", '"open"', "public or"),
    (
        "inference.preset.presetOptions",
        {"modelAccessSecret": "hf"},
        "inference.preset.presetOptions",
        '{"modelAccessSecret": "hf"}',
        "absent: kgpu serves a preset with its own image only",
    ),
    ("inference.template", {"spec": {}}, "inference.template", '{"spec": {}}', "absent: kgpu"),
    ("inference.config", "args", "inference.config", '"args"', "absent: kgpu serves"),
    ("inference.adapters", [{"strength": "1"}], "inference.adapters", "[", "absent: kgpu"),
    ("tuning", {"method": "lora"}, "tuning", '{"method": "lora"}', "absent: kgpu runs inference"),
]


@pytest.mark.parametrize(("path", "value", "field", "shown", "expected"), MALFORMED)
def test_every_malformed_value_is_refused_naming_object_field_value_and_expected(
    path: str, value: object, field: str, shown: str, expected: str
) -> None:
    obj = with_(path, value)
    with pytest.raises(ConversionError) as caught:
        workspace_from_kaito(obj)
    exc = caught.value
    assert exc.field == field
    assert exc.expected.startswith(expected)
    message = str(exc)
    assert message.startswith("Workspace default/")
    assert f": {field} is {shown}" in message


def test_only_the_kaito_group_is_read_by_this_mapping_and_kaitos_finalizer_marks_its_own() -> None:
    assert is_kaito(seed_workspace())
    assert not is_kaito({**seed_workspace(), "apiVersion": "kgpu.io/v1alpha1"})
    assert not owned_by_kaito(seed_workspace())
    held = with_("metadata.finalizers", [KAITO_FINALIZER])
    assert owned_by_kaito(held)


# ---------------------------------------------------------------------------- status


def conditions(status: Obj) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def test_a_pass_over_the_seed_workspace_writes_kaitos_status() -> None:
    obj = with_("metadata.uid", "u1")
    out = reconcile(obj, seed_nodes(), [], NOW, group_scheduler())
    assert [(o["kind"], o["metadata"]["name"]) for o in out.create] == [
        ("Service", "workspace-phi-4-mini"),
        ("Deployment", "workspace-phi-4-mini"),
    ]
    owner = out.create[1]["metadata"]["ownerReferences"][0]
    assert (owner["apiVersion"], owner["kind"], owner["uid"]) == (
        "kaito.sh/v1beta1",
        "Workspace",
        "u1",
    )
    assert out.create[1]["spec"]["replicas"] == 2
    status = out.status
    assert set(status) == {"workerNodes", "conditions", "inference"}  # no kgpu-only fields
    assert status["workerNodes"] == ["a100-4-a", "a100-4-b"]
    assert conditions(status) == {
        "ResourceReady": ("True", "workspaceResourceStatusSuccess"),
        "InferenceReady": ("False", "ReplicasNotReady"),
        "WorkspaceSucceeded": ("False", "workspacePending"),
    }
    assert status["inference"] == {
        "replicas": 0,
        "selector": "kgpu.io/workspace=workspace-phi-4-mini",
        "perReplicaNodeCount": 1,
        "targetNodeCount": 2,
    }
    assert out.requeue_after == REQUEUE_NOT_READY_S
    # Ready: the Deployment's two replicas serve.
    ready = [{**o, "status": {"readyReplicas": 2}} for o in out.create]
    again = reconcile({**obj, "status": status}, seed_nodes(), ready, NOW, group_scheduler())
    assert again.create == [] and again.requeue_after is None
    assert conditions(again.status) == {
        "ResourceReady": ("True", "workspaceResourceStatusSuccess"),
        "InferenceReady": ("True", "WorkspaceInferenceStatusSuccess"),
        "WorkspaceSucceeded": ("True", "workspaceSucceeded"),
    }
    assert again.status["inference"]["replicas"] == 2


def test_the_seed_denial_case_fails_with_the_seeds_text_in_every_condition() -> None:
    out = reconcile(seed_workspace(replicas=3), seed_nodes(), [], NOW, group_scheduler())
    assert out.create == [] and out.requeue_after == REQUEUE_NO_GROUP_S
    assert conditions(out.status) == {
        "ResourceReady": ("False", "workspaceResourceStatusFailed"),
        "InferenceReady": ("False", "WorkspaceInferenceStatusFailed"),
        "WorkspaceSucceeded": ("False", "workspaceFailed"),
    }
    assert all(c["message"].startswith(SEED_DENIAL) for c in out.status["conditions"])


def test_a_malformed_kaito_workspace_fails_naming_the_field() -> None:
    out = reconcile(with_("inference.replicas", -1), seed_nodes(), [], NOW, group_scheduler())
    assert out.requeue_after is None and out.create == []
    message = out.status["conditions"][0]["message"]
    assert (
        message
        == f"{REF}: inference.replicas is -1, expected a whole number, at least 0 (0 means 1)"
    )


def test_kaito_status_keeps_a_transition_time_while_the_status_holds() -> None:
    first = kaito_status([], KaitoOutcome(1, "2025-01-01T00:00:00Z", "broken"))
    later = kaito_status(first["conditions"], KaitoOutcome(1, NOW, "broken"))
    assert {c["lastTransitionTime"] for c in later["conditions"]} == {"2025-01-01T00:00:00Z"}


# ---------------------------------------------------------------------------- admission


class SeedNodes:
    def nodes(self) -> list[Obj]:
        return seed_nodes()


def admission(obj: Obj, operation: str = "CREATE") -> Obj:
    kind = {"group": "kaito.sh", "version": "v1beta1", "kind": "Workspace"}
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u",
            "kind": kind,
            "resource": {"group": "kaito.sh", "version": "v1beta1", "resource": "workspaces"},
            "name": obj["metadata"]["name"],
            "namespace": "default",
            "operation": operation,
            "userInfo": {"username": "admin"},
            "object": obj,
            "oldObject": obj if operation == "UPDATE" else None,
        },
    }
    response: Obj = review(body, "kgpu-scheduler", WorkspaceNodes(SeedNodes()))["response"]
    return response


def test_the_webhook_admits_the_seed_workspace_and_denies_the_seeds_case() -> None:
    assert admission(seed_workspace())["allowed"] is True
    denied = admission(seed_workspace(replicas=3))
    assert denied["allowed"] is False
    assert denied["status"]["message"].startswith(SEED_DENIAL + " {A10, 1, 24576} (1 node)")
    assert DENIAL == SEED_DENIAL
    bad = admission(with_("inference.template", {"spec": {}}))
    assert bad["status"]["message"].startswith(f"{REF}: inference.template is ")
    # One KAITO's own controller holds is KAITO's to judge.
    held = with_("metadata.finalizers", [KAITO_FINALIZER], with_("inference.template", {}))
    assert admission(held, "UPDATE")["allowed"] is True


# ---------------------------------------------------------------------------- install


def test_the_install_registers_and_grants_kaito_workspaces_only_when_asked() -> None:
    def hooks(opts: InstallOptions) -> dict[str, Obj]:
        config = next(
            o for o in render_objects(opts) if o["kind"] == "ValidatingWebhookConfiguration"
        )
        return {h["name"]: h for h in config["webhooks"]}

    def kaito_rules(opts: InstallOptions) -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
        return sorted(
            (o["metadata"]["name"], tuple(r["resources"]), tuple(r["verbs"]))
            for o in render_objects(opts)
            if o["kind"] == "ClusterRole"
            for r in o["rules"]
            if "kaito.sh" in r["apiGroups"]
        )

    off, on = InstallOptions(), InstallOptions(kaito_workspaces=True)
    assert "workspaces.kaito.sh" not in hooks(off) and kaito_rules(off) == []
    assert "--kaito-workspaces" not in scheduler_args(off)
    hook = hooks(on)["workspaces.kaito.sh"]
    assert hook["rules"] == [
        {
            "apiGroups": ["kaito.sh"],
            "apiVersions": ["v1beta1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["workspaces"],
        }
    ]
    assert "--kaito-workspaces" in scheduler_args(on)
    assert kaito_rules(on) == [
        ("kgpu-scheduler-kaito", ("workspaces",), ("get", "list", "watch")),
        ("kgpu-scheduler-kaito-workspaces", ("workspaces/finalizers",), ("update",)),
        ("kgpu-scheduler-kaito-workspaces", ("workspaces/status",), ("patch",)),
    ]
    no_controller = InstallOptions(kaito_workspaces=True, workspaces=False)
    assert kaito_rules(no_controller) == [] and "workspaces.kaito.sh" not in hooks(no_controller)


# ---------------------------------------------------------------------------- simulate


def test_simulate_manifests_places_the_seed_workspace_and_denies_the_seeds_case(
    tmp_path: Path,
) -> None:
    (tmp_path / "nodes.yaml").write_text(yaml.safe_dump_all(seed_nodes()))
    big = seed_workspace("too-big", replicas=3)
    (tmp_path / "workspaces.yaml").write_text(yaml.safe_dump_all([seed_workspace(), big]))
    run = simulate_manifests(tmp_path)
    placed = {r.pod: r.node for r in run.results}
    assert placed == {
        "default/workspace-phi-4-mini-0": "a100-4-a",
        "default/workspace-phi-4-mini-1": "a100-4-b",
    }
    assert all(len(r.gpus) == 4 for r in run.results)
    denial = [n for n in run.notes if "too-big" in n]
    assert len(denial) == 1
    assert denial[0].startswith(
        f"workspaces.yaml#2: Workspace default/too-big denied: {SEED_DENIAL}"
    )
