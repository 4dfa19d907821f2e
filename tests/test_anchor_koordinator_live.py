"""``kgpu run`` (against the API double) with Koordinator's objects: a node known only by
koordlet's resources and its ``scheduling.koordinator.sh`` Device, the
``device-allocated`` annotation in the Binding, and kgpu's Device winning over
Koordinator's. The same, against a real kube-apiserver: test_e2e_koordinator."""

from __future__ import annotations

import json

from kgpu.kube.anchors.koordinator import DEVICE_ALLOCATED_ANNOTATION, device_allocated
from kgpu.kube.objects.device_allocation import ALLOCATION_ANNOTATION
from tests import koordinator_seed as seed
from tests.kube_double import KubeDouble
from tests.kube_objects import SCHEDULER, wait_until
from tests.test_kube_allocation_correction import crds, device, pod  # noqa: F401
from tests.test_kube_scheduler import Start, double, start  # noqa: F401

UUID0 = "GPU-98583a5c-c155-9cf6-f955-03c189d3dbfb"
UUID1 = "GPU-7f6410b9-bdf7-f9a5-de09-aa5ec31a7124"


def test_a_koordinator_node_and_device_place_the_seeds_pod_and_record_it_for_koordlet(
    double: KubeDouble,  # noqa: F811
    start: Start,  # noqa: F811
) -> None:
    double.put(seed.node_1("n1"))
    double.put(seed.device("n1"))
    double.put(seed.pod("core-memory", "p", scheduler=SCHEDULER))
    start()
    wait_until(lambda: double.bound() == {"p": "n1"}, timeout=10)
    notes = pod(double, "p")["metadata"]["annotations"]
    record = json.loads(notes[ALLOCATION_ANNOTATION])
    [gpu] = record["gpu"]
    # The Device's ids are the GPUs' UUIDs; Koordinator's record says what kgpu's says.
    assert gpu["uuid"] == {0: UUID0, 1: UUID1}[gpu["minor"]]
    assert notes[DEVICE_ALLOCATED_ANNOTATION] == device_allocated(notes[ALLOCATION_ANNOTATION])
    assert json.loads(notes[DEVICE_ALLOCATED_ANNOTATION]) == {
        "gpu": [
            {
                "minor": gpu["minor"],
                "resources": {
                    "koordinator.sh/gpu-core": "60",
                    "koordinator.sh/gpu-memory": "4Gi",
                    "koordinator.sh/gpu-memory-ratio": "27",
                },
            }
        ]
    }
    # Asked in NVIDIA's names: kgpu's record only.
    double.put(seed.pod("compatible", "whole", scheduler=SCHEDULER))
    double.put(seed.node_a("na"))
    wait_until(lambda: "whole" in double.bound(), timeout=10)
    whole = pod(double, "whole")["metadata"]["annotations"]
    assert (
        DEVICE_ALLOCATED_ANNOTATION in whole,
        len(json.loads(whole[ALLOCATION_ANNOTATION])["gpu"]),
    ) == (False, 2)


def test_kgpus_device_wins_over_koordinators_live(
    double: KubeDouble,  # noqa: F811
    start: Start,  # noqa: F811
    crds: None,  # noqa: F811
) -> None:
    double.put(seed.node_1("n1"))
    double.put(seed.device("n1"))
    mine = device("n1", 2)
    mine["spec"]["devices"][0]["health"] = False  # Koordinator's says healthy
    double.put(mine)
    double.put(seed.pod("half", "p", scheduler=SCHEDULER))
    start()
    wait_until(lambda: double.bound() == {"p": "n1"}, timeout=10)
    [gpu] = json.loads(pod(double, "p")["metadata"]["annotations"][ALLOCATION_ANNOTATION])["gpu"]
    assert (gpu["minor"], gpu["uuid"]) == (1, "fake-gpu-1")
