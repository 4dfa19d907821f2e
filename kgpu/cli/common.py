"""What the commands share: the console, progress bars and option parsing."""

from __future__ import annotations

import sys
from collections.abc import Callable

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

console = Console()


def progress_bar() -> Progress:
    return Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
        disable=not sys.stderr.isatty(),
    )


def bar_task(bar: Progress, name: str) -> tuple[Callable[[int], None], Callable[[int], None]]:
    """A bar for one replay: what to call per batch of pods, and once the count is known."""
    task = bar.add_task(name, total=None)

    def advance(k: int) -> None:
        bar.advance(task, k)

    def start(n: int) -> None:
        bar.update(task, total=n)

    return advance, start


def policy_list(value: str) -> list[str]:
    names = [n.strip() for n in value.split(",") if n.strip()]
    if not names:
        raise click.BadParameter("expected at least one policy", param_hint="--policies")
    return names
