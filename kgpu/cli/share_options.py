"""``kgpu run``'s options for shares on real nodes: reservation pods and GPU-env ConfigMaps
(docs/DEVICES.md, "From an allocation to a running container")."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import Any, TypeVar

import click

from kgpu.kube.objects.reservation_pod import (
    DEFAULT_IMAGE,
    RESERVATION_NAMESPACE,
    ReservationConfig,
)

F = TypeVar("F", bound=Callable[..., Any])


def share_options(command: F) -> F:
    options = [
        click.option(
            "--confine-shares/--no-confine-shares",
            default=True,
            show_default=True,
            help="hold each GPU that carries shares with a reservation pod asking the device "
            "plugin for it, and give each share's containers that GPU (a share the webhook "
            "did not mutate is then not placed); off: shares are only accounted",
        ),
        click.option(
            "--reservation-namespace",
            default=RESERVATION_NAMESPACE,
            show_default=True,
            help="where reservation pods are created",
        ),
        click.option(
            "--reservation-image",
            default=DEFAULT_IMAGE,
            show_default=True,
            help="the image reservation pods run (it only has to stay up)",
        ),
        click.option(
            "--reservation-command",
            default="",
            help="the reservation container's command, as a shell would split it; default: "
            "the image's own",
        ),
        click.option(
            "--reservation-pull-policy",
            type=click.Choice(["Always", "IfNotPresent", "Never"]),
            default="IfNotPresent",
            show_default=True,
        ),
        click.option(
            "--reservation-idle-seconds",
            type=click.FloatRange(0.0),
            default=30.0,
            show_default=True,
            help="how long a reservation outlives the last share on its GPU",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def reservation_config(
    confine_shares: bool,
    reservation_namespace: str,
    reservation_image: str,
    reservation_command: str,
    reservation_pull_policy: str,
    reservation_idle_seconds: float,
) -> ReservationConfig | None:
    """The options as the loop takes them; None with --no-confine-shares."""
    if not confine_shares:
        return None
    try:
        command = tuple(shlex.split(reservation_command))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--reservation-command") from exc
    return ReservationConfig(
        namespace=reservation_namespace,
        image=reservation_image,
        command=command,
        pull_policy=reservation_pull_policy,
        idle_grace_s=reservation_idle_seconds,
    )
