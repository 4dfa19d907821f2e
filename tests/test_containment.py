"""Hostile objects refused alone (issue #18, failure 1): JSON nested 50,000 deep, numbers no
cluster holds, a node claiming a million GPUs, YAML bombs. Through the webhook's review and
``kgpu simulate manifests``; the live scheduler's side is in test_containment_live.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from kgpu.cli import main
from kgpu.kube.admission.review import review
from kgpu.model.json_text import JsonTextError, json_depth, read_json
from kgpu.model.limits import show_json
from tests.test_simulate_manifests import node, pod
from tests.test_webhook import queue
from tests.test_webhook import review as admission

Obj = dict[str, Any]
DEEP_ARRAY = "[" * 50_000 + "]" * 50_000
DEEP_OBJECT = '{"a":' * 40_000 + "1" + "}" * 40_000


def test_depth_is_measured_without_recursion_and_strings_do_not_count() -> None:
    assert json_depth(DEEP_ARRAY) == 50_000
    assert json_depth('{"gpu": [{"minor": 0, "note": "[[[[{{"}]}') == 3
    assert json_depth('"\\"[[["') == 0
    assert read_json('{"a": [1]}') == {"a": [1]}
    with pytest.raises(JsonTextError, match=r"^nested 50000 deep, at most 32$"):
        read_json(DEEP_ARRAY)
    with pytest.raises(JsonTextError, match=r"^262145 characters long, at most 262144$"):
        read_json(" " * (256 * 1024 + 1))
    # Found by tests/test_hostile_webhook.py: Python's own cap on an integer's digits is a
    # plain ValueError that ended the webhook's request.
    with pytest.raises(JsonTextError, match=r"^a number of more than 4300 digits$"):
        read_json("[" + "9" * 5000 + "]")


def test_a_message_shows_a_value_cut_short_even_one_that_stands_for_billions() -> None:
    assert show_json("x" * 1_000_000) == '"' + "x" * 199 + "… (1000002 characters)"
    bomb: list[Any] = ["v"]
    for _ in range(30):
        bomb = [bomb, bomb]  # 2^30 leaves, shared
    shown = show_json(bomb)
    assert len(shown) == 201 and shown.endswith("…")


# ---------------------------------------------------------------------------- the webhook

QUOTA = "volcano.sh/card.quota"
REQUEST = "volcano.sh/card.request"


def _denied(obj: Obj) -> str:
    response = review(admission(obj), "kgpu-scheduler")["response"]
    assert response["allowed"] is False, response
    return str(response["status"]["message"])


def test_the_webhook_denies_card_json_nested_40000_deep_with_a_message() -> None:
    message = _denied(queue({QUOTA: DEEP_OBJECT}))
    assert message.startswith(f'Queue team-a: annotation {QUOTA} is "{{\\"a\\":{{')
    assert message.endswith(
        "expected a JSON object of card names to whole numbers of cards, such as "
        '{"NVIDIA-A100-80GB": 8} (nested 40000 deep, at most 32)'
    )
    assert "… (" in message and len(message) < 600  # the value is shown cut short
    group: Obj = {
        "apiVersion": "kgpu.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "ml", "annotations": {REQUEST: DEEP_OBJECT}},
        "spec": {"minMember": 1},
    }
    assert _denied(group).endswith("(nested 40000 deep, at most 32)")
    volcano = queue({QUOTA: DEEP_OBJECT})
    volcano["apiVersion"] = "scheduling.volcano.sh/v1beta1"
    assert _denied(volcano).endswith("(nested 40000 deep, at most 32)")


@pytest.mark.parametrize(
    ("requests", "message"),
    [
        (
            {"cpu": "1e16"},
            "Pod default/p: resource cpu is 10000000000000000, expected at most 1048576 CPUs, "
            "more than any node holds",
        ),
        (
            {"nvidia.com/gpu": "1000000"},
            "Pod default/p: resource nvidia.com/gpu is 1000000, expected at most 256 GPUs, "
            "more than any node holds",
        ),
        (
            {"cpu": "1" * 5000},
            "Pod default/p: spec.containers[0].resources.requests[cpu] is "
            f'"{"1" * 199}… (5002 characters), expected a quantity of at most 64 characters',
        ),
    ],
)
def test_the_webhook_denies_requests_no_node_holds(requests: Obj, message: str) -> None:
    obj = pod_of_ours(requests)
    assert _denied(obj) == message


def pod_of_ours(requests: Obj, annotations: dict[str, str] | None = None) -> Obj:
    obj = pod("p")
    obj["metadata"] = {"name": "p", "namespace": "default", "annotations": annotations or {}}
    obj["spec"]["schedulerName"] = "kgpu-scheduler"
    obj["spec"]["containers"][0]["resources"] = {"requests": requests}
    return obj


def test_the_webhook_denies_a_card_quota_of_5000_digits() -> None:
    message = _denied(queue({QUOTA: "9" * 5000}))
    assert message.endswith("(a number of more than 4300 digits)")


def test_the_webhook_denies_gpu_memory_of_5000_digits() -> None:
    message = _denied(pod_of_ours({"cpu": "1"}, {"gpu-memory": "9" * 5000}))
    assert message.endswith("expected a whole number of MiB, at most 1048576 (one GPU's)")


# ---------------------------------------------------------------------------- the simulator


def simulate(directory: Path, *docs: Obj, text: str = "") -> tuple[str, dict[str, Obj]]:
    """``kgpu simulate manifests`` over a folder holding ``docs`` (or ``text``): what it
    printed, and each pod's outcome by name; a crash fails the test."""
    directory.mkdir()
    directory.joinpath("cluster.yaml").write_text(
        text or yaml.safe_dump_all(docs, width=1 << 30), encoding="utf-8"
    )
    out = directory / "run.json"
    result = CliRunner().invoke(
        main,
        ["simulate", "manifests", str(directory), "--json", str(out)],
        env={"COLUMNS": "300"},
    )
    assert result.exit_code == 0, (result.output, result.exception)
    pods = json.loads(out.read_text())["pods"]
    return result.output, {p["pod"]: p for p in pods}


