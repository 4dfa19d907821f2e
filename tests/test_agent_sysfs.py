"""Where devices sit on the PCIe tree, and the node's RDMA devices, read from a sysfs tree
laid out as the kernel lays it out (in a temporary directory)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kgpu.agent.agent_loop import Observer
from kgpu.agent.device_object import desired
from kgpu.agent.sysfs import RdmaFacts, pci_chain, pcie_switch, rdma_devices
from kgpu.kube.objects.device_cr import devices_from_k8s
from tests.crd_schemas import errors
from tests.gpu_probes import TableProbe, gpu

# Two sockets. On the first, a switch (upstream port 01:00.0) holds GPU 0 and a NIC;
# on the second, GPU 1 sits on a root port, and another NIC too.
GPU0 = "0000:05:00.0"
NIC0 = "0000:06:00.0"
GPU1 = "0000:81:00.0"
NIC1 = "0000:82:00.0"
TREE = {
    GPU0: ("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0", 0),
    NIC0: ("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:10.0", 0),
    GPU1: ("pci0000:80/0000:80:01.0", 1),
    NIC1: ("pci0000:80/0000:80:03.0", 1),
}


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    root = tmp_path / "sys"
    (root / "bus/pci/devices").mkdir(parents=True)
    for bdf, (parents, numa) in TREE.items():
        device = root / "devices" / parents / bdf
        device.mkdir(parents=True)
        (device / "numa_node").write_text(f"{numa}\n")
        (root / "bus/pci/devices" / bdf).symlink_to(device)
    for name, bdf, state in (("mlx5_0", NIC0, "4: ACTIVE"), ("mlx5_1", NIC1, "1: DOWN")):
        entry = root / "class/infiniband" / name
        (entry / "ports/1").mkdir(parents=True)
        (entry / "ports/1/state").write_text(state + "\n")
        (entry / "device").symlink_to(root / "bus/pci/devices" / bdf)
    (root / "class/infiniband/rxe0").mkdir()  # soft RoCE: no PCI device behind it
    return root


def test_the_chain_and_the_switch_above_a_device(sysfs: Path) -> None:
    assert pci_chain(sysfs, GPU0) == ["0000:00:01.0", "0000:01:00.0", "0000:02:08.0", GPU0]
    assert pcie_switch(sysfs, GPU0) == pcie_switch(sysfs, NIC0) == "0000:01:00.0"
    assert pcie_switch(sysfs, GPU1) == ""  # on a root port
    assert pcie_switch(sysfs, "0000:99:00.0") == ""  # not in sysfs


def test_rdma_devices_with_their_place_and_link_state(sysfs: Path) -> None:
    assert rdma_devices(sysfs) == [
        RdmaFacts("mlx5_0", NIC0, 0, "0000:01:00.0", True),
        RdmaFacts("mlx5_1", NIC1, 1, "", False),
    ]


def test_no_rdma_stack_is_none(tmp_path: Path) -> None:
    assert rdma_devices(tmp_path) is None


def test_the_device_pairs_the_gpu_and_the_nic_below_one_switch(sysfs: Path) -> None:
    probe = TableProbe(
        [
            gpu(0, bus_id=GPU0, numa=0, pcie_switch=pcie_switch(sysfs, GPU0)),
            gpu(1, bus_id=GPU1, numa=1, pcie_switch=pcie_switch(sysfs, GPU1)),
        ]
    )
    inventory, _ = Observer(probe, None, sysfs).observe()
    obj = desired("n", inventory, None, None)
    rdma = [d for d in obj["spec"]["devices"] if d["type"] == "rdma"]
    assert rdma == [
        {
            "type": "rdma",
            "minor": 0,
            "uuid": "mlx5_0",
            "health": True,
            "topology": {"nodeID": 0, "busID": NIC0, "pcieID": "0000:01:00.0"},
        },
        {
            "type": "rdma",
            "minor": 1,
            "uuid": "mlx5_1",
            "health": False,
            "topology": {"nodeID": 1, "busID": NIC1},
        },
    ]
    assert errors("Device", obj) == []
    devices = devices_from_k8s(obj)
    assert devices.gpus[0].pcie == devices.rdma[0].pcie == "0000:01:00.0"
    assert (devices.gpus[1].pcie, devices.gpus[1].numa, devices.rdma[1].healthy) == ("", 1, False)


def test_the_agent_owns_rdma_entries_only_where_it_reads_them(sysfs: Path) -> None:
    hand_written = {
        "spec": {"devices": [{"type": "rdma", "minor": 0, "uuid": "ib-by-hand"}]},
        "metadata": {"name": "n"},
    }
    probe = TableProbe([gpu(0)])
    without, _ = Observer(probe, None, None).observe()
    kept = desired("n", without, None, hand_written)
    assert [d["uuid"] for d in kept["spec"]["devices"] if d["type"] == "rdma"] == ["ib-by-hand"]
    with_rdma = dataclasses.replace(without, rdma=tuple(rdma_devices(sysfs) or ()))
    mine = desired("n", with_rdma, None, hand_written)
    assert [d["uuid"] for d in mine["spec"]["devices"] if d["type"] == "rdma"] == [
        "mlx5_0",
        "mlx5_1",
    ]
