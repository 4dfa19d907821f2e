"""``kgpu simulate manifests`` with DRA objects: the example (NVIDIA-shaped slices of GPUs
and MIG devices) placed and its claims allocated; bad DRA objects skipped alone; the
DraClaims filter on its own."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import yaml
from click.testing import CliRunner

from kgpu.cli import main
from kgpu.framework.cycle import CycleState
from kgpu.model.pod import PodKey, PodSpec
from kgpu.plugins import names
from kgpu.plugins.node.dra_claims import CODE, DraClaims
from kgpu.plugins.registry import PluginContext, default_registry
from kgpu.sim.manifest_results import PodStatus
from kgpu.sim.manifests import simulate_manifests
from kgpu.state.cluster import ClusterState
from tests.builders import make_node
from tests.dra_fixtures import claim, exactly, gpu, inventory, slice_, wants

EXAMPLES = Path(__file__).parent.parent / "examples" / "dra"


def test_the_example_places_pods_and_allocates_their_claims() -> None:
    run = simulate_manifests(EXAMPLES)
    by_pod = {r.pod: r for r in run.results}
    assert {k: (str(r.status), r.node) for k, r in by_pod.items()} == {
        "ml/train": ("Scheduled", "dra-h100-0"),
        "ml/infer": ("Scheduled", "dra-a100-0"),
        "ml/notebook": ("Scheduled", "dra-a100-0"),
        "ml/big": ("Pending", ""),
    }
    assert by_pod["ml/train"].resource_claims == (
        "ml/train-gpus: gpus=gpu.nvidia.com/dra-h100-0/gpu-0, gpus=gpu.nvidia.com/dra-h100-0/gpu-1 (node dra-h100-0)",
    )
    assert by_pod["ml/infer"].resource_claims == (
        "ml/small-mig: mig/medium=gpu.nvidia.com/dra-a100-0/gpu-1-mig-3g20gb-0 (node dra-a100-0)",
    )
    assert by_pod["ml/notebook"].resource_claims == (
        "ml/ampere-gpu: gpu=gpu.nvidia.com/dra-a100-0/gpu-0 (node dra-a100-0)",
    )
    # The pending pod's message names, per node, the request and the selector that failed.
    assert by_pod["ml/big"].message == (
        "0/2 nodes are available: "
        '1 node(s) cannot allocate the claims: claim ml/big-gpu request "gpu": needs 1 device(s), '
        "0 of 2 fit (2 allocated to another claim), "
        '1 node(s) cannot allocate the claims: claim ml/big-gpu request "gpu": needs 1 device(s), '
        '0 of 3 fit (1 request selector #0 false, 2 class "gpu.nvidia.com" selector #0 false).'
    )
    assert run.notes == []


def test_the_command_shows_the_claims_and_writes_them_as_json(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    result = CliRunner().invoke(
        main, ["simulate", "manifests", str(EXAMPLES), "--json", str(out)], env={"COLUMNS": "300"}
    )
    assert result.exit_code == 0, result.output
    assert (
        "ml/infer: claim ml/small-mig: mig/medium=gpu.nvidia.com/dra-a100-0/gpu-1-mig-3g20gb-0"
        in result.output
    )
    pods = {p["pod"]: p for p in json.loads(out.read_text())["pods"]}
    assert pods["ml/notebook"]["resource_claims"] == [
        "ml/ampere-gpu: gpu=gpu.nvidia.com/dra-a100-0/gpu-0 (node dra-a100-0)"
    ]
    assert "resource_claims" not in pods["ml/big"]


def test_a_bad_dra_object_is_skipped_alone_and_a_bad_pod_claim_keeps_its_pod_pending(
    tmp_path: Path,
) -> None:
    for path in EXAMPLES.glob("*.yaml"):
        shutil.copy(path, tmp_path / path.name)
    docs = list(yaml.safe_load_all((tmp_path / "slices.yaml").read_text()))
    docs[1]["spec"]["devices"][0]["attributes"]["index"] = {"int": "zero"}
    (tmp_path / "slices.yaml").write_text(yaml.safe_dump_all(docs))
    pods = list(yaml.safe_load_all((tmp_path / "workloads.yaml").read_text()))
    pods[-1]["spec"]["resourceClaims"][0]["resourceClaimName"] = "also"
    (tmp_path / "workloads.yaml").write_text(yaml.safe_dump_all(pods))
    run = simulate_manifests(tmp_path)
    assert run.notes == [
        "slices.yaml#2: skipped: ResourceSlice dra-a100-0-gpu.nvidia.com: "
        'spec.devices[0].attributes[index].int is "zero", expected a 64-bit integer'
    ]
    by_pod = {r.pod: r for r in run.results}
    assert by_pod["ml/train"].status == PodStatus.SCHEDULED  # dra-h100-0's slice still read
    assert by_pod["ml/infer"].status == PodStatus.PENDING  # dra-a100-0 has no devices now
    assert by_pod["ml/big"].message == (
        "Pod ml/big: spec.resourceClaims[0] is "
        '{"name": "gpu", "resourceClaimName": "also", "resourceClaimTemplateName": "one-80g-gpu"}, '
        "expected exactly one of resourceClaimName and resourceClaimTemplateName"
    )


def test_pods_without_claims_pass_and_pods_with_them_are_filtered() -> None:
    state = ClusterState([make_node("n1").build(), make_node("n2").build()])
    inv = inventory([slice_("n1", gpu(0))], [claim("c", [{"name": "g", "exactly": exactly()}])])
    wants(inv, "p", "c")
    plugin = default_registry()[names.DRA_CLAIMS]({}, PluginContext(dra=inv))
    assert isinstance(plugin, DraClaims)
    nodes = np.array([0, 1], dtype=np.int64)
    plain = PodSpec(PodKey("ml/plain"))
    assert plugin.filter(CycleState(state, plain), plain, nodes).ok.tolist() == [True, True]
    pod = PodSpec(PodKey("ml/p"))
    verdicts = plugin.filter(CycleState(state, pod), pod, nodes)
    assert verdicts.ok.tolist() == [True, False]
    ((reason, mask),) = verdicts.rejected
    assert reason.code == CODE and mask.tolist() == [False, True]
    assert reason.phrase == (
        'node(s) cannot allocate the claims: claim ml/c request "g": needs 1 device(s), '
        "0 of 0 fit (the node has no device)"
    )
    # Without DRA objects the plugin lets every pod through.
    bare = DraClaims()
    assert bare.filter(CycleState(state, pod), pod, nodes).ok.tolist() == [True, True]


def test_explain_of_a_pending_pod_names_the_request_that_failed() -> None:
    result = CliRunner().invoke(
        main,
        ["simulate", "manifests", str(EXAMPLES), "--explain", "ml/big"],
        env={"COLUMNS": "300"},
    )
    assert result.exit_code == 0, result.output
    assert "Pod ml/big is pending" in result.output
    assert 'claim ml/big-gpu request "gpu": needs 1 device(s), 0 of 2 fit' in result.output
