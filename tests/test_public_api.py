from __future__ import annotations

import kgpu


def test_public_surface_is_what_we_mean_to_export() -> None:
    assert sorted(kgpu.__all__) == [
        "ClusterState",
        "Code",
        "GpuRequest",
        "NodeInfo",
        "PodSpec",
        "Status",
        "core_build",
        "core_compiled",
    ]
    for name in kgpu.__all__:
        assert getattr(kgpu, name).__module__.split(".")[0] == "kgpu"
