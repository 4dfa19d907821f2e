"""Koordinator's objects read into kgpu (kgpu.kube.anchors.koordinator): koordlet's node
resources, its Device, and the ``scheduling.koordinator.sh/device-allocated`` record, with
the exact message for every value that cannot be read."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from kgpu.cli import main
from kgpu.kube.anchors.koordinator import (
    DEVICE_ALLOCATED_ANNOTATION,
    KOORDINATOR_DEVICES,
    advertised_gpus,
    asked_in_koordinator_names,
    device_allocated,
    device_by_node,
    devices_from_device,
    is_koordinator_device,
    koordinator_notes,
    node_info,
)
from kgpu.kube.install.bundle import render_objects
from kgpu.kube.install.options import InstallOptions
from kgpu.kube.install.rbac import KOORDINATOR_GROUP
from kgpu.kube.objects.device_allocation import ALLOCATION_ANNOTATION, render
from kgpu.kube.objects.fields import ConversionError, show
from kgpu.kube.objects.node_pod import node_from_k8s, pod_from_k8s
from kgpu.model.devices import Device
from kgpu.sim.manifests import simulate_manifests
from tests import koordinator_seed as seed
from tests.test_least_privilege import grants

Obj = dict[str, Any]
UUID0 = "GPU-98583a5c-c155-9cf6-f955-03c189d3dbfb"
UUID1 = "GPU-7f6410b9-bdf7-f9a5-de09-aa5ec31a7124"


# ---------------------------------------------------------------------------- node resources


def koord_node(**allocatable: str) -> Obj:
    return seed.node("n", allocatable)


def test_the_seeds_node_reads_as_four_gpus_of_8gi() -> None:
    node = seed.node_a()
    assert advertised_gpus(node) == (4, 8192)
    info = node_info(node)
    assert (info.gpu_count, info.gpu_memory_mib, info.rdma, info.fpga) == (4, 8192, 1, 1)
    # Before: "no GPU" (node_from_k8s alone knows no Koordinator resource).
    assert node_from_k8s(node).gpu_count == 0


@pytest.mark.parametrize(
    ("allocatable", "expected"),
    [
        ({"koordinator.sh/gpu-core": "800", "koordinator.sh/gpu-memory": "640Gi",
          "koordinator.sh/gpu-memory-ratio": "800"}, (8, 81920)),
        # Both spellings while koordlet moves to the new names: they agree.
        ({"kubernetes.io/gpu-memory-ratio": "200", "koordinator.sh/gpu-memory-ratio": "200",
          "kubernetes.io/gpu-memory": "16Gi"}, (2, 8192)),
        ({"kubernetes.io/gpu-memory-ratio": "200"}, (2, 0)),  # memory unknown
        ({"kubernetes.io/gpu-memory-ratio": "0", "kubernetes.io/gpu-core": "0"}, (0, 0)),
        ({"kubernetes.io/gpu-memory-ratio": "300", "kubernetes.io/gpu-memory": "1Gi"}, (3, 341)),
        ({"cpu": "8"}, None),
    ],
)  # fmt: skip
def test_node_resource_mapping(allocatable: dict[str, str], expected: object) -> None:
    assert advertised_gpus(koord_node(**allocatable)) == expected


def test_capacity_is_read_when_a_hand_written_node_has_no_allocatable() -> None:
    node = koord_node(**{"kubernetes.io/gpu-memory-ratio": "100"})
    node["status"] = {"capacity": node["status"]["capacity"]}
    assert advertised_gpus(node) == (1, 0)


def test_the_device_plugin_and_gfd_win_over_koordlets_figures() -> None:
    node = koord_node(
        **{"nvidia.com/gpu": "2", "kubernetes.io/gpu-memory-ratio": "400",
           "kubernetes.io/gpu-memory": "32Gi"}
    )  # fmt: skip
    info = node_info(node)
    assert (info.gpu_count, info.gpu_memory_mib) == (2, 8192)  # memory: no GFD label
    node["metadata"]["labels"] = {"nvidia.com/gpu.memory": "40960"}
    assert node_info(node).gpu_memory_mib == 40960


def test_a_node_without_koordinator_resources_reads_exactly_as_before() -> None:
    node = seed.node("plain", {"nvidia.com/gpu": "4"}, {"nvidia.com/gpu.memory": "81920"})
    assert node_info(node) == node_from_k8s(node)
    assert advertised_gpus(node) is None


R, C, M = (
    "kubernetes.io/gpu-memory-ratio",
    "kubernetes.io/gpu-core",
    "kubernetes.io/gpu-memory",
)
A = "status.allocatable"


@pytest.mark.parametrize(
    ("allocatable", "message"),
    [
        ({M: "32GB", R: "400"},
         f'Node n: {A}[{M}] is "32GB", expected a quantity such as 500m, 4, 1.5, 8Gi or 1e3'),
        ({R: "abc"}, f'Node n: {A}[{R}] is "abc", expected a quantity such as 500m, 4, 1.5, 8Gi or 1e3'),
        ({R: "-100"}, f'Node n: {A}[{R}] is "-100", expected a quantity of at least 0'),
        ({R: "150"}, f'Node n: {A}[{R}] is "150", expected a multiple of 100 (100 per GPU)'),
        ({R: "50.5"}, f'Node n: {A}[{R}] is "50.5", expected a multiple of 100 (100 per GPU)'),
        ({R: "25700"}, f'Node n: {A}[{R}] is "25700", expected at most 25600'),
        ({C: "400"},
         f'Node n: {A}[{C}] is "400", expected kubernetes.io/gpu-memory-ratio (or koordinator.sh/) '
         "beside it: a multiple of 100 (100 per GPU)"),
        ({M: "32Gi"},
         f'Node n: {A}[{M}] is "32Gi", expected kubernetes.io/gpu-memory-ratio (or '
         "koordinator.sh/) beside it: a multiple of 100 (100 per GPU)"),
        ({R: "400", C: "300"}, f'Node n: {A}[{C}] is "300", expected 400, as {A}[{R}] says'),
        ({R: "100", M: "2Ti"}, f'Node n: {A}[{M}] is "2Ti", expected at most 1048576Mi per GPU (1 GPUs)'),
        ({R: "200", "koordinator.sh/gpu-memory-ratio": "400"},
         f'Node n: {A}[koordinator.sh/gpu-memory-ratio] is "400", expected 200, as {A}[{R}] says'),
        ({R: ["400"]}, f'Node n: {A}[{R}] is ["400"], expected a quantity such as 500m, 4, 1.5, 8Gi or 1e3'),
    ],
)  # fmt: skip
def test_malformed_node_resources(allocatable: Obj, message: str) -> None:
    with pytest.raises(ConversionError) as caught:
        node_info(koord_node(**allocatable))
    assert str(caught.value) == message


# ---------------------------------------------------------------------------- Device


def test_the_seeds_device_gives_uuids_minors_health_and_memory() -> None:
    devices = devices_from_device(seed.device())
    assert devices.gpus == (
        Device(minor=0, uuid=UUID0, healthy=True, memory_mib=15109),
        Device(minor=1, uuid=UUID1, healthy=True, memory_mib=15109),
    )
    # Its checkpoint names a GPU the Device does not list: that entry is refused, said why.
    assert devices.checkpoints == ()
    assert devices.refused == (
        "Device node-1: annotation node.koordinator.sh/gpu-checkpoints[0].deviceIDs[0] is "
        '"GPU-36b27e44-b086-46f7-f2dc-73c36dc65991", expected the uuid of a GPU in spec.devices',
    )
    info = node_info(seed.node_1(), seed.device())
    assert (info.gpu_count, info.gpu_memory_mib) == (2, 15109)
    assert info.devices is not None and info.devices.gpus[1].uuid == UUID1


def koord_device(*items: Obj, **notes: str) -> Obj:
    return {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "Device",
        "metadata": {"name": "n", "annotations": notes},
        "spec": {"devices": list(items)},
    }


def gpu(minor: int, **kw: Any) -> Obj:
    return {"type": "gpu", "minor": minor, "id": f"GPU-{minor}", "health": True, **kw}


def test_device_field_mapping() -> None:
    devices = devices_from_device(
        koord_device(
            gpu(1, resources={"koordinator.sh/gpu-memory": "80Gi"},
                topology={"socketID": 0, "nodeID": 1, "pcieID": "pci-1", "busID": "0000:1a:00.0"}),
            gpu(0, resources={"kubernetes.io/gpu-memory": "40Gi", "koordinator.sh/gpu-memory": "40Gi"},
                topology={"socketID": 0, "nodeID": 0, "pcieID": "pci-0"}),
            {"type": "gpu", "minor": 2, "id": "GPU-2"},  # health absent: false, as the CRD's default
            {"type": "rdma", "minor": 0, "id": "0000:09:00.0", "health": True},
            {"type": "fpga", "minor": 3, "health": True},
            {"type": "xpu", "minor": 0, "id": "xpu-0"},  # not scheduled by kgpu: skipped
            gpu(3, labels={"a": "b"}, moduleID=7, vfGroups=[], conditions=[]),  # not read
        )
    )  # fmt: skip
    assert devices.gpus == (
        Device(minor=0, uuid="GPU-0", healthy=True, memory_mib=40960, numa=0, pcie="pci-0"),
        Device(minor=1, uuid="GPU-1", healthy=True, memory_mib=81920, numa=1, pcie="pci-1"),
        Device(minor=2, uuid="GPU-2", healthy=False),
        Device(minor=3, uuid="GPU-3", healthy=True),
    )
    assert devices.rdma == (Device(minor=0, uuid="0000:09:00.0"),)
    assert devices.fpga == (Device(minor=3),)
    assert devices.links is not None and devices.links.size == 4


def test_a_koordinator_device_keeps_its_checkpoints() -> None:
    entry = {"podUID": "u1", "resourceName": "nvidia.com/gpu", "deviceIDs": ["GPU-1"]}
    notes = {"node.koordinator.sh/devices-checkpoints": json.dumps([entry])}
    devices = devices_from_device(koord_device(gpu(0), gpu(1), **notes))
    assert [(c.pod_uid, c.device_ids) for c in devices.checkpoints] == [("u1", ("GPU-1",))]


D = "spec.devices[0]"


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ({"type": "tpu", "minor": 0}, f'{D}.type is "tpu", expected one of gpu, rdma, fpga, xpu'),
        ({"minor": 0}, f"{D}.type is missing, expected one of gpu, rdma, fpga, xpu"),
        ({"type": "gpu"}, f"{D}.minor is missing, expected a minor number (0, 1, ...)"),
        ({"type": "gpu", "minor": -1}, f"{D}.minor is -1, expected a minor number (0, 1, ...)"),
        ({"type": "gpu", "minor": True}, f"{D}.minor is true, expected a minor number (0, 1, ...)"),
        ({"type": "gpu", "minor": "0"}, f'{D}.minor is "0", expected a minor number (0, 1, ...)'),
        ({"type": "gpu", "minor": 2**31}, f"{D}.minor is 2147483648, expected a minor number (0, 1, ...)"),
        (gpu(0, id=7), f"{D}.id is 7, expected a string"),
        (gpu(0, id="x" * 254), f"{D}.id is {show('x' * 254)}, expected a device id of at most 253 characters"),
        (gpu(0, health="yes"), f'{D}.health is "yes", expected true or false'),
        (gpu(0, resources=["80Gi"]), f'{D}.resources is ["80Gi"], expected a mapping'),
        (gpu(0, resources={"kubernetes.io/gpu-memory": "80GB"}),
         f'{D}.resources[kubernetes.io/gpu-memory] is "80GB", expected a quantity such as 500m, 4, 1.5, 8Gi or 1e3'),
        (gpu(0, resources={"kubernetes.io/gpu-core": "-1"}),
         f'{D}.resources[kubernetes.io/gpu-core] is "-1", expected a quantity of at least 0'),
        (gpu(0, resources={"kubernetes.io/gpu-memory": "40Gi", "koordinator.sh/gpu-memory": "80Gi"}),
         f'{D}.resources[koordinator.sh/gpu-memory] is "80Gi", expected 40Gi, as resources[kubernetes.io/gpu-memory] says'),
        (gpu(0, resources={"kubernetes.io/gpu-memory": "2Ti"}),
         'Device GPU 0 memory is 2097152, expected at most 1048576 MiB'),
        (gpu(0, topology="numa0"), f'{D}.topology is "numa0", expected a mapping'),
        (gpu(0, topology={"nodeID": "0"}), f'{D}.topology.nodeID is "0", expected a NUMA node or socket number'),
        (gpu(0, topology={"socketID": -2}), f"{D}.topology.socketID is -2, expected a NUMA node or socket number"),
        (gpu(0, topology={"pcieID": 3}), f"{D}.topology.pcieID is 3, expected a string"),
        (gpu(0, topology={"busID": 3}), f"{D}.topology.busID is 3, expected a string"),
        ("gpu0", f'{D} is "gpu0", expected a mapping'),
    ],
)  # fmt: skip
def test_malformed_device_entries(item: object, message: str) -> None:
    with pytest.raises(ConversionError) as caught:
        node_info(seed.node("n", {"cpu": "8"}), koord_device(item))  # type: ignore[arg-type]
    text = str(caught.value)
    assert text in (f"Device n: {message}", f"Node n: {message}")


@pytest.mark.parametrize(
    ("items", "message"),
    [
        ([gpu(0), gpu(0, id="GPU-9")], "spec.devices[1].minor is 0, expected each gpu minor once"),
        ([gpu(0), gpu(1, id="GPU-0")],
         'spec.devices[1].id is "GPU-0", expected each id once (spec.devices[0] has it)'),
    ],
)  # fmt: skip
def test_devices_named_twice_are_refused(items: list[Obj], message: str) -> None:
    with pytest.raises(ConversionError) as caught:
        devices_from_device(koord_device(*items))
    assert str(caught.value) == f"Device n: {message}"


def test_a_device_that_is_not_an_object_of_lists() -> None:
    with pytest.raises(ConversionError) as caught:
        devices_from_device(
            {"apiVersion": "scheduling.koordinator.sh/v1alpha1", "spec": {"devices": {}}}
        )
    assert str(caught.value) == "Device (no name): spec.devices is {}, expected a list"
    with pytest.raises(ConversionError) as caught:
        devices_from_device({"metadata": {"name": "n"}, "spec": []})
    assert str(caught.value) == "Device n: spec is [], expected a mapping"


def test_kgpus_device_wins_where_a_node_has_both() -> None:
    kgpu = {"apiVersion": "kgpu.io/v1alpha1", "kind": "Device", "metadata": {"name": "node-1"},
            "spec": {"devices": [{"type": "gpu", "minor": 0, "uuid": "GPU-kgpu"}]}}  # fmt: skip
    other = seed.device("node-2")
    chosen = device_by_node([kgpu], [seed.device("node-1"), other])
    assert chosen == {"node-1": kgpu, "node-2": other}
    assert not is_koordinator_device(kgpu) and is_koordinator_device(other)
    info = node_info(seed.node_1(), chosen["node-1"])
    assert info.devices is not None and [d.uuid for d in info.devices.gpus] == ["GPU-kgpu"]


# ---------------------------------------------------------------------------- the record


def spec_of(kind: str) -> Any:
    return pod_from_k8s(seed.pod(kind))


def test_which_pods_asked_in_koordinators_names() -> None:
    assert [asked_in_koordinator_names(spec_of(k)) for k in seed.REQUESTS] == [
        False, True, True, True, True,
    ]  # fmt: skip
    koord = seed.pod("core-memory")
    for section in koord["spec"]["containers"][0]["resources"].values():
        for name in ("gpu-core", "gpu-memory"):
            section[f"koordinator.sh/{name}"] = section.pop(f"kubernetes.io/{name}")
    assert asked_in_koordinator_names(pod_from_k8s(koord))
    kai = seed.pod("compatible")
    kai["spec"]["containers"][0]["resources"] = {}
    kai["metadata"]["annotations"] = {"gpu-fraction": "0.5"}
    assert not asked_in_koordinator_names(pod_from_k8s(kai))


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        # Two whole GPUs of 80Gi.
        (render([0, 1], 1000, 81920),
         '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"80Gi",'
         '"koordinator.sh/gpu-memory-ratio":"100"}},{"minor":1,"resources":{"koordinator.sh/gpu-core":"100",'
         '"koordinator.sh/gpu-memory":"80Gi","koordinator.sh/gpu-memory-ratio":"100"}}]}'),
        # A third: kgpu's record says 33, so does Koordinator's.
        (render([2], 333, 15109),
         '{"gpu":[{"minor":2,"resources":{"koordinator.sh/gpu-core":"33","koordinator.sh/gpu-memory":"5031Mi",'
         '"koordinator.sh/gpu-memory-ratio":"33"}}]}'),
        # Memory held that is not the compute share.
        (render([0], 600, 15109, held_mib={0: 4096}),
         '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"60","koordinator.sh/gpu-memory":"4Gi",'
         '"koordinator.sh/gpu-memory-ratio":"27"}}]}'),
        # No memory known; uuids are not Koordinator's (its GPU entries carry none).
        (render([0], 500, 0, {0: "GPU-0"}),
         '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"50","koordinator.sh/gpu-memory-ratio":"50"}}]}'),
        # RDMA and FPGA by minor, with their id; MIG is not Koordinator's.
        (render([], 0, others={"rdma": [{"minor": 1, "uuid": "mlx5_1", "resources": {}}],
                               "fpga": [{"minor": 0, "resources": {}}],
                               "mig": [{"profile": "1g.5gb", "count": 1}]}),
         '{"fpga":[{"minor":0,"resources":{"koordinator.sh/fpga":"100"}}],'
         '"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"100"},"id":"mlx5_1"}]}'),
        (render([0], 1000, 1024 * 1024 * 3 // 2), None),
    ],
)  # fmt: skip
def test_device_allocated_is_koordinators_format_made_from_kgpus_record(
    record: dict[str, str], expected: str | None
) -> None:
    text = device_allocated(record[ALLOCATION_ANNOTATION])
    if expected is None:  # 1.5Ti: the largest exact unit, as Go writes a quantity
        assert json.loads(text)["gpu"][0]["resources"]["koordinator.sh/gpu-memory"] == "1536Gi"
    else:
        assert text == expected


def test_koordinator_notes_only_for_pods_that_asked_in_its_names() -> None:
    record = render([0], 500, 8192)
    assert koordinator_notes(spec_of("compatible"), record) == {}
    assert koordinator_notes(spec_of("half"), {}) == {}
    assert koordinator_notes(spec_of("half"), record) == {
        DEVICE_ALLOCATED_ANNOTATION: '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"50",'
        '"koordinator.sh/gpu-memory":"4Gi","koordinator.sh/gpu-memory-ratio":"50"}}]}'
    }


# ---------------------------------------------------------------------------- RBAC


def test_the_scheduler_may_read_koordinators_devices_and_nothing_more_of_it() -> None:
    assert KOORDINATOR_DEVICES.group == KOORDINATOR_GROUP
    for opts in (InstallOptions(), InstallOptions(webhook=False, workspaces=False, agent=False)):
        for namespace in (None, "team-a", "kgpu-system"):
            held = {g for g in grants(render_objects(opts), namespace) if g[0] == KOORDINATOR_GROUP}
            assert held == {(KOORDINATOR_GROUP, "devices", v) for v in ("get", "list", "watch")}


# ---------------------------------------------------------------------------- simulate


def seed_manifests(folder: Path) -> Path:
    (folder / "nodes.yaml").write_text(
        yaml.safe_dump_all([seed.node_a(), seed.node_1()]) + "---\n" + seed.DEVICE
    )
    (folder / "pods.yaml").write_text(yaml.safe_dump_all([seed.pod(k) for k in seed.REQUESTS]))
    return folder


SEED_RECORDS = {
    "default/half": '{"gpu":[{"minor":2,"resources":{"koordinator.sh/gpu-core":"50",'
    '"koordinator.sh/gpu-memory":"4Gi","koordinator.sh/gpu-memory-ratio":"50"}}]}',
    "default/core-ratio": '{"gpu":[{"minor":3,"resources":{"koordinator.sh/gpu-core":"50",'
    '"koordinator.sh/gpu-memory":"4915Mi","koordinator.sh/gpu-memory-ratio":"59"}}]}',
    "default/core-memory": '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"60",'
    '"koordinator.sh/gpu-memory":"4Gi","koordinator.sh/gpu-memory-ratio":"27"}}]}',
    "default/rdma": '{"rdma":[{"minor":0,"resources":{"koordinator.sh/rdma":"100"}}]}',
}


def test_simulate_manifests_places_the_seeds_requests_on_koordinator_nodes(tmp_path: Path) -> None:
    run = simulate_manifests(seed_manifests(tmp_path))
    placed = {r.pod: (str(r.status), r.node, r.gpus, r.gpu_milli) for r in run.results}
    assert placed == {
        "default/compatible": ("Scheduled", "node-a", (0, 1), 1000),
        "default/half": ("Scheduled", "node-a", (2,), 500),
        "default/core-ratio": ("Scheduled", "node-a", (3,), 500),
        "default/core-memory": ("Scheduled", "node-1", (0,), 600),
        "default/rdma": ("Scheduled", "node-a", (), 0),
    }
    assert {r.pod: r.device_allocated for r in run.results if r.device_allocated} == SEED_RECORDS
    out = tmp_path / "out.json"
    result = CliRunner().invoke(main, ["simulate", "manifests", str(tmp_path), "--json", str(out)])
    assert result.exit_code == 0, result.output
    pods = {p["pod"]: p for p in json.loads(out.read_text())["pods"]}
    assert "device_allocated" not in pods["default/compatible"]
    assert pods["default/half"]["device_allocated"] == SEED_RECORDS["default/half"]


def test_simulate_manifests_reads_kgpus_device_over_koordinators(tmp_path: Path) -> None:
    seed_manifests(tmp_path)
    kgpu = {"apiVersion": "kgpu.io/v1alpha1", "kind": "Device", "metadata": {"name": "node-1"},
            "spec": {"devices": [{"type": "gpu", "minor": 0, "uuid": "GPU-a", "health": False},
                                 {"type": "gpu", "minor": 1, "uuid": "GPU-b"}]}}  # fmt: skip
    (tmp_path / "z-kgpu-device.yaml").write_text(yaml.safe_dump(kgpu))
    broken = copy.deepcopy(seed.device("node-a"))
    broken["spec"]["devices"][0]["minor"] = -1
    (tmp_path / "z-broken.yaml").write_text(yaml.safe_dump(broken))
    run = simulate_manifests(tmp_path)
    placed = {r.pod: (r.node, r.gpus, r.message) for r in run.results}
    # node-1's GPU 0 is unhealthy by kgpu's Device (Koordinator's says healthy): GPU 1 it is,
    # and then no GPU is left; node-a is not there (its Device cannot be read).
    assert placed["default/half"] == ("node-1", (1,), "")
    unhealthy = "0/1 nodes are available: 1 node(s) had unhealthy GPUs the pod would need."
    assert placed["default/core-memory"] == ("", (), unhealthy)
    assert any(
        "node skipped: Device node-a: spec.devices[0].minor is -1, expected a minor number" in n
        for n in run.notes
    )
