"""One parser for every GPU dialect: each form read into one GpuRequest, and the exact message
of every malformed or impossible one."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest

from kgpu.kube.objects.node_pod import ConversionError, pod_from_k8s
from kgpu.model.gpu import (
    GpuRequest,
    gpu_share,
    mig_instances,
    mps_replicas,
    whole_gpus,
)
from tests.test_convert import Obj, annotate, edited, k8s_pod, limits

A100 = "NVIDIA-A100-80GB"
H100 = "NVIDIA-H100-80GB"
GI = 2**30


def koord(**requests: Any) -> Obj:
    return k8s_pod(**{f"kubernetes.io/{k.replace('_', '-')}": v for k, v in requests.items()})


def kai(**notes: str) -> Obj:
    return edited(k8s_pod(), annotate(**{k.replace("_", "-"): v for k, v in notes.items()}))


VALID: list[tuple[str, Obj, GpuRequest]] = [
    ("nvidia.com/gpu", edited(k8s_pod(), limits(**{"nvidia.com/gpu": 2})), whole_gpus(2)),
    ("kubernetes.io/gpu share", koord(gpu="50"), gpu_share(500)),
    ("kubernetes.io/gpu whole", koord(gpu="200"), whole_gpus(2)),
    ("koordinator.sh/gpu", k8s_pod(**{"koordinator.sh/gpu": "25"}), gpu_share(250)),
    ("core and equal ratio", koord(gpu_core="50", gpu_memory_ratio="50"), gpu_share(500)),
    (
        "core and another ratio",
        koord(gpu_core="50", gpu_memory_ratio="60"),
        GpuRequest(1, 500, memory_milli=600),
    ),
    ("core and ratio, whole", koord(gpu_core="200", gpu_memory_ratio="200"), whole_gpus(2)),
    (
        "core and memory bytes",
        koord(gpu_core="60", gpu_memory="4Gi"),
        GpuRequest(1, 600, memory_mib=4096),
    ),
    (
        "whole GPUs of at least some memory",
        koord(gpu_core="200", gpu_memory="64Gi"),
        GpuRequest(2, 1000, memory_mib=32768),
    ),
    ("memory ratio alone: compute follows", koord(gpu_memory_ratio="30"), gpu_share(300)),
    (
        "memory bytes alone, rounded up to MiB",
        koord(gpu_memory="1500000"),
        GpuRequest(1, 0, memory_mib=2),
    ),
    ("KAI gpu-fraction", kai(gpu_fraction="0.5"), gpu_share(500)),
    ("KAI gpu-memory in MiB", kai(gpu_memory="2000"), GpuRequest(1, 0, memory_mib=2000)),
    ("MPS replica", k8s_pod(**{"nvidia.com/gpu.shared": "1"}), mps_replicas(1)),
    ("MIG instances", k8s_pod(**{"nvidia.com/mig-1g.5gb": "2"}), mig_instances("1g.5gb", 2)),
    (
        "GPUs with RDMA",
        k8s_pod(**{"nvidia.com/gpu": "8", "kubernetes.io/rdma": "100"}),
        GpuRequest(8, 1000, rdma=1),
    ),
    ("RDMA alone", koord(rdma="200"), GpuRequest(rdma=2)),
    ("FPGA alone", koord(fpga="100"), GpuRequest(fpga=1)),
    (
        "MIG cards in order",
        edited(
            k8s_pod(**{"nvidia.com/mig-1g.10gb": "1"}),
            annotate(
                **{"volcano.sh/card.name": f"{H100}/mig-1g.10gb-mixed|{A100}/mig-1g.10gb-mixed"}
            ),
        ),
        mig_instances("1g.10gb", 1, (H100, A100)),
    ),
    (
        "MPS card",
        edited(
            k8s_pod(**{"nvidia.com/gpu.shared": "1"}),
            annotate(**{"volcano.sh/card.name": f"{A100}/mps-80g*1/8"}),
        ),
        mps_replicas(1, (A100,)),
    ),
]


@pytest.mark.parametrize(("obj", "expected"), [c[1:] for c in VALID], ids=[c[0] for c in VALID])
def test_every_dialect_reads_into_one_request(obj: Obj, expected: GpuRequest) -> None:
    assert pod_from_k8s(obj).gpu == expected


def test_the_same_share_in_every_dialect_is_the_same_shape() -> None:
    """Half a GPU written four ways is one request: the same filters, scores and cache."""
    forms = [
        koord(gpu="50"),
        koord(gpu_core="50", gpu_memory_ratio="50"),
        koord(gpu_memory_ratio="50"),
        kai(gpu_fraction="0.5"),
    ]
    assert {pod_from_k8s(f).shape for f in forms} == {pod_from_k8s(forms[0]).shape}


P = "Pod default/p: "
PERCENT = "a share of one GPU below 100, or whole GPUs as a multiple of 100 (100 = one GPU)"
FRACTION = P + "annotation gpu-fraction is {}, expected a number with 0 < f <= 1"

INVALID: list[tuple[str, Obj, str]] = [
    ("gpu 150", koord(gpu="150"), P + f"resource kubernetes.io/gpu is 150, expected {PERCENT}"),
    (
        "gpu-core 250 with ratio 100",
        koord(gpu_core="250", gpu_memory_ratio="100"),
        P + f"resource kubernetes.io/gpu-core is 250, expected {PERCENT}",
    ),
    (
        "whole cores with another ratio",
        koord(gpu_core="200", gpu_memory_ratio="100"),
        P + "resource kubernetes.io/gpu-memory-ratio is 100, expected 200, the same as "
        "kubernetes.io/gpu-core, for whole GPUs",
    ),
    (
        "a share of compute with two GPUs of memory",
        koord(gpu_core="50", gpu_memory_ratio="200"),
        P + "resource kubernetes.io/gpu-memory-ratio is 200, expected at most 100 (one GPU's "
        "memory) when kubernetes.io/gpu-core is below 100",
    ),
    (
        "gpu-core without memory",
        koord(gpu_core="50"),
        P + "resource kubernetes.io/gpu-core is 50, expected kubernetes.io/gpu-memory-ratio "
        "or kubernetes.io/gpu-memory beside it",
    ),
    (
        "fractional percent",
        koord(gpu_core="50.5", gpu_memory_ratio="50"),
        P
        + f"resource kubernetes.io/gpu-core is 50.5, expected a whole number of percent: {PERCENT}",
    ),
    ("fraction abc", kai(gpu_fraction="abc"), FRACTION.format('"abc"')),
    ("fraction 0", kai(gpu_fraction="0"), FRACTION.format('"0"')),
    ("fraction 1.5", kai(gpu_fraction="1.5"), FRACTION.format('"1.5"')),
    (
        "fraction with two whole GPUs",
        edited(k8s_pod(), limits(**{"nvidia.com/gpu": 2}), annotate(**{"gpu-fraction": "0.5"})),
        P + 'annotation gpu-fraction is "0.5", expected no gpu-fraction on a pod that requests '
        "nvidia.com/gpu: 2",
    ),
    (
        "fraction and gpu-memory",
        kai(gpu_fraction="0.5", gpu_memory="2000"),
        P + 'annotation gpu-memory is "2000", expected no gpu-memory on a pod that requests '
        "gpu-fraction: 0.5",
    ),
    (
        "gpu-memory in words",
        kai(gpu_memory="2Gi"),
        P
        + 'annotation gpu-memory is "2Gi", expected a whole number of MiB above 0, such as "2000"',
    ),
    (
        "gpu-memory negative",
        kai(gpu_memory="-100"),
        P
        + 'annotation gpu-memory is "-100", expected a whole number of MiB above 0, such as "2000"',
    ),
    (
        "negative kubernetes.io/gpu",
        koord(gpu="-50"),
        P + 'spec.containers[0].resources.requests[kubernetes.io/gpu] is "-50", expected a '
        "quantity of at least 0",
    ),
    (
        "negative nvidia.com/gpu",
        edited(k8s_pod(), limits(**{"nvidia.com/gpu": -1})),
        P + "spec.containers[0].resources.limits[nvidia.com/gpu] is -1, expected a quantity of "
        "at least 0",
    ),
    (
        "negative gpu-memory",
        koord(gpu_memory="-1Gi"),
        P + 'spec.containers[0].resources.requests[kubernetes.io/gpu-memory] is "-1Gi", '
        "expected a quantity of at least 0",
    ),
    (
        "two dialects",
        k8s_pod(**{"nvidia.com/gpu": "1", "kubernetes.io/gpu": "50"}),
        P + "resource kubernetes.io/gpu is 50, expected no kubernetes.io/gpu on a pod that "
        "requests nvidia.com/gpu: 1",
    ),
    (
        "shorthand and core",
        koord(gpu="50", gpu_core="50"),
        P + "resource kubernetes.io/gpu-core is 50, expected no kubernetes.io/gpu-core on a pod "
        "that requests kubernetes.io/gpu: 50",
    ),
    (
        "both prefixes",
        k8s_pod(**{"kubernetes.io/gpu": "50", "koordinator.sh/gpu": "50"}),
        P + "resource koordinator.sh/gpu is 50, expected one of kubernetes.io/gpu and "
        "koordinator.sh/gpu, not both",
    ),
    (
        "ratio and memory",
        koord(gpu_core="50", gpu_memory_ratio="50", gpu_memory="4Gi"),
        P + f"resource kubernetes.io/gpu-memory is {4 * GI}, expected no "
        "kubernetes.io/gpu-memory on a pod that requests kubernetes.io/gpu-memory-ratio: 50",
    ),
    (
        "two MIG profiles",
        k8s_pod(**{"nvidia.com/mig-1g.5gb": "1", "nvidia.com/mig-2g.10gb": "1"}),
        P + "resource nvidia.com/mig-2g.10gb is 1, expected no nvidia.com/mig-2g.10gb on a pod "
        "that requests nvidia.com/mig-1g.5gb: 1",
    ),
    (
        "unknown MIG profile",
        k8s_pod(**{"nvidia.com/mig-big": "1"}),
        P + "resource nvidia.com/mig-big is 1, expected nvidia.com/mig-<profile> with a MIG "
        "profile such as 1g.5gb or 3g.40gb",
    ),
    (
        "MPS and whole GPUs",
        k8s_pod(**{"nvidia.com/gpu": "1", "nvidia.com/gpu.shared": "1"}),
        P + "resource nvidia.com/gpu.shared is 1, expected no nvidia.com/gpu.shared on a pod "
        "that requests nvidia.com/gpu: 1",
    ),
    (
        "half an RDMA device",
        koord(rdma="50"),
        P + "resource kubernetes.io/rdma is 50, expected whole devices as a multiple of 100 "
        "(100 = one device)",
    ),
    (
        "MIG card for a whole GPU",
        edited(
            k8s_pod(**{"nvidia.com/gpu": "1"}),
            annotate(**{"volcano.sh/card.name": f"{A100}/mig-1g.10gb-mixed"}),
        ),
        P + f'annotation volcano.sh/card.name is "{A100}/mig-1g.10gb-mixed", expected GPU '
        "product names (whole-GPU cards) for a pod that requests whole or shared GPUs; MIG and "
        "MPS cards go with nvidia.com/mig-<profile> and nvidia.com/gpu.shared",
    ),
    (
        "MIG card of another profile",
        edited(
            k8s_pod(**{"nvidia.com/mig-1g.5gb": "1"}),
            annotate(**{"volcano.sh/card.name": f"{A100}/mig-2g.10gb-mixed"}),
        ),
        P + f'annotation volcano.sh/card.name is "{A100}/mig-2g.10gb-mixed", expected MIG card '
        "names of profile 1g.5gb for a pod that requests nvidia.com/mig-1g.5gb, such as "
        "NVIDIA-A100-80GB/mig-1g.5gb-mixed",
    ),
    (
        "whole card for an MPS replica",
        edited(
            k8s_pod(**{"nvidia.com/gpu.shared": "1"}),
            annotate(**{"volcano.sh/card.name": A100}),
        ),
        P + f'annotation volcano.sh/card.name is "{A100}", expected MPS card names for a pod '
        "that requests nvidia.com/gpu.shared, such as NVIDIA-A100-80GB/mps-80g*1/8",
    ),
]


@pytest.mark.parametrize(("obj", "message"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_every_malformed_request_names_field_value_and_expectation(obj: Obj, message: str) -> None:
    with pytest.raises(ConversionError) as info:
        pod_from_k8s(obj)
    assert str(info.value) == message


@pytest.mark.slow
def test_every_openb_shape_reads_the_same_in_every_dialect_that_can_say_it(
    openb_dir: Path,
) -> None:
    """The trace's gpu_milli is a per-GPU share: written as nvidia.com/gpu, gpu-fraction,
    kubernetes.io/gpu or gpu-core with an equal ratio, each pod is the request the trace
    replay uses, so every dialect places exactly as the trace does."""
    shapes = set()
    with (openb_dir / "openb_pod_list_default.csv").open() as f:
        for row in csv.DictReader(f):
            shapes.add((int(row["num_gpu"]), int(row["gpu_milli"])))
    checked = 0
    for count, milli in sorted(shapes):
        if count == 0:
            continue
        want = whole_gpus(count) if milli == 1000 else gpu_share(milli)
        forms = [kai(gpu_fraction=f"{milli / 1000:g}")] if count == 1 else []
        if milli == 1000:
            forms.append(edited(k8s_pod(), limits(**{"nvidia.com/gpu": count})))
        if milli % 10 == 0:
            percent = str(count * 100 if milli == 1000 else milli // 10)
            forms += [koord(gpu=percent), koord(gpu_core=percent, gpu_memory_ratio=percent)]
        for form in forms:
            assert pod_from_k8s(form).gpu == want, (count, milli, form)
            checked += 1
    assert checked > 20
