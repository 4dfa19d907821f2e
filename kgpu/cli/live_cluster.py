"""Commands for a live cluster: the webhook, explain, the scheduler."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from kgpu.cli.share_options import reservation_config, share_options
from kgpu.config import POLICIES, ProfileError


@click.command()
@click.option(
    "--address",
    default="127.0.0.1",
    show_default=True,
    help="the address to listen on (the install gives the pod's IP)",
)
@click.option("--port", type=click.IntRange(0, 65535), default=8443, show_default=True)
@click.option("--cert", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--key", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--scheduler-name", default="kgpu-scheduler", show_default=True)
@click.option(
    "--record-key",
    default="",
    help="NAMESPACE/NAME of the Secret whose key signs kgpu's records on pods (kgpu run "
    "makes it); default: kgpu-system/SCHEDULER_NAME-record-key",
)
@click.option(
    "--kubeconfig",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="where Workspaces' Nodes and the Queues are read; default: the pod's service account, "
    "else $KUBECONFIG or ~/.kube/config",
)
@click.option(
    "--on-nodes-unavailable",
    type=click.Choice(["admit", "deny"]),
    default="admit",
    show_default=True,
    help="a Workspace's CREATE when the Nodes cannot be read: admit it with a warning "
    "(the controller still places it or says why not) or deny it",
)
@click.option(
    "--agent-service-account",
    default="",
    help="NAMESPACE:NAME of the node agents' ServiceAccount: a Device written by it is "
    "allowed only from the agent pod on that Device's node (docs/SECURITY.md)",
)
def webhook(
    address: str,
    port: int,
    cert: Path | None,
    key: Path | None,
    scheduler_name: str,
    record_key: str,
    kubeconfig: str | None,
    on_nodes_unavailable: str,
    agent_service_account: str,
) -> None:
    """Serve the admission webhook (POST /validate, GET /healthz) over HTTPS.

    Without --cert and --key it makes a throwaway certificate for localhost and 127.0.0.1
    and says where its CA is, for trying the webhook out by hand."""
    import logging
    import signal
    import tempfile

    from kgpu.kube.admission.device_writer import DeviceWriters, pod_reader
    from kgpu.kube.admission.node_access import subject_access
    from kgpu.kube.admission.review import WorkspaceNodes
    from kgpu.kube.admission.webhook_server import WebhookServer, tls_context
    from kgpu.kube.api.errors import KubeError
    from kgpu.kube.api.listed import Listed, webhook_client
    from kgpu.kube.api.printable import escape_logs
    from kgpu.kube.api.resource_types import PODS, QUEUES, WEBHOOK_PATH
    from kgpu.kube.install.secret_file import write_private
    from kgpu.kube.install.webhook_certs import generate_tls
    from kgpu.kube.live.record_key import KeyReader, default_secret, split
    from kgpu.kube.workspaces.node_source import ListedNodes

    if (cert is None) != (key is None):
        raise click.UsageError("--cert and --key go together")
    try:
        # Nothing connects yet: a kubeconfig that cannot be used fails before serving.
        client = webhook_client(kubeconfig)
    except KubeError as exc:
        raise click.ClickException(f"{exc} (needed to place Workspaces)") from exc
    nodes, queues = ListedNodes(client), Listed(client, QUEUES)
    secret = record_key or default_secret(scheduler_name)
    try:
        split(secret)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    workspaces = WorkspaceNodes(
        nodes,
        deny_when_unavailable=on_nodes_unavailable == "deny",
        may_list_nodes=subject_access(client),
    )
    devices = None
    if agent_service_account:
        sa_namespace, _, sa_name = agent_service_account.partition(":")
        if not sa_namespace or not sa_name:
            raise click.UsageError("--agent-service-account is NAMESPACE:NAME")
        pods = pod_reader(lambda ns, name: client.get(PODS, name, ns))
        devices = DeviceWriters(sa_namespace, sa_name, pods)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    escape_logs()  # object text in log lines: kgpu.kube.api.printable
    if cert is None or key is None:
        folder = Path(tempfile.mkdtemp(prefix="kgpu-webhook-"))
        tls = generate_tls(["localhost"], ["127.0.0.1"])
        cert, key = folder / "tls.crt", folder / "tls.key"
        (folder / "ca.crt").write_bytes(tls.ca_pem)
        cert.write_bytes(tls.cert_pem)
        write_private(key, tls.key_pem)
        click.echo(f"no --cert/--key: a throwaway certificate; its CA is {folder / 'ca.crt'}")
    try:
        server = WebhookServer(
            (address, port),
            tls_context(cert, key),
            scheduler_name,
            workspaces,
            queues,
            KeyReader(client, secret),
            devices=devices,
        )
    except (OSError, ValueError) as exc:
        raise click.ClickException(f"cannot serve on {address}:{port}: {exc}") from exc

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(0)  # Kubernetes stops pods with SIGTERM: leave serve_forever cleanly

    signal.signal(signal.SIGTERM, stop)
    click.echo(f"serving admission reviews on https://{address}:{server.port}{WEBHOOK_PATH}")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        nodes.close()


@click.command()
@click.argument("pod")
@click.option("-n", "--namespace", default="default", show_default=True)
@click.option(
    "--kubeconfig",
    type=click.Path(exists=True, dir_okay=False),
    help="default: $KUBECONFIG, ~/.kube/config, in-cluster",
)
@click.option("--scheduler-name", default="kgpu-scheduler", show_default=True)
@click.option(
    "--policy", default="kgpu", show_default=True, help="the profile whose filters explain"
)
def explain(
    pod: str, namespace: str, kubeconfig: str | None, scheduler_name: str, policy: str
) -> None:
    """Why POD (name or namespace/name) is pending, or where and on which GPUs it runs."""
    from kgpu.kube.explain.explanation import ExplainError, explain_live

    if "/" in pod:
        namespace, pod = pod.split("/", 1)
    try:
        answer = explain_live(pod, namespace, kubeconfig, scheduler_name, policy)
    except (ExplainError, ProfileError) as exc:
        raise click.ClickException(str(exc)) from exc
    for line in answer.lines():
        click.echo(line)


@click.command("run")
@click.option(
    "--kubeconfig",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="kubeconfig file; default: the pod's service account, else $KUBECONFIG or ~/.kube/config",
)
@click.option("--scheduler-name", default="kgpu-scheduler", show_default=True)
@click.option("--policy", default="kgpu", show_default=True, help=f"one of {', '.join(POLICIES)}")
@click.option(
    "--metrics-port",
    default=10251,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="port of /metrics, /healthz and /readyz (0: any free port)",
)
@click.option(
    "--liveness-failure-seconds",
    type=click.FloatRange(0),
    default=300.0,
    show_default=True,
    help="/healthz fails once scheduling sessions have failed, one after another, for this "
    "long, or the loop has not come round for this long (0: never)",
)
@click.option(
    "--metrics-address",
    default="127.0.0.1",
    show_default=True,
    help="the address /metrics and the probes listen on (the install gives the pod's IP)",
)
@click.option("--leader-elect/--no-leader-elect", default=True, show_default=True)
@click.option("--namespace-for-lease", default="kube-system", show_default=True)
@click.option(
    "--record-key",
    default="",
    help="NAMESPACE/NAME of the Secret whose key signs kgpu's records on pods, made at start "
    "if absent; default: kgpu-system/SCHEDULER_NAME-record-key",
)
@click.option(
    "--autoscale/--no-autoscale",
    default=False,
    show_default=True,
    help="create trigger pods so that Karpenter or the cluster autoscaler adds GPU nodes "
    "for the pods kgpu cannot place (docs/AUTOSCALING.md)",
)
@click.option(
    "--nodepool",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="YAML of the Karpenter NodePools (and InstanceTypes) to ask for nodes; "
    "default: any autoscaler, by GPU model",
)
@click.option(
    "--gpu-memory-to-fraction-ratio",
    type=click.FloatRange(0.0, 1.0, min_open=True),
    default=0.1,
    show_default=True,
    help="with --autoscale: the share of a GPU a gpu-memory request stands for when the "
    "GPU model is not known",
)
@click.option(
    "--trigger-namespace",
    default="kgpu-system",
    show_default=True,
    help="with --autoscale: where trigger pods are created",
)
@click.option(
    "--workspaces/--no-workspaces",
    default=True,
    show_default=True,
    help="run the Workspace controller: each kgpu.io Workspace into its inference "
    "workload on one node group (docs/WORKSPACES.md)",
)
@click.option(
    "--kaito-workspaces/--no-kaito-workspaces",
    default=False,
    show_default=True,
    help="with --workspaces: reconcile KAITO's kaito.sh Workspaces too, but for those "
    "KAITO's own controller holds (docs/MIGRATING.md, From KAITO)",
)
@share_options
@click.option(
    "--serve-webhook/--no-serve-webhook",
    default=None,
    help="serve the admission webhook from this process and register it with the API "
    "server (for kgpu outside the cluster: docs/INSTALL.md); default: serve unless "
    "running in a pod (KUBERNETES_SERVICE_HOST set), where the install's webhook serves",
)
@click.option(
    "--webhook-port",
    type=click.IntRange(0, 65535),
    default=9443,
    show_default=True,
    help="with --serve-webhook: the port it listens on",
)
@click.option(
    "--webhook-address",
    default="",
    help="with --serve-webhook: the address it listens on; default: this machine's "
    "address on the route to the API server (0.0.0.0: every IPv4 interface)",
)
@click.option(
    "--webhook-host",
    default="",
    help="with --serve-webhook: the address the API server reaches this machine at; "
    "default: the local address of the route to the API server",
)
@click.option("-v", "--verbose", is_flag=True, help="log at debug level")
def run_scheduler(
    kubeconfig: str | None,
    scheduler_name: str,
    policy: str,
    metrics_port: int,
    liveness_failure_seconds: float,
    metrics_address: str,
    leader_elect: bool,
    namespace_for_lease: str,
    record_key: str,
    autoscale: bool,
    nodepool: Path | None,
    gpu_memory_to_fraction_ratio: float,
    trigger_namespace: str,
    workspaces: bool,
    kaito_workspaces: bool,
    serve_webhook: bool | None,
    webhook_port: int,
    webhook_address: str,
    webhook_host: str,
    verbose: bool,
    **shares: Any,
) -> None:
    """Schedule the pods whose spec.schedulerName is SCHEDULER_NAME in a live cluster,
    until SIGTERM or SIGINT."""
    import logging
    import os
    import signal
    import threading

    from kgpu.autoscale.planner import PlannerConfig
    from kgpu.autoscale.trigger_controller import ControllerConfig
    from kgpu.cli.workstation import WorkstationWebhook
    from kgpu.config import load_profile
    from kgpu.kube.anchors.karpenter import NodePoolError
    from kgpu.kube.api.errors import KubeError
    from kgpu.kube.api.printable import escape_logs
    from kgpu.kube.install.workstation import ensure_namespace
    from kgpu.kube.live.loop import LoopConfig
    from kgpu.kube.live.scheduler_process import RunningScheduler, RunOptions
    from kgpu.kube.scaling.live_autoscaler import AutoscaleOptions
    from kgpu.kube.scaling.trigger_pods import TriggerPodConfig
    from kgpu.kube.workspaces.runner import WorkspaceRunOptions
    from kgpu.sim.autoscale_run import load_nodepools

    if nodepool is not None and not autoscale:
        raise click.UsageError("--nodepool goes with --autoscale")
    if serve_webhook is None:
        # In a pod, the install's webhook Service serves; elsewhere nothing else would.
        serve_webhook = not os.environ.get("KUBERNETES_SERVICE_HOST")
    level = logging.DEBUG if verbose else logging.INFO
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    escape_logs()  # object text in log lines: kgpu.kube.api.printable
    try:
        load_profile(policy)  # a bad policy fails before anything connects
        scaling = None
        if autoscale:
            pools = load_nodepools(nodepool) if nodepool is not None else ()
            planner = PlannerConfig(pools, gpu_memory_to_fraction_ratio)
            scaling = AutoscaleOptions(
                controller=ControllerConfig(planner=planner),
                pods=TriggerPodConfig(namespace=trigger_namespace),
                scheduler_name=scheduler_name,
            )
        running = RunningScheduler(
            RunOptions(
                kubeconfig=kubeconfig,
                scheduler_name=scheduler_name,
                policy=policy,
                metrics_port=metrics_port,
                metrics_host=metrics_address,
                leader_elect=leader_elect,
                lease_namespace=namespace_for_lease,
                record_key=record_key,
                # Outside the cluster nothing may have made kgpu's namespace yet.
                make_namespace=ensure_namespace,
                autoscale=scaling,
                workspaces=WorkspaceRunOptions(kaito=kaito_workspaces) if workspaces else None,
                loop=LoopConfig(
                    scheduler_name=scheduler_name,
                    policy=policy,
                    reservations=reservation_config(**shares),
                    liveness_failure_s=liveness_failure_seconds,
                ),
                companions=(
                    (
                        WorkstationWebhook(
                            scheduler_name,
                            webhook_port,
                            webhook_host,
                            webhook_address,
                            record_key=record_key,
                            kaito=workspaces and kaito_workspaces,
                        ),
                    )
                    if serve_webhook
                    else ()
                ),
            )
        )
    except (ProfileError, NodePoolError, KubeError, OSError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        running.start()
    except (KubeError, OSError) as exc:  # the webhook's port, or its registration
        running.client.close()  # companions start first: nothing else runs yet
        raise click.ClickException(f"cannot serve the admission webhook: {exc}") from exc
    try:
        while not stop.wait(1.0):
            pass
    finally:
        running.stop()
