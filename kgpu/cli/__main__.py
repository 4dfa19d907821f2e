"""``python -m kgpu.cli``: the same command as ``kgpu``."""

from kgpu.cli import main

main()
