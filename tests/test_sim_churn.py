"""kgpu simulate openb --churn on hand-built traces: what a user sees when pods come and go."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from kgpu.cli import main
from kgpu.config import load_profile
from kgpu.model.gpu import GpuRequest
from kgpu.model.node import NodeInfo, NodeName
from kgpu.model.pod import PodKey, PodSpec
from kgpu.plugins.registry import build_scheduler
from kgpu.sim.churn import ChurnPod, Outcome, replay_churn
from kgpu.sim.churn_run import ChurnRun, run_churn
from kgpu.sim.churn_trace import PHASES, read_timed_pods
from kgpu.sim.openb import TraceError, read_nodes
from kgpu.state.cluster import ClusterState

HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time"
)


def _nodes(tmp_path: Path, gpus: int = 1) -> Path:
    path = tmp_path / "nodes.csv"
    path.write_text(f"sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,{gpus},T4\n")
    return path


def _pods(tmp_path: Path, *rows: str) -> Path:
    """Rows of name, num_gpu, gpu_milli, phase, creation, deletion (CPU and memory fixed)."""
    path = tmp_path / "pods.csv"
    lines = [HEADER]
    for row in rows:
        name, num_gpu, milli, phase, created, deleted = row.split(",")
        lines.append(f"{name},1000,1024,{num_gpu},{milli},,LS,{phase},{created},{deleted}")
    path.write_text("\n".join(lines) + "\n")
    return path


def _run(
    nodes: Path, pods: Path, policy: str = "bestfit", phases: frozenset[str] = frozenset(PHASES)
) -> ChurnRun:
    return run_churn(read_nodes(nodes), read_timed_pods(pods), policy, 42, phases=phases)


def _at(run: ChurnRun) -> dict[int, tuple[float, int]]:
    """Allocation % and pods waiting after each instant."""
    r = run.result
    return {
        int(t): (r.pct(int(u)), int(w))
        for t, u, w in zip(r.times, r.used_milli, r.waiting, strict=True)
    }


def test_a_pod_placed_only_after_another_departs_pends_until_then(tmp_path: Path) -> None:
    pods = _pods(tmp_path, "a,1,1000,Running,0,100", "b,1,1000,Running,10,500")
    run = _run(_nodes(tmp_path), pods)
    r = run.result
    assert r.outcome.tolist() == [Outcome.PLACED, Outcome.PLACED_LATE]
    assert r.waited_s.tolist() == [0, 90]
    assert _at(run) == {0: (100.0, 0), 10: (100.0, 1), 100: (100.0, 0), 500: (0.0, 0)}
    assert run.summary()["placed_after_waiting"] == 1
    assert run.summary()["pending_p50_s"] == 45.0  # numpy's linear percentile of 0 and 90


def test_departures_free_gpus_and_the_time_average_weighs_each_level(tmp_path: Path) -> None:
    pods = _pods(tmp_path, "a,1,1000,Running,0,100", "b,1,1000,Running,0,300")
    run = _run(_nodes(tmp_path, gpus=2), pods)
    assert _at(run) == {0: (100.0, 0), 100: (50.0, 0), 300: (0.0, 0)}
    # 100% for 100 s, 50% for 200 s, over the 300 s from the first arrival to the last event.
    assert run.result.time_avg_alloc_pct == pytest.approx(200.0 / 3)
    assert run.summary()["time_avg_gpu_asked_pct"] == pytest.approx(66.6667)


def test_departures_come_before_arrivals_at_the_same_second(tmp_path: Path) -> None:
    pods = _pods(tmp_path, "a,1,1000,Running,0,100", "b,1,1000,Running,100,200")
    run = _run(_nodes(tmp_path), pods)
    assert run.result.outcome.tolist() == [Outcome.PLACED, Outcome.PLACED]
    assert run.result.waited_s.tolist() == [0, 0]


def test_pods_without_deletion_time_stay_and_those_behind_them_wait_to_the_end(
    tmp_path: Path,
) -> None:
    pods = _pods(tmp_path, "a,1,1000,Running,0,", "b,1,1000,Running,10,", "c,0,0,Running,20,50")
    run = _run(_nodes(tmp_path), pods)
    r = run.result
    assert r.outcome.tolist() == [Outcome.PLACED, Outcome.WAITING, Outcome.PLACED]
    assert r.end == 50
    assert r.waited_s.tolist() == [0, 40, 0]  # b: from its arrival to the end of the replay
    assert _at(run)[50] == (100.0, 1)
    assert run.summary()["waiting_at_end"] == 1


def test_a_pod_deleted_while_waiting_is_withdrawn_with_its_wait(tmp_path: Path) -> None:
    pods = _pods(tmp_path, "a,1,1000,Running,0,100", "b,1,1000,Pending,10,40")
    run = _run(_nodes(tmp_path), pods)
    assert run.result.outcome.tolist() == [Outcome.PLACED, Outcome.WITHDRAWN]
    assert run.result.waited_s.tolist() == [0, 30]
    assert _at(run)[40] == (100.0, 0)


def test_a_pod_deleted_the_second_it_came_is_not_scheduled(tmp_path: Path) -> None:
    pods = _pods(tmp_path, "a,1,1000,Running,5,5", "b,1,1000,Running,0,10")
    run = _run(_nodes(tmp_path), pods)
    assert run.result.outcome.tolist() == [Outcome.WITHDRAWN, Outcome.PLACED]
    assert run.result.waited_s.tolist() == [0, 0]
    assert run.result.times.tolist() == [0, 10]


def test_the_queue_is_first_come_first_tried_without_blocking_smaller_pods(
    tmp_path: Path,
) -> None:
    pods = _pods(
        tmp_path,
        "big,2,1000,Running,0,100",  # takes both GPUs
        "first,1,1000,Running,10,1000",
        "second,1,1000,Running,20,1000",
        "whole,2,1000,Running,30,1000",  # behind them, needs both GPUs
        "share,1,500,Running,40,1000",  # behind it: must not wait for it
    )
    run = _run(_nodes(tmp_path, gpus=2), pods)
    r = run.result
    assert r.outcome.tolist() == [
        Outcome.PLACED,
        Outcome.PLACED_LATE,
        Outcome.PLACED_LATE,
        Outcome.WITHDRAWN,
        Outcome.WITHDRAWN,
    ]
    assert r.waited_s.tolist() == [0, 90, 80, 970, 960]
    # Both GPUs went to first and second (FIFO) at 100; nothing is left for the others.
    assert _at(run)[100] == (100.0, 2)


def test_a_waiting_share_is_placed_past_a_whole_gpu_pod_that_does_not_fit(
    tmp_path: Path,
) -> None:
    pods = _pods(
        tmp_path,
        "part,1,600,Running,0,100",
        "full,1,1000,Running,0,1000",
        "whole,2,1000,Running,10,1000",  # first in the queue, fits only once both are idle
        "share,1,500,Running,20,1000",  # 400 left on part's GPU: waits too
    )
    run = _run(_nodes(tmp_path, gpus=2), pods)
    r = run.result
    assert r.outcome.tolist()[2:] == [Outcome.WITHDRAWN, Outcome.PLACED_LATE]
    assert r.waited_s.tolist()[3] == 80


@pytest.mark.parametrize("policy", ["bestfit", "fgd", "kgpu"])
def test_failed_and_pending_phase_pods_are_replayed_unless_left_out(
    tmp_path: Path, policy: str
) -> None:
    pods = _pods(
        tmp_path,
        "ran,1,1000,Running,0,100",
        "failed,1,1000,Failed,0,100",
        "never,1,1000,Pending,0,100",
    )
    nodes = _nodes(tmp_path, gpus=3)
    every = _run(nodes, pods, policy)
    assert every.result.outcome.tolist() == [Outcome.PLACED] * 3
    assert every.left_out == 0 and _at(every)[0] == (100.0, 0)
    kept = _run(nodes, pods, policy, phases=frozenset({"Running", "Succeeded", "Failed"}))
    assert kept.left_out == 1 and len(kept.result.outcome) == 2
    alloc, waiting = _at(kept)[0]
    assert alloc == pytest.approx(200 / 3) and waiting == 0


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (
            "p,1,1000,Running,-5,10",
            "pods.csv row 2: column 'creation_time' is '-5', expected whole seconds from 0",
        ),
        (
            "p,1,1000,Running,50,10",
            "pods.csv row 2: column 'deletion_time' is 10, expected a time at or after the "
            "row's creation_time (50)",
        ),
        (
            "p,1,1000,Running,1.5,10",
            "pods.csv row 2: column 'creation_time' is '1.5', expected whole seconds",
        ),
        (
            "p,1,1000,Running,,10",
            "pods.csv row 2: column 'creation_time' is empty, expected whole seconds",
        ),
        (
            "p,1,1000,Running,0,99999999999999",
            "pods.csv row 2: column 'deletion_time' is '99999999999999', expected whole "
            "seconds from 0 to 1099511627776",
        ),
        (
            "p,1,1000,Lost,0,10",
            "pods.csv row 2: column 'pod_phase' is 'Lost', expected one of Pending, Running, "
            "Succeeded, Failed, Unknown or empty",
        ),
    ],
)
def test_malformed_rows_are_refused_naming_row_field_and_value(
    tmp_path: Path, row: str, message: str
) -> None:
    pods = _pods(tmp_path, row)
    with pytest.raises(TraceError, match="^" + re.escape(message)):
        read_timed_pods(pods)
    result = CliRunner().invoke(
        main,
        ["simulate", "openb", "--churn", "--nodes", str(_nodes(tmp_path)), "--pods", str(pods)],
    )
    assert result.exit_code == 1
    assert message in " ".join(result.output.split())


def test_a_name_given_twice_and_a_list_without_times_are_refused(tmp_path: Path) -> None:
    pods = _pods(tmp_path, "p,1,1000,Running,0,10", "p,1,1000,Running,5,10")
    with pytest.raises(TraceError, match=r"row 3: column 'name' is 'p', expected a name of its"):
        read_timed_pods(pods)
    untimed = tmp_path / "untimed.csv"
    untimed.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1000,1024,1,1000\n")
    with pytest.raises(TraceError, match=r"untimed.csv: no 'creation_time' column"):
        read_timed_pods(untimed)


def test_cli_writes_figures_series_and_plot_for_each_policy(tmp_path: Path) -> None:
    pods = _pods(tmp_path, "a,1,1000,Running,0,100", "b,1,500,Failed,10,500", "c,0,0,,20,")
    out = tmp_path / "churn.json"
    args = ["simulate", "openb", "--churn", "--nodes", str(_nodes(tmp_path)), "--pods", str(pods)]
    args += ["--policy", "bestfit,fgd", "--json", str(out), "--plot", str(tmp_path / "plots")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "policy=bestfit seed=42 churn" in result.output
    assert "policy=fgd seed=42 churn" in result.output
    data = json.loads(out.read_text())
    assert [r["policy"] for r in data["runs"]] == ["bestfit", "fgd"]
    run = data["runs"][0]
    assert run["placed_after_waiting"] == 1 and run["pending_p99_s"] == pytest.approx(88.2)
    assert run["series"]["time_s"] == [0, 10, 20, 100, 500]
    assert run["series"]["gpu_alloc_pct"] == [100.0, 100.0, 100.0, 50.0, 0.0]
    assert run["series"]["waiting_pods"] == [0, 1, 1, 0, 0]
    assert (tmp_path / "plots" / "churn.png").stat().st_size > 0


def test_cli_keeps_churn_and_arrival_options_apart(tmp_path: Path) -> None:
    pods = _pods(tmp_path, "a,1,1000,Running,0,100")
    base = ["simulate", "openb", "--nodes", str(_nodes(tmp_path)), "--pods", str(pods)]
    tuned = CliRunner().invoke(main, [*base, "--churn", "--tune", "1.0"])
    assert tuned.exit_code == 2 and "--tune" in tuned.output
    shared = CliRunner().invoke(main, [*base, "--node-share", "0.5"])
    assert shared.exit_code == 2 and "applies to --churn only" in shared.output
    phases = CliRunner().invoke(main, [*base, "--churn", "--phases", "Running,Lost"])
    assert phases.exit_code == 2 and "expected a comma-separated list of Pending" in phases.output


def test_a_higher_priority_pod_is_tried_first_though_it_came_later() -> None:
    gpu = GpuRequest(1, 1000)
    pods = [
        ChurnPod(PodSpec(PodKey("t/holder"), 1000, 1024, gpu), 0, 100),
        ChurnPod(PodSpec(PodKey("t/low"), 1000, 1024, gpu), 10, 1000),
        ChurnPod(PodSpec(PodKey("t/high"), 1000, 1024, gpu, priority=5), 20, 1000),
    ]
    state = ClusterState([NodeInfo(NodeName("n0"), 64000, 262144, gpu_count=1)])
    scheduler = build_scheduler(load_profile("bestfit"))
    result = replay_churn(state, scheduler, pods, [])
    assert result.outcome.tolist() == [Outcome.PLACED, Outcome.WITHDRAWN, Outcome.PLACED_LATE]
    assert result.waited_s.tolist() == [0, 990, 80]
