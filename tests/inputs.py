"""What the suite needs from outside the repository, and what a test does without it.

Outside CI a test whose input is missing skips and names it. Under ``CI=true`` (what CI
sets) it fails instead, naming it the same way: CI must not pass by skipping what it was
meant to check. The one input CI may lack is an NVIDIA GPU; tests that need one are marked
``nvidia`` and keep skipping there (see ``pytest_runtest_makereport`` in conftest.py, which
fails every other skip under CI).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest

OPENB = Path(__file__).resolve().parents[2] / "shared" / "data" / "openb"
KUBE_APISERVER_TOOLS = "../shared/tools/kube-apiserver"
KUBE_NODE_TOOLS = "../shared/tools/kube-node"


def under_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def require_input(what: str, hint: str) -> NoReturn:
    """Stop a test that cannot run without ``what``: a failure under CI, a skip elsewhere."""
    if under_ci():
        pytest.fail(f"CI=true and {what} is missing: {hint}", pytrace=False)
    pytest.skip(f"{what} is missing: {hint} (under CI=true this fails)")


def openb_trace() -> Path:
    """The openb trace's folder: ../shared/data/openb beside the repository, unless
    KGPU_OPENB_DIR names another."""
    folder = Path(os.environ.get("KGPU_OPENB_DIR") or OPENB)
    if not (folder / "openb_node_list_gpu_node.csv").exists():
        require_input(
            f"the openb trace ({folder}/openb_node_list_gpu_node.csv)",
            "put it at ../shared/data/openb beside the repository, or name its folder in"
            " KGPU_OPENB_DIR",
        )
    return folder


def e2e_kubeconfig() -> str:
    """The kubeconfig of the real kube-apiserver the end-to-end tests run against."""
    path = os.environ.get("KGPU_E2E_KUBECONFIG")
    if not path:
        require_input(
            "a kube-apiserver to test against",
            "KGPU_E2E_KUBECONFIG is not set; .ci/run builds and starts one with"
            f" {KUBE_APISERVER_TOOLS} and sets it",
        )
    if not Path(path).exists():
        require_input(
            f"the kubeconfig {path} that KGPU_E2E_KUBECONFIG names",
            f"start the kube-apiserver: bash {KUBE_APISERVER_TOOLS}/start.sh",
        )
    return path


@dataclass(frozen=True)
class E2eNode:
    """The real node (a kubelet with a device plugin) joined to the e2e kube-apiserver, as
    .ci/run started it: its name, the kubelet's pod-resources socket and device checkpoint,
    and the folder of the start.sh and stop.sh that restart it."""

    name: str
    pod_resources_socket: Path
    kubelet_checkpoint: Path
    tools: Path


def e2e_node() -> E2eNode:
    """The node .ci/run names in KGPU_E2E_NODE (with KGPU_E2E_POD_RESOURCES,
    KGPU_E2E_KUBELET_CHECKPOINT and KGPU_E2E_NODE_TOOLS beside it)."""
    name = os.environ.get("KGPU_E2E_NODE")
    if not name:
        require_input(
            "a real node to test on",
            "KGPU_E2E_NODE is not set; .ci/run builds and starts one with"
            f" {KUBE_NODE_TOOLS} and sets it",
        )
    env = os.environ.get
    return E2eNode(
        name,
        Path(env("KGPU_E2E_POD_RESOURCES") or "/tmp/knode/kubelet/pod-resources/kubelet.sock"),
        Path(
            env("KGPU_E2E_KUBELET_CHECKPOINT")
            or "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
        ),
        Path(env("KGPU_E2E_NODE_TOOLS") or OPENB.parents[1] / "tools" / "kube-node"),
    )
