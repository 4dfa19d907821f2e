"""Inference presets: model names to the GPU memory one replica needs.

The figures are KAITO's published ``TotalGPUMemoryRequirement`` of each preset's inference
parameters (the total over all GPUs of one replica), taken from the preset files of
github.com/kaito-project/kaito, ``presets/workspace/models/<family>/model.go``; the commit
each was read at is given beside it. Gi is converted to MiB and rounded up, so that a
figure such as 14.43Gi is never undercut.

They are data, not code: a new model is one more row, and a workspace can name its memory
directly (``inference.gpuMemoryPerReplica``) for a model that has no row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Final

from kgpu.model.units import MIB


@dataclass(frozen=True, slots=True)
class Preset:
    name: str  # as written in ``inference.preset.name``
    model_id: str  # the Hugging Face repository the inference server loads
    gpu_memory_mib: int  # per replica, all GPUs of the replica together
    source: str  # where the figure was published


def _gi(text: str) -> int:
    """ "14.43" (GiB) → MiB, rounded up."""
    return math.ceil(Fraction(text) * 1024 * 1024 * 1024 / MIB)


_KAITO: Final = "kaito-project/kaito presets/workspace/models"
_AT_14A1F5D: Final = "@14a1f5d007f75fc292b0335d87edee0d3aa9808f"


def _row(name: str, model_id: str, gib: str, family: str, commit: str = _AT_14A1F5D) -> Preset:
    return Preset(name, model_id, _gi(gib), f"{_KAITO}/{family}/model.go{commit} ({gib}Gi)")


PRESETS: Final[dict[str, Preset]] = {
    p.name: p
    for p in (
        # The KAITO design's own example: "8GB for phi-4-mini-instruct".
        _row("phi-4-mini-instruct", "microsoft/Phi-4-mini-instruct", "8", "phi4"),
        _row("phi-4", "microsoft/phi-4", "40", "phi4"),
        _row("phi-3.5-mini-instruct", "microsoft/Phi-3.5-mini-instruct", "8", "phi3"),
        _row("phi-3-mini-4k-instruct", "microsoft/Phi-3-mini-4k-instruct", "9", "phi3"),
        _row("phi-3-mini-128k-instruct", "microsoft/Phi-3-mini-128k-instruct", "9", "phi3"),
        _row("phi-3-medium-4k-instruct", "microsoft/Phi-3-medium-4k-instruct", "28", "phi3"),
        _row("phi-3-medium-128k-instruct", "microsoft/Phi-3-medium-128k-instruct", "28", "phi3"),
        _row(
            "mistral-7b-instruct",
            "mistralai/Mistral-7B-Instruct-v0.3",
            "14.43",
            "mistral",
            "@067acbbdfca36793cc28864381a8f555edcfb00f",
        ),
        _row("qwen2.5-coder-7b-instruct", "Qwen/Qwen2.5-Coder-7B-Instruct", "24", "qwen"),
        _row("qwen2.5-coder-32b-instruct", "Qwen/Qwen2.5-Coder-32B-Instruct", "70", "qwen"),
        _row("llama-3.1-8b-instruct", "meta-llama/Llama-3.1-8B-Instruct", "22", "llama3"),
        _row("falcon-7b-instruct", "tiiuae/falcon-7b-instruct", "14", "falcon"),
        _row("falcon-40b-instruct", "tiiuae/falcon-40b-instruct", "90", "falcon"),
        _row(
            "deepseek-r1-distill-llama-8b",
            "deepseek-ai/DeepSeek-R1-Distill-Llama-8B",
            "14",
            "deepseek",
            "@13674ad24b250740624c2eac5e6400d10d0b7333",
        ),
        _row(
            "deepseek-r1-distill-qwen-14b",
            "deepseek-ai/DeepSeek-R1-Distill-Qwen-14B",
            "25.7",
            "deepseek",
            "@13674ad24b250740624c2eac5e6400d10d0b7333",
        ),
    )
}


def find_preset(name: str) -> Preset | None:
    """The preset of that name; names are matched as written, then ignoring case."""
    found = PRESETS.get(name)
    if found is not None:
        return found
    folded = name.casefold()
    return next((p for p in PRESETS.values() if p.name.casefold() == folded), None)
