from __future__ import annotations

from collections.abc import Generator
from pathlib import Path

import pytest

from tests.hostile_objects import TALLY
from tests.inputs import openb_trace, under_ci

# Why a skip fails under CI=true: it would let CI pass without checking what the test is for.
CI_SKIP = (
    "CI=true and this test skipped; under CI only tests marked nvidia may skip (CI has no"
    " GPU), every other input must be there. It said: {reason}"
)


@pytest.fixture(scope="session")
def openb_dir() -> Path:
    return openb_trace()


def _allowed_under_ci(node: pytest.Item | pytest.Collector) -> bool:
    return not under_ci() or node.get_closest_marker("nvidia") is not None


def _failed_skip(report: pytest.TestReport | pytest.CollectReport) -> None:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    reason = reason.removeprefix("Skipped: ")
    report.outcome = "failed"
    report.longrepr = CI_SKIP.format(reason=reason)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.skipped and not hasattr(report, "wasxfail") and not _allowed_under_ci(item):
        _failed_skip(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    report = yield
    if report.skipped and not _allowed_under_ci(collector):
        _failed_skip(report)
    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """How many hostile objects each target was fed and refused (tests/hostile_objects.py),
    shown in every run that fed it any, CI's included."""
    if TALLY:
        terminalreporter.section("hostile objects")
    for target, count in sorted(TALLY.items()):
        terminalreporter.write_line(
            f"hostile objects ({target}): tried {count.tried}, refused {count.refused}"
        )
