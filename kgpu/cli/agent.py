"""``kgpu agent``: the node agent that reports a node's GPUs as its Device resource."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING

import click

from kgpu.agent.kubelet import DEFAULT_CHECKPOINT, DEFAULT_SOCKET

if TYPE_CHECKING:
    from kgpu.kube.api.client import KubeClient


@click.command("agent")
@click.option(
    "--node",
    envvar="NODE_NAME",
    help="the node this runs on, which names its Device [env NODE_NAME; a DaemonSet sets "
    "it from spec.nodeName]",
)
@click.option(
    "--kubeconfig",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="kubeconfig file; default: the pod's service account, else $KUBECONFIG or ~/.kube/config",
)
@click.option(
    "--interval",
    type=click.FloatRange(0.1),
    default=10.0,
    show_default=True,
    help="seconds between rounds of discovery",
)
@click.option(
    "--resync",
    type=click.FloatRange(0.0),
    default=300.0,
    show_default=True,
    help="seconds after which the Device is read back and mended even if nothing changed",
)
@click.option(
    "--kubelet-checkpoint",
    type=click.Path(dir_okay=False, path_type=Path),
    default=DEFAULT_CHECKPOINT,
    show_default=True,
    help="the kubelet's device checkpoint: which GPUs pods placed by other schedulers hold",
)
@click.option("--no-kubelet-checkpoint", is_flag=True, help="leave the checkpoint annotation alone")
@click.option(
    "--pod-resources-socket",
    type=click.Path(dir_okay=False, path_type=Path),
    default=DEFAULT_SOCKET,
    show_default=True,
    help="the kubelet's pod-resources API: which pod holds which device (where the socket "
    "is absent, the checkpoint file says), and a node's GPUs where NVML cannot be loaded",
)
@click.option(
    "--rdma/--no-rdma",
    default=True,
    show_default=True,
    help="report the RDMA devices of /sys/class/infiniband (else leave rdma entries alone)",
)
@click.option(
    "--sysfs",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("/sys"),
    show_default=True,
    help="where the kernel's sysfs is mounted",
)
@click.option(
    "--ignore-xid",
    type=click.IntRange(0),
    multiple=True,
    help="an XID that leaves a GPU healthy, besides the application errors (13, 31, 43, "
    "45, 68, 109); repeatable",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=10261,
    show_default=True,
    help="port of /metrics, /healthz (503 once rounds stop ending) and /readyz (0: any free port)",
)
@click.option(
    "--metrics-address",
    default="127.0.0.1",
    show_default=True,
    help="the address /metrics and the probes listen on (the install gives the pod's IP)",
)
@click.option("--once", is_flag=True, help="one round, then exit")
@click.option(
    "--dry-run",
    is_flag=True,
    help="print the Device resource one round would write, and write nothing",
)
@click.option("-v", "--verbose", is_flag=True, help="log at debug level")
def agent(
    node: str | None,
    kubeconfig: str | None,
    interval: float,
    resync: float,
    kubelet_checkpoint: Path,
    no_kubelet_checkpoint: bool,
    pod_resources_socket: Path,
    rdma: bool,
    sysfs: Path,
    ignore_xid: tuple[int, ...],
    metrics_port: int,
    metrics_address: str,
    once: bool,
    dry_run: bool,
    verbose: bool,
) -> None:
    """Report this node's GPUs (UUIDs, memory, health, NVLink and PCIe topology, what the
    kubelet gave pods) as its kgpu.io Device resource, every INTERVAL seconds, until
    SIGTERM or SIGINT. Where NVML cannot be loaded, the GPUs are those the kubelet lists."""
    import logging
    import signal
    import threading

    import yaml

    from kgpu.agent.agent_loop import Agent, AgentOptions, Observer
    from kgpu.agent.device_object import desired, health_status
    from kgpu.agent.health import AgentMetrics
    from kgpu.agent.kubelet_gpus import KubeletGpuProbe, gfd_memory_mib
    from kgpu.agent.nvml import NvmlProbe
    from kgpu.agent.pod_resources_client import PodResourcesClient
    from kgpu.agent.probe import GpuProbe, GpuUnreadable, ProbeError
    from kgpu.agent.publish import DevicePublisher
    from kgpu.kube.api.client import KubeClient
    from kgpu.kube.api.errors import KubeError
    from kgpu.kube.api.event_recorder import EventRecorder, now_rfc3339
    from kgpu.kube.api.printable import escape_logs
    from kgpu.kube.live.health_server import HealthServer

    level = logging.DEBUG if verbose else logging.INFO
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    escape_logs()  # object text in log lines: kgpu.kube.api.printable
    if node is None and not dry_run:
        raise click.UsageError("--node (or NODE_NAME) names the node whose Device is written")
    node = node or socket.gethostname()
    options = AgentOptions(node, interval, resync)
    pod_resources = PodResourcesClient(pod_resources_socket)
    client = None
    try:
        if not dry_run:
            client = KubeClient.from_kubeconfig(kubeconfig, user_agent=f"kgpu-agent/{os.getpid()}")
        probe: GpuProbe
        try:
            probe = NvmlProbe(sysfs)
        except ProbeError as exc:
            # The same loop, over what the kubelet knows (a node whose driver the agent
            # cannot reach, or a CI node with a fake device plugin).
            memory = gfd_memory_mib(_node_labels(client, node)) if client else 0
            logging.getLogger("kgpu.agent").warning(
                "%s; the GPUs reported are those the kubelet lists, memory %s",
                exc,
                f"{memory} MiB from the Node's nvidia.com/gpu.memory" if memory else "not known",
            )
            probe = KubeletGpuProbe(pod_resources, kubelet_checkpoint, memory)
    except (KubeError, OSError) as exc:
        raise click.ClickException(str(exc)) from exc
    # A round may take a while when the API server is slow (each call has its own bound);
    # one that never ends is a hang, which a restart mends.
    metrics = AgentMetrics(stall_after=max(300.0, 3 * interval))
    observer = Observer(
        probe,
        None if no_kubelet_checkpoint else kubelet_checkpoint,
        sysfs if rdma else None,
        frozenset(ignore_xid),
        metrics=metrics,
        pod_resources=pod_resources,
    )
    try:
        if client is None:  # a dry run
            inventory, checkpoints = observer.observe()
            obj = desired(node, inventory, checkpoints, None)
            obj["status"] = health_status(inventory, None, now_rfc3339())
            click.echo(yaml.safe_dump(obj, sort_keys=False), nl=False)
            return
        events = EventRecorder(client, component="kgpu-agent", instance=node, workers=1).start()
        publisher = DevicePublisher(client, node)
        runner = Agent(observer, publisher, options, events=events, metrics=metrics)
        try:
            if once:
                runner.round()
                count = len(observer.inventory.gpus) if observer.inventory else 0
                click.echo(f"Device {node}: {count} GPUs reported")
                return
            server = HealthServer(
                metrics.render,
                metrics.ready,
                live=metrics.live,
                host=metrics_address,
                port=metrics_port,
            ).start()
            logging.getLogger("kgpu.agent").info(
                "kgpu agent for node %s: metrics on port %d", node, server.port
            )
            stop = threading.Event()
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: stop.set())
            try:
                runner.run(stop)
            finally:
                server.stop()
        finally:
            events.stop()
    except (KubeError, ProbeError, GpuUnreadable, OSError) as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        probe.close()
        pod_resources.close()


def _node_labels(client: KubeClient, node: str) -> dict[str, str]:
    """The Node's labels; none where it cannot be read (the agent runs on regardless)."""
    from kgpu.kube.api.errors import KubeError
    from kgpu.kube.api.resource_types import NODES

    try:
        labels = client.get(NODES, node).get("metadata", {}).get("labels") or {}
    except KubeError:
        return {}
    return {str(k): str(v) for k, v in labels.items()}
