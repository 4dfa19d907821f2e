from __future__ import annotations

from pathlib import Path

import pytest

OPENB = Path(__file__).resolve().parents[2] / "shared" / "data" / "openb"


@pytest.fixture(scope="session")
def openb_dir() -> Path:
    if not (OPENB / "openb_node_list_gpu_node.csv").exists():
        pytest.skip(f"the openb trace is not at {OPENB} (../shared/data/openb beside the repo)")
    return OPENB
