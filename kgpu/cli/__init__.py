"""The ``kgpu`` command line: one group, with the commands of each module added to it."""

from __future__ import annotations

import click

from kgpu import core_build
from kgpu.cli.agent import agent
from kgpu.cli.demo import demo
from kgpu.cli.live_cluster import explain, run_scheduler, webhook
from kgpu.cli.manifests import manifests
from kgpu.cli.simulate import simulate


@click.group()
@click.version_option(
    package_name="kgpu",
    message=f"%(prog)s, version %(version)s, scheduling core: {core_build()}",
)
def main() -> None:
    """kgpu: a GPU-aware batch scheduler for Kubernetes, and its trace simulator."""


for command in (simulate, demo, manifests, webhook, explain, run_scheduler, agent):
    main.add_command(command)

__all__ = ["main"]
