"""Topology end to end: `kgpu simulate manifests` with racks, and `kgpu explain`'s answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from kgpu.cli import main
from kgpu.kube.explain.explanation import explain_from_objects
from kgpu.kube.explain.session_verdict import GroupObjects
from kgpu.sim.manifest_results import PodStatus
from kgpu.sim.manifests import simulate_manifests
from tests.test_explain import k8s_node, k8s_pod
from tests.test_simulate_manifest_session import group
from tests.test_simulate_manifests import Obj, by_pod, node, pod, write

RACK = "example.com/rack"
PROFILE = {
    "filters": [
        "NodeUnschedulable",
        "NodeSelector",
        "TaintToleration",
        "NodeResourcesFit",
        "GpuFit",
    ],
    "scores": [{"name": "BestFit"}],
    "gpuChoice": "GpuTightest",
    "topology": {
        "levels": [
            {"name": "block", "nodeLabel": "example.com/block"},
            {"name": "rack", "nodeLabel": RACK},
        ]
    },
}


def profile(directory: Path) -> str:
    path = directory / "topology-profile.yaml"
    path.write_text(yaml.safe_dump({"racks": PROFILE}))
    return str(path)


def racked(name: str, block: str, rack: str, base: Obj) -> Obj:
    base["metadata"]["name"] = name
    base["metadata"]["labels"] = {
        **base["metadata"].get("labels", {}),
        "example.com/block": block,
        RACK: rack,
    }
    return base


def member(name: str, of: str, gpus: int, **annotations: str) -> Obj:
    obj = pod(name, gpus=gpus)
    obj["metadata"]["annotations"] = {"scheduling.k8s.io/group-name": of, **annotations}
    return obj


def test_manifests_place_a_rack_gang_in_the_tightest_rack_and_refuse_one_too_big(
    tmp_path: Path,
) -> None:
    cluster = tmp_path / "cluster"
    cluster.mkdir()
    nodes = [("n1", "b1", "r1"), ("n2", "b1", "r1"), ("n3", "b1", "r1")]
    nodes += [("n4", "b1", "r2"), ("n5", "b1", "r2")]
    write(cluster, "nodes.yaml", *[racked(n, b, r, node(n, gpus=8)) for n, b, r in nodes])
    required = {"kueue.x-k8s.io/podset-required-topology": RACK}
    write(
        cluster,
        "work.yaml",
        group("small", 2),
        *[member(f"small-{i}", "small", 8, **required) for i in range(2)],
        group("huge", 4),
        *[member(f"huge-{i}", "huge", 8, **required) for i in range(4)],
    )
    policy = profile(tmp_path)
    run = simulate_manifests(cluster, policy)
    found = by_pod(run)
    assert {found[f"ml/small-{i}"].node for i in range(2)} == {"n4", "n5"}
    huge = found["ml/huge-0"]
    assert huge.status == PodStatus.PENDING
    assert huge.message.startswith(
        "topology: no rack has room for all 4 pods of gang ml/huge (required level rack); "
        "nearest rack r1 holds 3 of 4: "
    )
    result = CliRunner().invoke(
        main, ["simulate", "manifests", str(cluster), "--policy", policy, "--explain", "ml/huge-1"]
    )
    assert result.exit_code == 0, result.output
    assert "placed=2 pending=4" in result.output
    assert "nearest rack r1 holds 3 of 4" in result.output


def test_explain_names_the_level_that_failed_and_the_nearest_domain(tmp_path: Path) -> None:
    nodes: list[Any] = []
    for name, rack in (("a", "r1"), ("b", "r1"), ("c", "r2")):
        obj = k8s_node(name, gpus=8)
        obj["metadata"]["labels"] |= {"example.com/block": "b1", RACK: rack}
        nodes.append(obj)
    annotations = {
        "scheduling.k8s.io/group-name": "train",
        "kgpu.io/topology-required": "rack",
    }
    pods = [k8s_pod(f"train-{i}", gpus=8, annotations=annotations) for i in range(3)]
    podgroup = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"minMember": 3},
    }
    answer = explain_from_objects(
        pods[0],
        nodes,
        pods,
        "kgpu-scheduler",
        policy=profile(tmp_path),
        groups=GroupObjects(podgroups=[podgroup]),
    )
    assert answer.summary.startswith(
        "Pod ml/train-0 is pending: topology: no rack has room for all 3 pods of gang "
        "ml/train (required level rack); nearest rack r1 holds 2 of 3: "
    )


def test_the_documented_example_places_as_docs_policy_says() -> None:
    root = Path(__file__).resolve().parents[1] / "examples"
    run = simulate_manifests(root / "topology", str(root / "topology-profile.yaml"))
    found = by_pod(run)
    racks = {
        name: sorted(
            {found[p].node.rsplit("-", 1)[0] for p in found if p.startswith(f"ml/{name}-")}
        )
        for name in ("two", "three", "five")
    }
    assert racks == {"two": ["r2"], "three": ["r3"], "five": ["r1", "r4"]}
    assert found["ml/four-0"].message.startswith(
        "topology: no rack has room for all 4 pods of gang ml/four (required level rack); "
        "nearest rack r4 holds 1 of 4"
    )
