"""Defragmentation's move rules one by one, PodDisruptionBudget arithmetic, and the
profile switch: off by default, on with one line, bad values refused by name."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kgpu.actions.defrag_rules import (
    PREEMPTIBLE_ANNOTATION,
    MoveFacts,
    RunningPod,
    Taken,
    duration,
    refusal,
)
from kgpu.config import POLICIES, ProfileError, load_profile
from kgpu.framework.defrag_config import Defragmentation
from kgpu.model.disruption import Amount, DisruptionBudget
from kgpu.model.workspace import LabelSelector
from tests.builders import make_pod

CONFIG = Defragmentation.model_validate({"enabled": True, "minRuntimeSeconds": 300})
PENDING = make_pod("y").gpus(1).priority(10).build()


def _facts(**kw: object) -> MoveFacts:
    return MoveFacts(1000.0, lambda n: [], **kw)  # type: ignore[arg-type]


def _why(running: RunningPod, facts: MoveFacts | None = None, taken: Taken | None = None) -> str:
    rule, text = refusal(running, PENDING, facts or _facts(), taken or Taken(), CONFIG)
    return f"{rule}: {text}" if rule else ""


def _running(priority: int = 0, annotation: str | None = None, **kw: object) -> RunningPod:
    pod = make_pod("x").share(500).priority(priority).build()
    if annotation is not None:
        pod = replace(pod, annotations={PREEMPTIBLE_ANNOTATION: annotation})
    return RunningPod(pod, kw.pop("started", 0.0), **kw)  # type: ignore[arg-type]


def test_a_pod_past_every_rule_may_move() -> None:
    assert _why(_running()) == ""


@pytest.mark.parametrize(
    ("running", "expected"),
    [
        (
            _running(annotation="false"),
            'preemptibility: not preemptible: annotation kgpu.io/preemptible is "false"',
        ),
        (
            _running(annotation="yes"),
            "preemptibility: not preemptible: annotation kgpu.io/preemptible is 'yes', "
            'expected "true" or "false"',
        ),
        (
            _running(priority=100),
            "preemptibility: not preemptible: priority 100 is not below 100 and no "
            "kgpu.io/preemptible annotation",
        ),
        (
            _running(priority=11, annotation="true"),
            "priority: priority 11 is above pending pod default/y's 10",
        ),
        (
            _running(started=800.0),
            "min-runtime: ran 3m20s, less than its min-runtime 5m",
        ),
        (
            _running(started=500.0, min_runtime_s=3600.0),
            "min-runtime: ran 8m20s, less than its min-runtime 1h",
        ),
    ],
    ids=[
        "annotation-false",
        "annotation-unreadable",
        "priority-not-below",
        "higher",
        "young",
        "queue",
    ],
)
def test_each_rule_says_why_it_refuses(running: RunningPod, expected: str) -> None:
    assert _why(running) == expected


def test_equal_priority_and_preemptible_by_annotation_may_move() -> None:
    assert _why(_running(priority=10)) == ""
    urgent = make_pod("z").gpus(1).priority(1000).build()
    running = _running(priority=500, annotation="true")
    assert refusal(running, urgent, _facts(), Taken(), CONFIG) == ("", "")
    assert refusal(_running(priority=500), urgent, _facts(), Taken(), CONFIG)[0] == (
        "preemptibility"
    )


def test_gang_minimum_counts_the_plans_earlier_moves() -> None:
    pod = _running(job="ns/j")
    facts = _facts(job_min={"ns/j": 2}, job_running={"ns/j": 3})
    assert _why(pod, facts) == ""
    taken = Taken()
    taken.add([_running(job="ns/j")])
    assert _why(pod, facts, taken) == (
        "gang minimum: job ns/j would keep 1 running pods, below its minMember 2"
    )


def test_budget_counts_the_plans_earlier_disruptions() -> None:
    pod = _running(budgets=("ns/pdb",))
    facts = _facts(budget_allowed={"ns/pdb": 1})
    assert _why(pod, facts) == ""
    taken = Taken()
    taken.add([pod])
    assert _why(pod, facts, taken) == (
        "disruption budget: PodDisruptionBudget ns/pdb allows no more disruptions"
    )
    assert _why(pod, _facts()) != ""  # a budget with no status allows nothing


@pytest.mark.parametrize(
    ("budget", "healthy", "expected", "allowed"),
    [
        (DisruptionBudget("ns/a", LabelSelector(), min_available=Amount(2)), 3, 3, 1),
        (DisruptionBudget("ns/a", LabelSelector(), min_available=Amount(2)), 2, 3, 0),
        (DisruptionBudget("ns/a", LabelSelector(), min_available=Amount(50, True)), 3, 5, 0),
        (DisruptionBudget("ns/a", LabelSelector(), max_unavailable=Amount(1)), 4, 4, 1),
        (DisruptionBudget("ns/a", LabelSelector(), max_unavailable=Amount(1)), 3, 4, 0),
        (DisruptionBudget("ns/a", LabelSelector(), max_unavailable=Amount(30, True)), 10, 10, 3),
    ],
)
def test_disruptions_allowed_as_the_controller_counts_them(
    budget: DisruptionBudget, healthy: int, expected: int, allowed: int
) -> None:
    assert budget.allowed(healthy, expected) == allowed


def test_a_budget_selects_pods_of_its_namespace_by_labels() -> None:
    budget = DisruptionBudget("ns/a", LabelSelector((("app", "web"),)), min_available=Amount(1))
    assert budget.selects("ns", {"app": "web", "x": "y"})
    assert not budget.selects("other", {"app": "web"})
    assert not budget.selects("ns", {"app": "db"})
    with pytest.raises(ValueError, match="exactly one of minAvailable and maxUnavailable"):
        DisruptionBudget("ns/a", LabelSelector())


def test_durations_read_short() -> None:
    assert [duration(s) for s in (0, 45, 600, 7500, 7200, 90000)] == [
        "0s",
        "45s",
        "10m",
        "2h5m",
        "2h",
        "1d1h",
    ]


def test_defragmentation_is_off_in_every_built_in_profile() -> None:
    assert not Defragmentation().enabled
    for name in POLICIES:
        assert not load_profile(name).defragmentation.enabled


def test_one_line_turns_it_on(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(
        "mine: {gpuChoice: GpuTightest, scores: [{name: BestFit}], "
        "defragmentation: {enabled: true, maxMovesPerRound: 8}}\n"
    )
    config = load_profile(str(path)).defragmentation
    assert config.enabled and config.max_moves_per_round == 8 and config.max_moves_per_pod == 2


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("{maxMovesPerRound: 0}", "maxMovesPerRound\n  Input should be greater than or equal to 1"),
        ("{maxMovesPerPod: 5}", "maxMovesPerPod\n  Input should be less than or equal to 4"),
        ("{enabled: 'yes'}", "enabled\n  Input should be a valid boolean"),
        ("{moveCostSeconds: -1}", "moveCostSeconds\n  Input should be greater than or equal to 0"),
        ("{maxMoves: 3}", "maxMoves\n  Extra inputs are not permitted"),
    ],
)
def test_bad_values_are_refused_by_name(tmp_path: Path, body: str, expected: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(f"mine: {{gpuChoice: GpuTightest, defragmentation: {body}}}\n")
    with pytest.raises(ProfileError) as err:
        load_profile(str(path))
    message = str(err.value)
    assert "profile 'mine'" in message and "defragmentation." + expected in message
    value = body.split(":", 1)[1].strip(" }'")
    assert f"input_value={value}" in message or f"input_value='{value}'" in message
