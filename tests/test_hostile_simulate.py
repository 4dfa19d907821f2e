"""``kgpu simulate manifests`` over folders of seeded hostile objects (tests/hostile_objects.py)
with known-good nodes and pods mixed in (issue #18, point 6): it exits 0, or 1 with a message
and no traceback; the good pods are placed; no GPU holds more than itself."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from kgpu.cli import main
from tests.hostile_objects import HOSTILE_SETTINGS, Obj, batches, tally

# A failing folder is shown whole, however long (with -W error this warning would hide it).
pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")
GOOD = "good"  # the good pods' namespace and Queue, and the taint only they tolerate
GOOD_TAINT = {"key": "kgpu.io/good", "value": "true", "effect": "NoSchedule"}
GOOD_PODS = {"whole": ("nvidia.com/gpu", "1"), "pair": ("nvidia.com/gpu", "2"), "half": ("", "")}


def good_node(name: str) -> Obj:
    allocatable = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "4"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"nvidia.com/gpu.product": "NVIDIA-A100-80GB", "kgpu.io/good": "true"},
        },
        "spec": {"taints": [GOOD_TAINT]},
        "status": {
            "capacity": allocatable,
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def good_pod(name: str, queue: bool) -> Obj:
    """A pod only the good nodes take (by selector and toleration), in Queue ``good``."""
    resource, amount = GOOD_PODS[name]
    resources: Obj = {"requests": {"cpu": "1", "memory": "1Gi"}}
    if resource:
        resources["limits"] = {resource: amount}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": GOOD,
            "labels": {"kgpu.io/queue": GOOD} if queue else {},
            "annotations": {} if resource else {"gpu-fraction": "0.5"},
        },
        "spec": {
            "schedulerName": "kgpu-scheduler",
            "nodeSelector": {"kgpu.io/good": "true"},
            "tolerations": [{"key": "kgpu.io/good", "operator": "Exists"}],
            "containers": [{"name": "main", "image": "example/train:1", "resources": resources}],
        },
    }


GOOD_QUEUE: Obj = {
    "apiVersion": "kgpu.io/v1alpha1",
    "kind": "Queue",
    "metadata": {"name": GOOD},
    "spec": {"deserved": {"gpu": "8"}, "limit": {"gpu": "8"}, "namespaces": [GOOD]},
}


def simulate(directory: Path, docs: list[Any]) -> tuple[int, str, Obj | None]:
    directory.joinpath("cluster.yaml").write_text(
        yaml.safe_dump_all(docs, width=1 << 30, allow_unicode=False), encoding="utf-8"
    )
    out = directory / "run.json"
    result = CliRunner().invoke(
        main, ["simulate", "manifests", str(directory), "--json", str(out)], env={"COLUMNS": "200"}
    )
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception  # a crash: shown with its traceback
    assert result.exit_code in (0, 1), result.output
    assert "Traceback" not in result.output
    if result.exit_code == 1:
        assert result.output.strip(), "an error without a message"
        return 1, result.output, None
    return 0, result.output, json.loads(out.read_text())


@settings(HOSTILE_SETTINGS, max_examples=150)
@given(
    hostile=batches(
        ("h-node-0", "h-node-1", "h-missing"), ((0, 3), (0, 8), (0, 4), (0, 2), (0, 1))
    ),
    with_queue=st.booleans(),
)
def test_the_simulator_refuses_hostile_objects_alone_and_places_the_good_pods(
    hostile: list[Obj], with_queue: bool
) -> None:
    good = [good_node("good-0"), good_node("good-1")]
    good += [good_pod(name, with_queue) for name in GOOD_PODS]
    if with_queue:
        good.append(GOOD_QUEUE)
    with tempfile.TemporaryDirectory() as directory:
        code, output, run = simulate(Path(directory), [*hostile, *good])
    assert code == 0 and run is not None, output
    results = {r["pod"]: r for r in run["pods"]}
    for name in GOOD_PODS:
        placed = results[f"{GOOD}/{name}"]
        assert placed["status"] == "Scheduled", (placed, output[-2000:])
        assert placed["node"] in ("good-0", "good-1")
    use: dict[tuple[str, int], int] = {}
    for result in run["pods"]:
        if result["status"] == "Scheduled":
            for minor in result["gpus"]:
                key = (result["node"], minor)
                use[key] = use.get(key, 0) + result["gpu_milli"]
    assert all(milli <= 1000 for milli in use.values()), use
    assert all(free >= 0 for node in run["nodes"] for free in node["gpu_free_milli"])
    hostile_pods = [r for r in run["pods"] if not r["pod"].startswith(f"{GOOD}/")]
    unread = [r for r in hostile_pods if r["status"] != "Scheduled" and r["message"]]
    tally("kgpu simulate manifests", len(hostile), len(unread) + len(run["notes"]))
