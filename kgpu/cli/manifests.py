"""``kgpu manifests``: the install, as one YAML stream (:mod:`kgpu.kube.install.bundle`)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import click
from click.decorators import FC

from kgpu.cli.common import console


def switch(flag: str, default: bool, text: str) -> Callable[[FC], FC]:
    """``--FLAG/--no-FLAG``: a feature of the install, with the objects and rights it needs."""
    return click.option(f"--{flag}/--no-{flag}", default=default, show_default=True, help=text)


@click.command()
@click.option("--namespace", default="kgpu-system", show_default=True, help="where kgpu runs")
@click.option("--image", default="ghcr.io/kgpu/kgpu:0.1.0", show_default=True)
@click.option(
    "--scheduler-name",
    default="kgpu-scheduler",
    show_default=True,
    help="the spec.schedulerName kgpu schedules; also names the install's objects",
)
@switch("webhook", True, "the admission webhook, and the rights it needs")
@click.option(
    "--webhook-failure-policy",
    type=click.Choice(["Ignore", "Fail"]),
    default="Ignore",
    show_default=True,
    help="when the webhook cannot be reached: admit (Ignore) or refuse (Fail)",
)
@click.option("--replicas", type=click.IntRange(1), default=2, show_default=True)
@click.option("--crds-only", is_flag=True, help="only the CustomResourceDefinitions")
@switch("agent", True, "the node agent's DaemonSet, which reports each GPU node's Device")
@click.option(
    "--agent-node-selector",
    default="nvidia.com/gpu.present=true",
    show_default=True,
    help="the nodes the agent runs on, as label=value pairs separated by commas",
)
@click.option(
    "--agent-runtime-class",
    default="",
    help="the RuntimeClass that gives containers the NVIDIA driver (the GPU Operator's "
    '"nvidia"), where it is not the nodes\' default runtime',
)
@switch("workspaces", True, "the Workspace controller in the scheduler, and its rights")
@switch(
    "kaito-workspaces",
    False,
    "with --workspaces: KAITO's kaito.sh Workspaces admitted and reconciled too, and the "
    "rights on them (docs/MIGRATING.md, From KAITO)",
)
@switch(
    "autoscale",
    False,
    "trigger pods (docs/AUTOSCALING.md) in the install's namespace, their "
    "PriorityClass, and the rights they need",
)
@click.option(
    "--tenant-namespaces",
    default="",
    help="the namespaces the scheduler may write in (bind, delete and patch pods, "
    "ConfigMaps, Workspace workloads), separated by commas; default: every namespace",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="file to write, readable by its owner only (it holds the webhook's private key)",
)
def manifests(
    namespace: str,
    image: str,
    scheduler_name: str,
    webhook: bool,
    webhook_failure_policy: str,
    replicas: int,
    crds_only: bool,
    agent: bool,
    agent_node_selector: str,
    agent_runtime_class: str,
    workspaces: bool,
    kaito_workspaces: bool,
    autoscale: bool,
    tenant_namespaces: str,
    output: Path | None,
) -> None:
    """Print the whole install as one YAML stream for `kubectl apply -f -`.

    With the webhook, a new certificate is made each time: keep the output as a Secret."""
    from kgpu.kube.install.bundle import render_objects, to_yaml
    from kgpu.kube.install.options import InstallOptions, RenderError
    from kgpu.kube.install.secret_file import write_private

    opts = InstallOptions(
        namespace=namespace,
        image=image,
        scheduler_name=scheduler_name,
        webhook=webhook,
        failure_policy=webhook_failure_policy,
        replicas=replicas,
        crds_only=crds_only,
        agent=agent,
        agent_node_selector=agent_node_selector,
        agent_runtime_class=agent_runtime_class,
        workspaces=workspaces,
        kaito_workspaces=kaito_workspaces,
        autoscale=autoscale,
        tenant_namespaces=tuple(n.strip() for n in tenant_namespaces.split(",") if n.strip()),
    )
    try:
        objects = render_objects(opts)
    except RenderError as exc:
        raise click.ClickException(str(exc)) from exc
    args = " ".join(sys.argv[1:]) if sys.argv[1:2] == ["manifests"] else "manifests"
    header = f"# kgpu install for `kubectl apply -f`; rendered by `kgpu {args}`\n"
    if webhook and not crds_only:
        header += "# Holds the webhook's private key: keep this file as you keep a Secret.\n"
    text = to_yaml(objects, header)
    if output is None:
        click.echo(text, nl=False)
    else:
        write_private(output, text.encode())
        console.print(f"wrote {len(objects)} objects to {output}")
