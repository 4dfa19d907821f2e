"""`kgpu simulate manifests` with the capacity-card seed's Volcano Queue and Jobs, expanded
as Volcano's job controller would (kgpu/kube/anchors/volcano_job.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kgpu.kube.anchors.volcano_job import expand_job
from kgpu.kube.objects.fields import ConversionError
from kgpu.sim.manifest_results import ManifestRun, PodStatus
from kgpu.sim.manifests import simulate_manifests
from tests import volcano_seed as seed

Obj = dict[str, Any]


def _node(name: str, product: str, gpus: int = 4) -> str:
    return f"""\
apiVersion: v1
kind: Node
metadata:
  name: {name}
  labels:
    nvidia.com/gpu.product: "{product}"
    nvidia.com/gpu.count: "{gpus}"
status:
  allocatable:
    cpu: "32"
    memory: "256Gi"
    nvidia.com/gpu: "{gpus}"
"""


def _run(tmp_path: Path, *texts: str) -> ManifestRun:
    tmp_path.joinpath("all.yaml").write_text("---\n".join(texts))
    return simulate_manifests(tmp_path)


def _placed(run: ManifestRun) -> dict[str, str]:
    return {r.pod: r.node for r in run.results if r.status == PodStatus.SCHEDULED}


def _two_a100_nodes() -> str:
    return _node("a100-0", seed.A100) + "---\n" + _node("a100-1", seed.A100)


def test_example_1_the_job_is_enqueued_and_its_four_tasks_placed(tmp_path: Path) -> None:
    run = _run(tmp_path, _two_a100_nodes(), seed.EXAMPLE_1_QUEUE, seed.EXAMPLE_1_JOB)
    assert sorted(_placed(run)) == [f"default/training-default0-{i}" for i in range(4)]
    assert run.session and run.notes == []


def test_the_card_quota_of_five_holds_at_five(tmp_path: Path) -> None:
    job = seed.with_replicas(seed.EXAMPLE_1_JOB, 6)
    run = _run(tmp_path, _two_a100_nodes(), seed.EXAMPLE_1_QUEUE, job)
    assert len(_placed(run)) == 5
    [waiting] = [r for r in run.results if r.status == PodStatus.PENDING]
    assert waiting.message == f"queue team-a: {seed.A100} requested 1, allocated 5, quota 5"


def test_example_2_one_card_type_for_the_whole_job(tmp_path: Path) -> None:
    """A100|H100: A100 first while its quota lasts; all four on it (quota 5)."""
    nodes = _node("a100-0", seed.A100) + "---\n" + _node("h100-0", seed.H100)
    run = _run(tmp_path, nodes, seed.EXAMPLE_1_QUEUE, seed.EXAMPLE_2_JOB)
    assert set(_placed(run).values()) == {"a100-0"}
    assert len(_placed(run)) == 4


def test_example_3_sixteen_pods_share_four_gpus_by_mps(tmp_path: Path) -> None:
    labels = "".join(f'    {k}: "{v}"\n' for k, v in seed.EXAMPLE_3_NODE_LABELS.items())
    node = f"""\
apiVersion: v1
kind: Node
metadata:
  name: mps-0
  labels:
{labels}status:
  allocatable:
    cpu: "64"
    memory: "512Gi"
    nvidia.com/gpu.shared: "32"
