"""Every way a pod asks for GPUs, read into one :class:`~kgpu.model.gpu.GpuRequest`.

=========================================  =================================================
written                                    read as
=========================================  =================================================
``nvidia.com/gpu: N``                      N whole GPUs
``kubernetes.io/gpu: P``                   P < 100: P% of one GPU (compute and memory);
                                           P a multiple of 100: P/100 whole GPUs
``kubernetes.io/gpu-core: C`` with         C% of one GPU's compute and R% of its memory (C <
``kubernetes.io/gpu-memory-ratio: R``      100, R <= 100), or C/100 whole GPUs (R == C)
``kubernetes.io/gpu-core: C`` with         C% of one GPU's compute and B bytes of its memory,
``kubernetes.io/gpu-memory: B``            or C/100 whole GPUs of at least B/(C/100) each
``kubernetes.io/gpu-memory-ratio: R``      R% of one GPU (compute follows memory)
``kubernetes.io/gpu-memory: B``            B bytes of one GPU, compute in proportion
annotation ``gpu-fraction: f``             f of one GPU, 0 < f <= 1 (KAI)
annotation ``gpu-memory: M``               M MiB of one GPU, compute in proportion (KAI)
``nvidia.com/gpu.shared: k``               k MPS (or time-sliced) replicas of one GPU
``nvidia.com/mig-<profile>: k``            k MIG instances of that profile
``kubernetes.io/rdma``, ``.../fpga: V``    V/100 whole devices (V a multiple of 100)
=========================================  =================================================

Koordinator's names are also read under ``koordinator.sh/``. One pod speaks one dialect: a
second one is refused, naming both. ``volcano.sh/card.name`` ("A|B", in order of preference)
restricts the GPU product; its cards must be of the kind the pod requests (MIG cards for a
MIG request, MPS cards for ``nvidia.com/gpu.shared``, product names otherwise).

What is checked against the cluster (a memory larger than any GPU) is a PreFilter's job,
not the parser's: the parser sees one pod.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Final

from kgpu.kube.objects.fields import Fields
from kgpu.model.card import card_product, mps_replicas
from kgpu.model.gpu import (
    NO_GPU,
    GpuKind,
    GpuRequest,
    gpu_share,
    mig_instances,
    whole_gpus,
)
from kgpu.model.gpu import (
    mps_replicas as mps_request,
)
from kgpu.model.limits import MAX_GPU_MEMORY_MIB, clip
from kgpu.model.units import GPU_CORE_PER_GPU, MIB, MILLI_PER_GPU

GPU_RESOURCE: Final = "nvidia.com/gpu"
MPS_RESOURCE: Final = "nvidia.com/gpu.shared"
GPU_FRACTION_ANNOTATION: Final = "gpu-fraction"
GPU_MEMORY_ANNOTATION: Final = "gpu-memory"
CARD_NAME_ANNOTATION: Final = "volcano.sh/card.name"
KOORDINATOR_PREFIXES: Final = ("kubernetes.io/", "koordinator.sh/")
MIG_PREFIX: Final = "nvidia.com/mig-"

_MIG_PROFILE: Final = re.compile(r"[0-9]+(?:c\.[0-9]+)?g\.[0-9]+gb(?:\+[a-z]+)?")
_MIG_CARD: Final = re.compile(r".+/mig-(?P<profile>.+)-mixed")
_DECIMAL: Final = re.compile(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+")
_DIGITS: Final = re.compile(r"[0-9]+")
_PERCENT: Final = "a share of one GPU below 100, or whole GPUs as a multiple of 100 (100 = one GPU)"
_DEVICES: Final = "whole devices as a multiple of 100 (100 = one device)"
_FRACTION: Final = "a number with 0 < f <= 1"
_MAX_FRACTION_TEXT: Final = 32  # "0.333" needs 5; thousands of digits are not a share

# (short name, field in messages, the value as shown, how the message shows it)
_Said = tuple[str, str, object, str]


def _koordinator(fields: Fields, requests: Mapping[str, Fraction], suffix: str) -> _Said | None:
    """``kubernetes.io/<suffix>`` or ``koordinator.sh/<suffix>``, whichever the pod uses."""
    found = [
        (p + suffix, requests[p + suffix]) for p in KOORDINATOR_PREFIXES if requests.get(p + suffix)
    ]
    if not found:
        return None
    if len(found) > 1:
        a, b = found[0][0], found[1][0]
        raise fields.fail(f"resource {b}", _number(found[1][1]), f"one of {a} and {b}, not both")
    name, value = found[0]
    return name, f"resource {name}", _number(value), f"{name}: {_number(value)}"


def _number(value: Fraction) -> int | float:
    return int(value) if value.denominator == 1 else float(value)


def _percent(fields: Fields, said: _Said) -> int:
    """A Koordinator percentage: a whole number below 100 or a multiple of 100."""
    _, field, value, _ = said
    if not isinstance(value, int):
        raise fields.fail(field, value, "a whole number of percent: " + _PERCENT)
    if value >= GPU_CORE_PER_GPU and value % GPU_CORE_PER_GPU:
        raise fields.fail(field, value, _PERCENT)
    return value


def _refuse_second(fields: Fields, said: list[_Said]) -> None:
    """One dialect per pod: the second thing said is refused, naming the first."""
    if len(said) > 1:
        first, second = said[0], said[1]
        # The first is shown as written, which a hostile pod may make as long as it likes.
        shown = clip(first[3])
        raise fields.fail(second[1], second[2], f"no {second[0]} on a pod that requests {shown}")


def gpu_request_from_pod(
    ref: str, requests: Mapping[str, Fraction], annotations: Mapping[str, str]
) -> GpuRequest:
    """The pod's GPU request, whichever dialect it was written in (see the module's table).

    ``ref`` names the pod in error messages; ``requests`` are the pod's requests, summed
    as kube-scheduler sums them.
    """
    fields = Fields(ref)
    families: list[list[_Said]] = []
    if requests.get(GPU_RESOURCE):
        value = _number(requests[GPU_RESOURCE])
        families.append(
            [(GPU_RESOURCE, f"resource {GPU_RESOURCE}", value, f"{GPU_RESOURCE}: {value}")]
        )
    koord = {
        s: _koordinator(fields, requests, s)
        for s in ("gpu", "gpu-core", "gpu-memory-ratio", "gpu-memory")
    }
    if any(koord.values()):
        families.append([s for s in koord.values() if s is not None])
    kai: list[_Said] = [
        (name, f"annotation {name}", annotations[name], f"{name}: {annotations[name]}")
        for name in (GPU_FRACTION_ANNOTATION, GPU_MEMORY_ANNOTATION)
        if name in annotations
    ]
    if kai:
        families.append(kai)
    if requests.get(MPS_RESOURCE):
        value = _number(requests[MPS_RESOURCE])
        families.append(
            [(MPS_RESOURCE, f"resource {MPS_RESOURCE}", value, f"{MPS_RESOURCE}: {value}")]
        )
    mig: list[_Said] = [
        (name, f"resource {name}", _number(v), f"{name}: {_number(v)}")
        for name, v in sorted(requests.items())
        if name.startswith(MIG_PREFIX) and v
    ]
    if mig:
        families.append(mig)
    _refuse_second(fields, [f[0] for f in families])
    request = NO_GPU
    if families:
        family = families[0]
        if family[0][0] == GPU_RESOURCE:
            request = whole_gpus(int(requests[GPU_RESOURCE]))
        elif family is kai:
            request = _kai(fields, kai)
        elif family is mig:
            request = _mig(fields, mig)
        elif family[0][0] == MPS_RESOURCE:
            request = mps_request(int(requests[MPS_RESOURCE]))
        else:
            request = _koordinator_request(fields, koord, requests)
    rdma, fpga = _devices(fields, requests, "rdma"), _devices(fields, requests, "fpga")
    if not request.count and not rdma and not fpga:
        return NO_GPU
    models = _card_models(fields, annotations, request) if request.count else ()
    return GpuRequest(
        count=request.count,
        milli=request.milli,
        models=models,
        memory_milli=request.memory_milli,
        memory_mib=request.memory_mib,
        kind=request.kind,
        replicas=request.replicas,
        mig_profile=request.mig_profile,
        rdma=rdma,
        fpga=fpga,
        origin=families[0][0][1] if families else "",
    )


def _koordinator_request(
    fields: Fields, said: Mapping[str, _Said | None], requests: Mapping[str, Fraction]
) -> GpuRequest:
    gpu, core, ratio, memory = (
        said[k] for k in ("gpu", "gpu-core", "gpu-memory-ratio", "gpu-memory")
    )
    if gpu is not None:
        _refuse_second(fields, [gpu, *(s for s in (core, ratio, memory) if s is not None)])
        return _share_or_whole(_percent(fields, gpu))
    if ratio is not None and memory is not None:
        _refuse_second(fields, [ratio, memory])
    if core is None:
        if ratio is not None:
            return _share_or_whole(_percent(fields, ratio))
        assert memory is not None
        return GpuRequest(count=1, memory_mib=_mib(requests[memory[0]]))
    c = _percent(fields, core)
    if ratio is not None:
        r = _percent(fields, ratio)
        if c >= GPU_CORE_PER_GPU and r != c:
            raise fields.fail(ratio[1], r, f"{c}, the same as {core[0]}, for whole GPUs")
        if c < GPU_CORE_PER_GPU and r > GPU_CORE_PER_GPU:
            raise fields.fail(
                ratio[1], r, f"at most 100 (one GPU's memory) when {core[0]} is below 100"
            )
        share = _share_or_whole(c)
        if r == c or share.count != 1 or share.milli == MILLI_PER_GPU:
            return share
        return GpuRequest(count=1, milli=share.milli, memory_milli=r * _MILLI_PER_PERCENT)
    if memory is not None:
        share = _share_or_whole(c)
        per_gpu = requests[memory[0]] / share.count
        return GpuRequest(count=share.count, milli=share.milli, memory_mib=_mib(per_gpu))
    prefix = core[0].removesuffix("gpu-core")
    raise fields.fail(core[1], c, f"{prefix}gpu-memory-ratio or {prefix}gpu-memory beside it")


_MILLI_PER_PERCENT: Final = MILLI_PER_GPU // GPU_CORE_PER_GPU


def _share_or_whole(percent: int) -> GpuRequest:
    if percent < GPU_CORE_PER_GPU:
        return gpu_share(percent * _MILLI_PER_PERCENT)
    return whole_gpus(percent // GPU_CORE_PER_GPU)


def _mib(value: Fraction) -> int:
    """Bytes to MiB, rounded up: a pod gets at least the memory it asked for."""
    return math.ceil(value / MIB)


def _kai(fields: Fields, said: list[_Said]) -> GpuRequest:
    _refuse_second(fields, said)
    name, field, text, _ = said[0]
    assert isinstance(text, str)
    if name == GPU_MEMORY_ANNOTATION:
        # The length first: Python will not turn 4,300 digits or more into an integer.
        digits = text.strip().lstrip("0")
        if not _DIGITS.fullmatch(text.strip()) or not digits:
            raise fields.fail(field, text, 'a whole number of MiB above 0, such as "2000"')
        if len(digits) > len(str(MAX_GPU_MEMORY_MIB)) or int(digits) > MAX_GPU_MEMORY_MIB:
            raise fields.fail(
                field, text, f"a whole number of MiB, at most {MAX_GPU_MEMORY_MIB} (one GPU's)"
            )
        return GpuRequest(count=1, memory_mib=int(digits))
    if len(text) > _MAX_FRACTION_TEXT or not _DECIMAL.fullmatch(text.strip()):
        raise fields.fail(field, text, _FRACTION)
    share = Fraction(text.strip())
    if not 0 < share <= 1:
        raise fields.fail(field, text, _FRACTION)
    # Rounded down, so that three pods asking "0.333" (a third each) fit on one GPU.
    milli = math.floor(share * MILLI_PER_GPU)
    if milli == 0:
        raise fields.fail(field, text, "at least 0.001, the smallest share kgpu accounts")
    return whole_gpus(1) if milli == MILLI_PER_GPU else gpu_share(milli)


def _mig(fields: Fields, said: list[_Said]) -> GpuRequest:
    _refuse_second(fields, said)
    name, field, value, _ = said[0]
    profile = name.removeprefix(MIG_PREFIX)
    if not _MIG_PROFILE.fullmatch(profile):
        raise fields.fail(
            field, value, f"{MIG_PREFIX}<profile> with a MIG profile such as 1g.5gb or 3g.40gb"
        )
    assert isinstance(value, int)
    return mig_instances(profile, value)


def _devices(fields: Fields, requests: Mapping[str, Fraction], kind: str) -> int:
    said = _koordinator(fields, requests, kind)
    if said is None:
        return 0
    _, field, value, _ = said
    if not isinstance(value, int) or value % GPU_CORE_PER_GPU:
        raise fields.fail(field, value, _DEVICES)
    return value // GPU_CORE_PER_GPU


def _card_models(
    fields: Fields, annotations: Mapping[str, str], request: GpuRequest
) -> tuple[str, ...]:
    """The GPU products that ``volcano.sh/card.name`` allows, in the written order."""
    text = annotations.get(CARD_NAME_ANNOTATION)
    if text is None:
        return ()
    field = f"annotation {CARD_NAME_ANNOTATION}"
    cards = tuple(c.strip() for c in text.split("|"))
    if not all(cards):
        raise fields.fail(field, text, 'GPU product names separated by "|", such as "A100|H100"')
    for card in cards:
        mig = _MIG_CARD.fullmatch(card)
        if request.kind is GpuKind.MIG:
            if mig is None or mig["profile"] != request.mig_profile:
                raise fields.fail(
                    field, text,
                    f"MIG card names of profile {request.mig_profile} for a pod that requests "
                    f"{MIG_PREFIX}{request.mig_profile}, such as "
                    f"NVIDIA-A100-80GB/mig-{request.mig_profile}-mixed",
                )  # fmt: skip
        elif request.kind is GpuKind.MPS:
            if not mps_replicas(card):
                raise fields.fail(
                    field, text,
                    f"MPS card names for a pod that requests {MPS_RESOURCE}, such as "
                    "NVIDIA-A100-80GB/mps-80g*1/8",
                )  # fmt: skip
        elif "/" in card:
            raise fields.fail(
                field, text,
                "GPU product names (whole-GPU cards) for a pod that requests whole or "
                f"shared GPUs; MIG and MPS cards go with {MIG_PREFIX}<profile> and {MPS_RESOURCE}",
            )  # fmt: skip
    return tuple(dict.fromkeys(card_product(c) for c in cards))
