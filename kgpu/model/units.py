"""Integer units used everywhere in the core.

The hot path works on integers so that allocate followed by release restores the exact
state: milli-CPU, MiB of memory and milli-GPU (1000 = one whole GPU).
"""

from typing import Final

MILLI_PER_GPU: Final = 1000
MILLI_PER_CPU: Final = 1000
GPU_CORE_PER_GPU: Final = 100  # Koordinator's gpu-core: 100 = one GPU's compute
MIB: Final = 1024 * 1024
