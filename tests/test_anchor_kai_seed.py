"""Seed 001's KAI examples (fraction, memory, queue) in ``kgpu simulate manifests``, with
KAI's own Queues and a PodGroup as its pod grouper writes it: each behaves as the seed says
(tests/test_e2e_anchor_kai.py shows the same live)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kgpu.sim.manifest_results import PodStatus
from kgpu.sim.manifests import simulate_manifests
from tests.kube_objects import node_obj
from tests.seed_kai import GPU_MEMORY, GPU_SHARING, QUEUES


def _setup(directory: Path, queues: list[dict[str, Any]] | None = None) -> None:
    directory.joinpath("0-node.yaml").write_text(yaml.safe_dump(node_obj("a100-0", gpus=1)))
    text = QUEUES if queues is None else yaml.safe_dump_all(queues)
    directory.joinpath("1-queues.yaml").write_text(text)
    directory.joinpath("2-gpu-memory.yaml").write_text(GPU_MEMORY)
    # The seed's two pods share a name: applied together, the second needs its own namespace.
    sharing = yaml.safe_load(GPU_SHARING)
    sharing["metadata"]["namespace"] = "team-b"
    directory.joinpath("3-gpu-sharing.yaml").write_text(yaml.safe_dump(sharing))


def _results(directory: Path) -> dict[str, tuple[str, str, tuple[int, ...], int, str]]:
    run = simulate_manifests(directory)
    assert run.session  # KAI's Queues make it a session, as live
    return {r.pod: (r.status.value, r.node, r.gpus, r.gpu_milli, r.message) for r in run.results}


def test_the_memory_and_fraction_pods_share_one_gpu_in_queue_test(tmp_path: Path) -> None:
    _setup(tmp_path)
    assert _results(tmp_path) == {
        # 2000 MiB of an 81920 MiB A100: 25 milli-GPU; half a GPU: 500
        "default/gpu-sharing": ("Scheduled", "a100-0", (0,), 25, ""),
        "team-b/gpu-sharing": ("Scheduled", "a100-0", (0,), 500, ""),
    }


def test_the_kai_queue_test_holds_its_pods_to_its_gpu_limit(tmp_path: Path) -> None:
    queues = list(yaml.safe_load_all(QUEUES))
    queues[1]["spec"]["resources"]["gpu"] = {"quota": 0, "limit": 0.5}
    _setup(tmp_path, queues)
    results = _results(tmp_path)
    assert results["default/gpu-sharing"][:2] == ("Scheduled", "a100-0")
    assert results["team-b/gpu-sharing"] == (
        "Pending",
        "",
        (),
        0,
        "queue test: gpu requested 0.5, allocated 0.025, quota 0.5",
    )


def test_pods_of_a_queue_that_does_not_exist_wait(tmp_path: Path) -> None:
    queues = list(yaml.safe_load_all(QUEUES))
    queues[1]["metadata"]["name"] = "other"
    _setup(tmp_path, queues)
    for status, _, _, _, message in _results(tmp_path).values():
        assert (status, message) == ("Pending", "queue test does not exist or is invalid")


def test_a_kai_podgroup_is_a_gang(tmp_path: Path) -> None:
    """Two pods of 0.6 GPU the pod grouper put in one PodGroup of minMember 2, where the
    one GPU has room for one: neither starts alone (and the seed's pods, after them in job
    order, take the room); a malformed KAI PodGroup holds its own pods only, with why."""
    _setup(tmp_path)
    group = {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "pg-train", "namespace": "ml"},
        "spec": {"minMember": 2, "queue": "test"},
    }
    broken = {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "pg-broken", "namespace": "ml"},
        "spec": {"minMember": 0, "queue": "test"},
    }
    docs: list[dict[str, Any]] = [group, broken]
    for name, pg in (("w0", "pg-train"), ("w1", "pg-train"), ("solo", "pg-broken")):
        pod = yaml.safe_load(GPU_SHARING)
        pod["metadata"].update(name=name, namespace="ml")
        pod["metadata"]["annotations"] = {"gpu-fraction": "0.6", "pod-group-name": pg}
        docs.append(pod)
    tmp_path.joinpath("4-gang.yaml").write_text(yaml.safe_dump_all(docs))
    results = _results(tmp_path)
    assert results["ml/w0"][0] == results["ml/w1"][0] == "Pending"
    assert results["team-b/gpu-sharing"][:3] == ("Scheduled", "a100-0", (0,))
    assert results["ml/solo"][0] == "Pending"
    assert results["ml/solo"][4] == (
        "KAI PodGroup ml/pg-broken: spec.minMember is 0, expected a whole number, at least 1; "
        "its pods are not scheduled until it is fixed"
    )
    assert results["default/gpu-sharing"][0] == PodStatus.SCHEDULED.value
