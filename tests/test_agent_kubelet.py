"""The kubelet's device checkpoint, read into the Device's checkpoint annotation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kgpu.agent.kubelet import CheckpointError, read_checkpoint


def _write(tmp_path: Path, entries: object) -> Path:
    path = tmp_path / "kubelet_internal_checkpoint"
    data = {"Data": {"PodDeviceEntries": entries, "RegisteredDevices": {}}, "Checksum": 1}
    path.write_text(json.dumps(data))
    return path


def test_entries_by_numa_node_become_one_entry_per_pod_and_resource(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        [
            {"PodUID": "p1", "ContainerName": "a", "ResourceName": "nvidia.com/gpu",
             "DeviceIDs": {"0": ["GPU-a"], "1": ["GPU-e"]}, "AllocResp": "eA=="},
            {"PodUID": "p1", "ContainerName": "b", "ResourceName": "nvidia.com/gpu",
             "DeviceIDs": {"0": ["GPU-b", "GPU-a"]}},
            {"PodUID": "p2", "ContainerName": "a", "ResourceName": "nvidia.com/gpu.shared",
             "DeviceIDs": {"-1": ["GPU-c::3"]}},
            {"PodUID": "p3", "ContainerName": "a", "ResourceName": "example.com/nic",
             "DeviceIDs": {"0": ["nic0"]}},
        ],
    )  # fmt: skip
    assert read_checkpoint(path) == [
        {
            "podUID": "p1",
            "resourceName": "nvidia.com/gpu",
            "deviceIDs": ["GPU-a", "GPU-e", "GPU-b"],
        },
        {"podUID": "p2", "resourceName": "nvidia.com/gpu.shared", "deviceIDs": ["GPU-c::3"]},
    ]


def test_the_list_form_before_kubernetes_1_20_is_read_too(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        [
            {
                "PodUID": "p1",
                "ContainerName": "a",
                "ResourceName": "nvidia.com/gpu",
                "DeviceIDs": ["GPU-a"],
            }
        ],
    )
    assert read_checkpoint(path) == [
        {"podUID": "p1", "resourceName": "nvidia.com/gpu", "deviceIDs": ["GPU-a"]}
    ]


def test_no_file_is_none_and_no_entries_is_an_empty_list(tmp_path: Path) -> None:
    assert read_checkpoint(tmp_path / "absent") is None
    assert read_checkpoint(_write(tmp_path, None)) == []


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "is not JSON"),
        (
            json.dumps({"Data": {"PodDeviceEntries": {"a": 1}}}),
            "Data.PodDeviceEntries is dict, expected a list of {PodUID, ResourceName, DeviceIDs}",
        ),
        (
            json.dumps({"Data": {"PodDeviceEntries": [{"PodUID": 7, "ResourceName": "x"}]}}),
            "Data.PodDeviceEntries[0] has no PodUID or ResourceName string",
        ),
        (
            json.dumps(
                {"Data": {"PodDeviceEntries": [
                    {"PodUID": "p", "ResourceName": "nvidia.com/gpu", "DeviceIDs": {"0": "GPU-a"}}
                ]}}
            ),
            'Data.PodDeviceEntries[0].DeviceIDs is {"0": "GPU-a"}, expected a list of device ids '
            'or a map of NUMA node to such lists, such as {"0": ["GPU-…"]}',
        ),
    ],
)  # fmt: skip
def test_a_malformed_checkpoint_names_the_file_and_the_field(
    tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "kubelet_internal_checkpoint"
    path.write_text(content)
    with pytest.raises(CheckpointError) as caught:
        read_checkpoint(path)
    assert str(caught.value).startswith(f"kubelet checkpoint {path}: ")
    assert message in str(caught.value)
