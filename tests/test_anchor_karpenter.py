"""Karpenter's NodePools read live (kgpu.kube.anchors.karpenter.live_nodepools and
Autoscaler.use_nodepools): a NodePool of the cluster is planned with, replaces the file's of
its name, and one that cannot be read is refused alone with a Warning naming the object, the
field, the value and what was expected."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from kgpu.autoscale.planner import PlannerConfig
from kgpu.autoscale.trigger_controller import ControllerConfig
from kgpu.kube.anchors.karpenter import NodePoolError, live_nodepools, nodepool_from_k8s
from kgpu.kube.scaling.live_autoscaler import AutoscaleOptions, Autoscaler
from kgpu.model.nodepool import CATALOGUE, NodePool
from kgpu.model.taints import Effect, Taint
from tests.seed_karpenter import NODEPOOL

Obj = dict[str, Any]
SEED: Obj = yaml.safe_load(NODEPOOL)


def test_the_seeds_nodepool_reads_as_karpenter_would_launch_it() -> None:
    pool = nodepool_from_k8s(SEED)
    assert pool.name == "gpu-a100-pool"
    assert [t.name for t in pool.instance_types] == ["p4d.24xlarge", "p5.48xlarge"]
    assert pool.taints == (Taint("nvidia.com/gpu", "true", Effect.NO_SCHEDULE),)
    assert dict(pool.labels) == {
        "tensor-fusion.ai/gpu-type": "a100",
        "tensor-fusion.ai/managed": "true",
    }
    assert {r.key for r in pool.requirements} == {
        "karpenter.k8s.aws/instance-gpu-name",
        "karpenter.k8s.aws/instance-category",
    }


def _edit(path: str, value: object) -> Obj:
    obj = copy.deepcopy(SEED)
    *parents, last = path.split(".")
    at = obj
    for key in parents:
        at = at[key]
    at[last] = value
    return obj


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (
            _edit("metadata", {}),
            "NodePool (no name): metadata.name is missing, expected a non-empty string",
        ),
        (_edit("spec", "x"), "NodePool gpu-a100-pool: spec is 'x', expected a mapping"),
        (
            _edit("spec.template", []),
            "NodePool gpu-a100-pool: spec.template is [], expected a mapping",
        ),
        (
            _edit("spec.template.spec", 3),
            "NodePool gpu-a100-pool: spec.template.spec is 3, expected a mapping",
        ),
        (
            _edit("spec.limits", "8"),
            "NodePool gpu-a100-pool: spec.limits is '8', expected a mapping",
        ),
        (
            _edit("spec.weight", "high"),
            "NodePool gpu-a100-pool: spec.weight is 'high', expected an integer",
        ),
        (
            _edit("spec.limits", {"nvidia.com/gpu": "many"}),
            "NodePool gpu-a100-pool: spec.limits[nvidia.com/gpu] is 'many', expected",
        ),
        (
            _edit(
                "spec.template.spec.requirements", [{"key": "k", "operator": "Near", "values": []}]
            ),
            "NodePool gpu-a100-pool: spec.template.spec.requirements[0] is",
        ),
        (
            _edit("spec.template.spec.taints", [{"key": "k", "effect": "Sometimes"}]),
            "NodePool gpu-a100-pool: spec.template.spec.taints[0] is",
        ),
        (
            _edit("spec.template.spec.requirements", []),
            "NodePool gpu-a100-pool: spec.template.spec.requirements has no node.kubernetes.io/instance-type In",
        ),
        (
            _edit(
                "spec.template.spec.requirements",
                [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["x9"]}],
            ),
            "NodePool gpu-a100-pool: instance type 'x9' is unknown",
        ),
    ],
)
def test_malformed_nodepools_are_refused_with_why(obj: Obj, message: str) -> None:
    with pytest.raises(NodePoolError) as caught:
        nodepool_from_k8s(obj)
    assert str(caught.value).startswith(message)


def _autoscaler(file_pools: tuple[NodePool, ...] = ()) -> tuple[Autoscaler, list[tuple[Any, ...]]]:
    said: list[tuple[Any, ...]] = []
    options = AutoscaleOptions(controller=ControllerConfig(planner=PlannerConfig(file_pools)))
    scaler = Autoscaler(api=None, options=options, emit=lambda *a: said.append(a))  # type: ignore[arg-type]
    return scaler, said


def _pools(scaler: Autoscaler) -> dict[str, tuple[str, ...]]:
    return {
        p.name: tuple(t.name for t in p.instance_types)
        for p in scaler.controller.config.planner.pools
    }


def test_live_nodepools_replace_the_files_of_their_name_and_come_and_go() -> None:
    file_pools = (
        NodePool("gpu-a100-pool", (CATALOGUE["p4de.24xlarge"],)),
        NodePool("spare", (CATALOGUE["p5.48xlarge"],)),
    )
    scaler, said = _autoscaler(file_pools)
    scaler.use_nodepools([SEED])
    assert _pools(scaler) == {
        "gpu-a100-pool": ("p4d.24xlarge", "p5.48xlarge"),
        "spare": ("p5.48xlarge",),
    }
    edited = _edit(
        "spec.template.spec.requirements", SEED["spec"]["template"]["spec"]["requirements"][2:]
    )
    edited["spec"]["template"]["spec"]["requirements"][0] = {
        "key": "node.kubernetes.io/instance-type",
        "operator": "In",
        "values": ["p5.48xlarge"],
    }
    scaler.use_nodepools([edited])  # edited live: planned with at once
    assert _pools(scaler)["gpu-a100-pool"] == ("p5.48xlarge",)
    scaler.use_nodepools([])  # deleted: the file's pool again
    assert _pools(scaler) == {"gpu-a100-pool": ("p4de.24xlarge",), "spare": ("p5.48xlarge",)}
    assert said == []


def test_a_malformed_live_nodepool_is_refused_alone_and_said_once() -> None:
    scaler, said = _autoscaler()
    bad = _edit("spec.weight", "high")
    bad["metadata"] = {"name": "broken", "uid": "u1", "resourceVersion": "1"}
    scaler.use_nodepools([SEED, bad])
    scaler.use_nodepools([SEED, bad])
    assert _pools(scaler) == {"gpu-a100-pool": ("p4d.24xlarge", "p5.48xlarge")}
    message = (
        "NodePool broken: spec.weight is 'high', expected an integer; "
        "kgpu plans no node of this NodePool until it is fixed"
    )
    assert said == [(bad, "Warning", "InvalidNodePool", message)]
    assert scaler.refused == {"broken": message}


def test_live_nodepools_are_read_in_name_order() -> None:
    other = copy.deepcopy(SEED)
    other["metadata"]["name"] = "a-first"
    pools, refused = live_nodepools([SEED, other])
    assert [p.name for p in pools] == ["a-first", "gpu-a100-pool"]
    assert refused == []
