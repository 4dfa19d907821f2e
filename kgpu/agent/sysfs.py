"""What the kernel's sysfs says about where devices sit, and which RDMA devices a node has.

A device's place on the PCIe tree is the chain of PCI addresses in its sysfs path, from the
root port down: ``/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:05:00.0``
is a device (05:00.0) below a switch's downstream port (02:08.0), below the switch's
upstream port (01:00.0), below a root port. Devices below one switch share its upstream
port: that address is the ``pcieID`` kgpu compares, a GPU and a NIC with the same one
talk without crossing the host bridge. A device on a root port (or in a virtual machine
that shows no bridges) has none.

RDMA devices are the kernel's ``/sys/class/infiniband`` entries (``mlx5_0``, ...), each
linked to its PCI device; one with no port ACTIVE cannot carry traffic and is reported
unhealthy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

_BDF: Final = re.compile(r"[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")


@dataclass(frozen=True, slots=True)
class RdmaFacts:
    name: str  # the kernel's name, such as mlx5_0: the uuid kgpu reports
    bus_id: str
    numa: int
    pcie_switch: str
    active: bool  # a port is ACTIVE


def pci_chain(sysfs: Path, bus_id: str) -> list[str]:
    """PCI addresses from the root port down to the device; empty if sysfs does not know it."""
    try:
        real = (sysfs / "bus/pci/devices" / bus_id).resolve(strict=True)
    except OSError:
        return []
    return [part for part in real.parts if _BDF.fullmatch(part)]


def pcie_switch(sysfs: Path, bus_id: str) -> str:
    """The upstream port of the switch nearest above the device, or "" where there is none."""
    chain = pci_chain(sysfs, bus_id)
    # root port, switch upstream port, its downstream port, the device (deeper: more switches)
    return chain[-3] if len(chain) >= 4 else ""


def numa_node(sysfs: Path, bus_id: str) -> int:
    try:
        return int((sysfs / "bus/pci/devices" / bus_id / "numa_node").read_text())
    except (OSError, ValueError):
        return -1


def rdma_devices(sysfs: Path) -> list[RdmaFacts] | None:
    """The node's RDMA devices by name; None where the kernel has no RDMA stack at all."""
    root = sysfs / "class/infiniband"
    if not root.is_dir():
        return None
    found = []
    for entry in sorted(root.iterdir(), key=lambda p: p.name):
        try:
            bus_id = (entry / "device").resolve(strict=True).name
        except OSError:
            continue  # not backed by a PCI device (soft RoCE): nothing to place it by
        states = [p.read_text() for p in sorted((entry / "ports").glob("*/state"))]
        found.append(
            RdmaFacts(
                name=entry.name,
                bus_id=bus_id,
                numa=numa_node(sysfs, bus_id),
                pcie_switch=pcie_switch(sysfs, bus_id),
                active=any("ACTIVE" in s for s in states),
            )
        )
    return found