def test_hostile_nodes_are_skipped_and_the_good_one_schedules(tmp_path: Path) -> None:
    memory = node("memory", gpus=2)
    memory["metadata"]["labels"]["nvidia.com/gpu.memory"] = "99999999999999999999"
    huge = node("huge", gpus=1_000_000)
    huge["status"]["allocatable"]["cpu"] = "1e9"
    cpus = node("cpus", gpus=2)
    cpus["status"]["allocatable"]["cpu"] = "1e9"
    linked = node("linked", gpus=2)
    linked["metadata"]["annotations"] = {"kgpu.io/gpu-topology": DEEP_ARRAY}
    output, pods = simulate(
        tmp_path / "c", memory, huge, cpus, linked, node("good", gpus=1), pod("p", 1)
    )
    assert pods["ml/p"]["node"] == "good"
    assert (
        'Node memory: label nvidia.com/gpu.memory is "99999999999999999999", expected a whole '
        "number of MiB, at most 1048576" in output
    )
    assert (
        'Node huge: label nvidia.com/gpu.count is "1000000", expected a whole number, at most 256'
        in output
    )
    assert 'Node cpus: status.allocatable[cpu] is "1e9", expected at most 1048576 CPUs' in output
    assert (
        "Node linked: annotation kgpu.io/gpu-topology is " in output
        and "expected JSON within kgpu's bounds (nested 50000 deep, at most 32)" in output
    )


def test_pods_asking_1e16_cpus_are_refused_and_the_rest_schedule(tmp_path: Path) -> None:
    greedy = []
    for i in range(100):
        p = pod(f"greedy-{i}")
        p["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1e16"
        greedy.append(p)
    _, pods = simulate(tmp_path / "c", node("n1", gpus=2), *greedy, pod("good", 1))
    assert pods["ml/good"]["status"] == "Scheduled"
    assert pods["ml/greedy-7"]["status"] == "Pending"
    assert pods["ml/greedy-7"]["message"] == (
        "Pod ml/greedy-7: resource cpu is 10000000000000000, expected at most 1048576 CPUs, "
        "more than any node holds"
    )


def test_card_json_nested_40000_deep_refuses_its_object_alone(tmp_path: Path) -> None:
    queue_obj: Obj = {
        "apiVersion": "kgpu.io/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": "team-a", "annotations": {QUOTA: DEEP_OBJECT}},
        "spec": {},
    }
    group: Obj = {
        "apiVersion": "kgpu.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "ml", "annotations": {REQUEST: DEEP_OBJECT}},
        "spec": {"minMember": 1},
    }
    member = pod("member", 1)
    member["metadata"]["annotations"]["scheduling.k8s.io/group-name"] = "g"
    output, pods = simulate(
        tmp_path / "c", node("n1", gpus=2), queue_obj, group, member, pod("good", 1)
    )
    assert pods["ml/good"]["status"] == "Scheduled"
    assert "(nested 40000 deep, at most 32)" in output


def test_a_bound_pod_with_an_allocation_nested_50000_deep_is_accounted(tmp_path: Path) -> None:
    running = pod("running", 1, nodeName="n1")
    running["metadata"]["annotations"]["kgpu.io/device-allocation"] = DEEP_ARRAY
    _, pods = simulate(tmp_path / "c", node("n1", gpus=2), running, pod("good", 1))
    assert pods["ml/good"]["status"] == "Scheduled"
    assert pods["ml/good"]["node"] == "n1"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "kind: Pod\nmetadata: {name: x, labels: " + "[" * 5000 + "]" * 5000 + "}\n",
            "values nested more than 100 deep",
        ),
        (
            "a: &a [v, v, v, v, v, v, v, v, v, v]\n"
            + "".join(
                f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n"
                for i in range(8)
            ),
            "more than 10000000 values in one document, aliases expanded",
        ),
    ],
)
def test_yaml_too_deep_or_a_billion_laughs_is_an_error_not_a_crash(
    tmp_path: Path, text: str, message: str
) -> None:
    tmp_path.joinpath("bomb.yaml").write_text(text, encoding="utf-8")
    result = CliRunner().invoke(main, ["simulate", "manifests", str(tmp_path)])
    assert result.exit_code == 1, result.output
    assert message in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_a_second_dialect_is_refused_naming_the_first_cut_short() -> None:
    """Found by the hostile-object generator: the first dialect was shown as written, so a
    50,000-character gpu-fraction made a 50,000-character denial."""
    from kgpu.kube.objects.node_pod import ConversionError, pod_from_k8s

    deep = '{"a":' * 5000 + "1" + "}" * 5000
    limits = {"nvidia.com/gpu.shared": "2"}
    obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "n", "annotations": {"gpu-fraction": deep}},
        "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]},
    }
    with pytest.raises(ConversionError) as caught:
        pod_from_k8s(obj)
    said = str(caught.value)
    assert said.startswith(
        "Pod n/p: resource nvidia.com/gpu.shared is 2, expected no nvidia.com/gpu.shared on a "
        'pod that requests gpu-fraction: {"a":'
    )
    assert len(said) < 400
