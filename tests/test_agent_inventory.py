"""The agent's discovery: link kinds as ``nvidia-smi topo -m`` names them, minor order,
and GPUs that stop answering or vanish staying reported, as unhealthy."""

from __future__ import annotations

import json

import pytest

from kgpu.agent.inventory import GONE, discover
from kgpu.agent.probe import NvLink
from kgpu.kube.objects.device_cr import links_annotation
from kgpu.kube.objects.fields import Fields
from tests.gpu_probes import TableProbe, gpu, hgx_h100, two_islands


def test_an_hgx_board_is_eighteen_nvlinks_between_every_pair() -> None:
    inventory = discover(hgx_h100())
    assert inventory.links[0] == ("X", *["NV18"] * 7)
    assert all(inventory.links[a][b] == "NV18" for a in range(8) for b in range(8) if a != b)
    assert inventory.peers(3) == [0, 1, 2, 4, 5, 6, 7]
    assert inventory.driver == "580.159.04"
    assert [g.minor for g in inventory.gpus] == list(range(8))


def test_two_islands_read_as_nvlink_inside_and_the_pcie_path_across() -> None:
    inventory = discover(two_islands())
    assert inventory.links[0] == ("X", "NV2", "NV2", "NV2", "SYS", "SYS", "SYS", "SYS")
    assert inventory.links[4] == ("SYS", "SYS", "SYS", "SYS", "X", "NV2", "NV2", "NV2")
    assert inventory.peers(5) == [4, 6, 7]
    # What the scheduler makes of the matrix: two islands of four.
    text = json.dumps([list(r) for r in inventory.links])
    plan = links_annotation(Fields("Device n"), text).plan()
    assert plan.islands == [0b1111, 0b11110000]


@pytest.mark.parametrize(
    ("level", "kind"),
    [(0, "PIX"), (10, "PIX"), (20, "PXB"), (30, "PHB"), (40, "NODE"), (50, "SYS")],
)
def test_without_nvlink_the_common_ancestor_names_the_pcie_path(level: int, kind: str) -> None:
    probe = TableProbe([gpu(0), gpu(1)], ancestors={(0, 1): level})
    assert discover(probe).links == (("X", kind), (kind, "X"))


def test_nvlink_that_nvml_reports_without_link_details_is_one_link() -> None:
    probe = TableProbe([gpu(0), gpu(1)], p2p=[(0, 1)])
    assert discover(probe).links == (("X", "NV1"), ("NV1", "X"))


def test_direct_links_count_only_those_reaching_the_other_gpu() -> None:
    gpus = [gpu(0), gpu(1), gpu(2)]
    links = {
        0: [NvLink(gpus[1].bus_id, False)] * 4 + [NvLink(gpus[2].bus_id, False)],
        1: [NvLink(gpus[0].bus_id, False)] * 4,
        2: [NvLink(gpus[0].bus_id, False)],
    }
    probe = TableProbe(gpus, links=links, p2p=[(0, 1), (0, 2)])
    assert discover(probe).links == (("X", "NV4", "NV1"), ("NV4", "X", "SYS"), ("NV1", "SYS", "X"))


def test_gpus_are_reported_in_minor_order_whatever_nvml_enumerates() -> None:
    # NVML enumerates by PCI bus; /dev/nvidia<minor> need not follow it.
    gpus = [gpu(0, minor=2), gpu(1, minor=0), gpu(2, minor=1)]
    probe = TableProbe(gpus, p2p=[(0, 1)], ancestors={(1, 2): 10, (0, 2): 40})
    inventory = discover(probe)
    assert [g.minor for g in inventory.gpus] == [0, 1, 2]
    assert [g.index for g in inventory.gpus] == [1, 2, 0]
    # minor 0 (index 1) and minor 2 (index 0) are the NVLink pair.
    assert inventory.links == (("X", "PIX", "NV1"), ("PIX", "X", "NODE"), ("NV1", "NODE", "X"))


def test_a_gpu_that_stops_answering_keeps_its_facts_and_is_unhealthy() -> None:
    probe = hgx_h100(4)
    first = discover(probe)
    assert first.unhealthy == []
    probe.lost[2] = "GPU is lost"
    second = discover(probe, first)
    lost = second.gpus[2]
    assert (lost.uuid, lost.minor) == (first.gpus[2].uuid, 2)
    assert lost.problem == "NVML cannot read GPU 2: GPU is lost"
    assert second.unhealthy == [lost]
    # Its links are not asked for; the others' still are.
    assert second.links[2] == ("SYS", "SYS", "X", "SYS")
    assert second.links[0][1] == "NV18"
    del probe.lost[2]
    assert discover(probe, second).unhealthy == []


def test_a_gpu_unreadable_from_the_first_round_is_not_reported() -> None:
    # Nothing is known of it (not even its minor): the node's allocatable count and the
    # agent's warning are what tell an operator.
    probe = hgx_h100(2)
    probe.lost[1] = "Unknown Error"
    assert [g.minor for g in discover(probe).gpus] == [0]


def test_a_gpu_that_leaves_the_list_stays_reported_as_gone() -> None:
    probe = hgx_h100(3)
    first = discover(probe)
    probe.gpus = probe.gpus[:2]
    second = discover(probe, first)
    assert [(g.minor, g.problem) for g in second.gpus] == [(0, ""), (1, ""), (2, GONE)]
    third = discover(probe, second)
    assert third == second


def test_a_library_reported_problem_makes_the_gpu_unhealthy() -> None:
    probe = hgx_h100(2)
    probe.set_problem(1, "row remapping failed: GPU memory has uncorrectable errors")
    assert [g.minor for g in discover(probe).unhealthy] == [1]
