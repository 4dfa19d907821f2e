"""`kgpu simulate manifests` with kgpu Queues and PodGroups: one session, as `kgpu run`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from click.testing import CliRunner

from kgpu.cli import main
from kgpu.sim.manifest_results import PodStatus
from kgpu.sim.manifests import simulate_manifests
from tests.test_simulate_manifests import Obj, by_pod, node, pod, write

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "queues"


def queue(name: str, **spec: Any) -> Obj:
    return {"apiVersion": "kgpu.io/v1alpha1", "kind": "Queue", "metadata": {"name": name},
            "spec": spec}  # fmt: skip


def group(name: str, min_member: int, **spec: Any) -> Obj:
    return {"apiVersion": "kgpu.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "ml"},
            "spec": {"minMember": min_member, **spec}}  # fmt: skip


def member(name: str, of: str, gpus: int, **spec: Any) -> Obj:
    obj = pod(name, gpus=gpus, **spec)
    obj["metadata"]["annotations"] = {"scheduling.k8s.io/group-name": of}
    return obj


def in_queue(name: str, queue: str, gpus: int) -> Obj:
    obj = pod(name, gpus=gpus)
    obj["metadata"]["labels"] = {"kgpu.io/queue": queue}
    return obj


def test_a_gang_that_cannot_fit_whole_waits_and_a_queue_limit_holds(tmp_path: Path) -> None:
    write(tmp_path, "cluster.yaml", node("a100", gpus=8))
    write(
        tmp_path,
        "work.yaml",
        queue("big"),
        queue("small", limit={"gpu": 1}),
        group("train", 3, queue="big"),
        *[member(f"train-{i}", "train", 3) for i in range(3)],
        in_queue("first", "small", 1),
        in_queue("second", "small", 1),
        member("lost", "nowhere", 1),
    )
    run = simulate_manifests(tmp_path, "bestfit")
    found = by_pod(run)
    assert run.session
    gang = "0/1 nodes are available: 1 insufficient GPU. (gang ml/train: 2 of 3 pods fit)"
    assert {k: (r.status, r.message) for k, r in found.items() if k.startswith("ml/train")} == {
        f"ml/train-{i}": (PodStatus.PENDING, gang) for i in range(3)
    }
    assert (found["ml/first"].status, found["ml/first"].node) == (PodStatus.SCHEDULED, "a100")
    assert (found["ml/second"].status, found["ml/second"].message) == (
        PodStatus.PENDING,
        "queue small: gpu requested 1, allocated 1, quota 1",
    )
    assert (found["ml/lost"].status, found["ml/lost"].message) == (
        PodStatus.PENDING,
        "PodGroup ml/nowhere does not exist",
    )


def test_a_podgroups_priority_class_preempts_and_the_cli_says_who_went(tmp_path: Path) -> None:
    write(tmp_path, "cluster.yaml", node("a100", gpus=2))
    high = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": "high"}, "value": 1000}  # fmt: skip
    write(
        tmp_path,
        "work.yaml",
        high,
        *[pod(f"old-{i}", gpus=1, nodeName="a100") for i in range(2)],
        group("urgent", 1, priorityClassName="high"),
        member("urgent-0", "urgent", 1),
    )
    run = simulate_manifests(tmp_path, "bestfit")
    found = by_pod(run)
    message = "preempted by ml/urgent (priority 1000) in queue default"
    statuses = sorted((found[f"ml/old-{i}"].status, found[f"ml/old-{i}"].message) for i in range(2))
    assert statuses == [(PodStatus.EVICTED, message), (PodStatus.RUNNING, "")]
    urgent = found["ml/urgent-0"]
    assert (urgent.status, urgent.node, len(urgent.gpus)) == (PodStatus.NOMINATED, "a100", 1)
    result = CliRunner().invoke(
        main, ["simulate", "manifests", str(tmp_path), "--policy", "bestfit",
               "--explain", "ml/urgent-0"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "placed=1 pending=0 nominated=1 evicted=1" in result.output
    assert result.output.rstrip().endswith("once the pods evicted for its job are gone.")


def test_a_malformed_queue_is_a_note_and_its_jobs_wait(tmp_path: Path) -> None:
    write(tmp_path, "cluster.yaml", node("a100", gpus=2))
    write(
        tmp_path,
        "work.yaml",
        queue("bad", deserved={"gpu": "two"}),
        queue("good"),
        in_queue("a", "bad", 1),
        in_queue("b", "good", 1),
        group("unused", 1),
    )
    run = simulate_manifests(tmp_path, "bestfit")
    found = by_pod(run)
    assert found["ml/b"].status == PodStatus.SCHEDULED
    assert (found["ml/a"].status, found["ml/a"].message) == (
        PodStatus.PENDING,
        "queue bad does not exist or is invalid",
    )
    assert run.notes == [
        'Queue bad: spec.deserved[gpu] is "two", expected a quantity such as 500m, 4, 1.5, '
        "8Gi or 1e3; the queue is left out"
    ]
    result = CliRunner().invoke(main, ["simulate", "manifests", str(tmp_path), "--explain", "ml/a"])
    assert result.exit_code == 0, result.output
    assert "Pod ml/a waits: queue bad does not exist or is invalid" in result.output.splitlines()


def test_the_queues_example_reclaims_what_vision_borrowed_for_the_nlp_gang() -> None:
    result = CliRunner().invoke(main, ["simulate", "manifests", str(EXAMPLE)])
    assert result.exit_code == 0, result.output
    assert "placed=8 pending=1 nominated=4 evicted=4" in result.output
    run = simulate_manifests(EXAMPLE, "bestfit")
    found = by_pod(run)
    evicted = sorted(k for k, r in found.items() if r.status == PodStatus.EVICTED)
    assert len(evicted) == 4 and all(k.startswith("vision/") for k in evicted)
    assert {found[k].message for k in evicted} == {"reclaimed by queue nlp for nlp/llm"}
    assert [found[f"nlp/llm-{i}"].status for i in range(4)] == [PodStatus.NOMINATED] * 4
    assert found["vision/vision-extra"].message == (
        "queue vision: gpu requested 1, allocated 12, quota 12"
    )