"""
    run = _run(tmp_path, node, seed.EXAMPLE_3_QUEUE, seed.EXAMPLE_3_JOB)
    placed = _placed(run)
    assert len(placed) == 16, run.results
    assert set(placed.values()) == {"mps-0"}
    shares = [(len(r.gpus), r.gpu_milli) for r in run.results if r.status == PodStatus.SCHEDULED]
    assert set(shares) == {(1, 125)}  # one MPS replica each: an eighth of a GPU


def test_the_job_becomes_a_podgroup_and_pods_as_volcanos_controller_makes_them() -> None:
    job = seed.load(seed.EXAMPLE_1_JOB)
    job["metadata"]["uid"] = "1234"
    job["spec"]["priorityClassName"] = "high"
    group, pods = expand_job(job, scheduler_name="kgpu-scheduler")
    assert group == {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": "training-1234",
            "namespace": "default",
            "annotations": {"volcano.sh/card.request": '{"NVIDIA-A100-80GB": 4}'},
        },
        "spec": {
            "minMember": 4,
            "queue": "team-a",
            "priorityClassName": "high",
            "minResources": {"nvidia.com/gpu": "4"},
        },
    }
    assert [p["metadata"]["name"] for p in pods] == [f"training-default0-{i}" for i in range(4)]
    first = pods[0]
    assert first["metadata"]["annotations"] == {
        "volcano.sh/card.name": seed.A100,
        "scheduling.k8s.io/group-name": "training-1234",
        "volcano.sh/job-name": "training",
        "volcano.sh/task-spec": "default0",
        "volcano.sh/queue-name": "team-a",
    }
    assert first["spec"]["schedulerName"] == "kgpu-scheduler"
    assert first["spec"]["priorityClassName"] == "high"


def test_min_available_defaults_to_the_replicas_or_the_tasks_own() -> None:
    job = seed.load(seed.EXAMPLE_1_JOB)
    del job["spec"]["minAvailable"]
    job["spec"]["tasks"].append({"name": "ps", "replicas": 2, "minAvailable": 1,
                                 "template": {"spec": {"containers": []}}})  # fmt: skip
    group, pods = expand_job(job)
    assert group["spec"]["minMember"] == 5
    assert pods[-1]["metadata"]["name"] == "training-ps-1"
    assert pods[-1]["spec"]["schedulerName"] == "volcano"


J = "Job default/training (batch.volcano.sh)"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda j: j["spec"].update(minAvailable=5),
         f"{J}: spec.minAvailable is 5, expected at most the replicas of its tasks (4)"),
        (lambda j: j["spec"].update(minAvailable=-1),
         f"{J}: spec.minAvailable is -1, expected a whole number, at least 0"),
        (lambda j: j["spec"].update(tasks=[]), f"{J}: spec.tasks is [], expected at least one task"),
        (lambda j: j["spec"]["tasks"][0].update(replicas="4"),
         f'{J}: spec.tasks[0].replicas is "4", expected a whole number, at least 0'),
        (lambda j: j["spec"]["tasks"][0].update(template=None),
         f"{J}: spec.tasks[0].template is null, expected a pod template"),
        (lambda j: j["spec"]["tasks"].append(dict(j["spec"]["tasks"][0], name="default0")),
         f'{J}: spec.tasks[1].name is "default0", expected a name no other task of the Job has'),
        (lambda j: j["spec"].update(queue=3), f"{J}: spec.queue is 3, expected a string"),
        (lambda j: j["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"][
            "limits"].update({"nvidia.com/gpu": "x"}),
         f'{J}: spec.tasks[0].template.spec.containers[0].resources[nvidia.com/gpu] is "x"'),
    ],
)  # fmt: skip
def test_malformed_jobs_are_named(change: Any, message: str) -> None:
    job = seed.load(seed.EXAMPLE_1_JOB)
    change(job)
    with pytest.raises(ConversionError) as caught:
        expand_job(job)
    assert str(caught.value).startswith(message)


def test_a_malformed_job_is_skipped_with_a_note(tmp_path: Path) -> None:
    job = seed.EXAMPLE_1_JOB.replace("minAvailable: 4", "minAvailable: 9")
    run = _run(tmp_path, _two_a100_nodes(), seed.EXAMPLE_1_QUEUE, job)
    assert run.results == []
    assert run.notes == [
        f"all.yaml#4: Job training skipped: {J}: spec.minAvailable is 9, expected at "
        "most the replicas of its tasks (4)"
    ]
