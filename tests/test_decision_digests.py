"""Decisions kept across a restructuring: digests of what the scheduler decides, committed
before the code moved and compared after.

Three kinds of decision are pinned, each through an entry point users call:

- every built-in policy's openb replay (default trace, seed 42): each pod's node, GPU
  minors, milli and GPU memory, in arrival order;
- the queue sessions of ``bench/session.py`` at a small size, both mixes, three cycles
  each: every bind, eviction (with its reason and message), nomination, pending reason and
  event, and the queues' allocated and fair figures;
- ``kgpu simulate manifests --json`` on every folder of ``examples/`` under every policy.

A change that is meant to keep decisions must leave these digests as they are. A change
that is meant to alter decisions updates them in the same commit, and says why:
``python tests/test_decision_digests.py`` prints the current ones.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from kgpu.cli import main as cli_main
from kgpu.sim.openb_run import run_openb

ROOT = Path(__file__).resolve().parents[1]
OPENB = ROOT.parent / "shared" / "data" / "openb"
POLICIES = ("random", "dotprod", "gpuclustering", "gpupacking", "bestfit", "fgd", "kgpu")
EXAMPLES = ("autoscale", "manifests", "queues", "workspaces")
SESSION_SIZES = {"steady": (120, 1200, 500), "burst": (120, 1000, 600)}  # nodes, running, pending
SESSION_POLICIES = ("bestfit", "kgpu")

OPENB_DIGESTS = {
    "random": "0ee6c36db61b9ec6",
    "dotprod": "81266d957eccf216",
    "gpuclustering": "5cc336da16c06705",
    "gpupacking": "2b3bdd09bc2a304e",
    "bestfit": "5afbd56401cc4584",
    "fgd": "6bf4e095d2a4eabf",
    "kgpu": "dc769f1245635c3a",
}
SESSION_DIGESTS: dict[str, str] = {
    "burst/bestfit": "7a542f23e1b54bf3",
    "burst/kgpu": "4847a9f11f1d25cf",
    "steady/bestfit": "905d213ea40088cb",
    "steady/kgpu": "a7a800bb2cd6d9e3",
}
MANIFEST_DIGESTS: dict[str, str] = {
    "autoscale/random": "2227f1d94d412961",
    "autoscale/dotprod": "721c49131dc8fd49",
    "autoscale/gpuclustering": "438ea9d8ff3dff1d",
    "autoscale/gpupacking": "cd35728f5258c53a",
    "autoscale/bestfit": "f8ca0db16184b092",
    "autoscale/fgd": "5a634fc9ee1f39cc",
    "autoscale/kgpu": "2485dd8233af1eba",
    "manifests/random": "859bb678da4adb43",
    "manifests/dotprod": "dc5942ee59bb6386",
    "manifests/gpuclustering": "fb7426d7edebea18",
    "manifests/gpupacking": "3861a992c0828f58",
    "manifests/bestfit": "815c7e5483c8fcf1",
    "manifests/fgd": "168133825033bcfc",
    "manifests/kgpu": "17cdb6603eb31975",
    "queues/random": "3f079d0d6108964f",
    "queues/dotprod": "ef6d7a3fbf682335",
    "queues/gpuclustering": "342badb9967418a9",
    "queues/gpupacking": "8dc393527bdd7cda",
    "queues/bestfit": "94f0f3bf769bb3e3",
    "queues/fgd": "3d728971cca9a117",
    "queues/kgpu": "019e485fc7c3c3af",
    "workspaces/random": "dff1224f69a25be4",
    "workspaces/dotprod": "d112fd03f7b485ae",
    "workspaces/gpuclustering": "eb7305af63b652fc",
    "workspaces/gpupacking": "8bb17e85467830ae",
    "workspaces/bestfit": "0210db53e4dc91c1",
    "workspaces/fgd": "0f8791a6091770c8",
    "workspaces/kgpu": "a07a842609f34c92",
}


def digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def openb_digest(openb: Path, policy: str) -> str:
    run = run_openb(
        openb / "openb_node_list_gpu_node.csv",
        openb / "openb_pod_list_default.csv",
        policy,
        seed=42,
    )
    state = run.state
    placed = sorted(
        (str(a.pod), str(state.nodes[a.node].name), a.gpus, a.gpu_milli, a.gpu_memory)
        for a in state.allocations.values()
    )
    return digest({"nodes": run.result.nodes, "placed": placed})


def bench_session() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_session", ROOT / "bench" / "session.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_session"] = module
    spec.loader.exec_module(module)
    return module


def session_digest(mix: str, policy: str) -> str:
    bench = bench_session()
    nodes, running, pending = SESSION_SIZES[mix]
    snapshot = bench.build_snapshot(nodes, running, pending, 3, mix)
    rng = np.random.default_rng(3)
    cycles = []
    for _ in range(3):
        _, result = bench.run_once(snapshot, policy)
        cycles.append(
            {
                "binds": sorted((str(b.pod), b.node, b.gpus, b.gpu_milli) for b in result.binds),
                "evictions": sorted(
                    (str(e.pod), e.node, e.reason, e.message) for e in result.evictions
                ),
                "nominations": sorted((str(n.pod), n.node, n.gpus) for n in result.nominations),
                "pending": sorted((str(p.pod), p.message) for p in result.pending),
                "events": sorted(
                    (str(e.pod), e.type, e.reason, e.message, e.kind) for e in result.events
                ),
                "allocated": {q: list(v) for q, v in sorted(result.allocated.items())},
                "fair": {q: list(v) for q, v in sorted(result.fair.items())},
            }
        )
        snapshot = bench.next_cycle(snapshot, result, rng, 0.02, mix)
    return digest(cycles)


def manifest_digest(folder: str, policy: str, tmp: Path) -> str:
    out = tmp / f"{folder}-{policy}.json"
    result = CliRunner().invoke(
        cli_main,
        [
            "simulate",
            "manifests",
            str(ROOT / "examples" / folder),
            "--policy",
            policy,
            "--json",
            str(out),
        ],
    )
    if result.exit_code != 0:
        return digest({"exit": result.exit_code, "output": result.output})
    return digest(json.loads(out.read_text()))


@pytest.mark.slow
@pytest.mark.parametrize("policy", POLICIES)
def test_openb_replay_decisions_unchanged(openb_dir: Path, policy: str) -> None:
    assert openb_digest(openb_dir, policy) == OPENB_DIGESTS[policy]


@pytest.mark.parametrize("mix", sorted(SESSION_SIZES))
@pytest.mark.parametrize("policy", SESSION_POLICIES)
def test_queue_session_decisions_unchanged(mix: str, policy: str) -> None:
    assert session_digest(mix, policy) == SESSION_DIGESTS[f"{mix}/{policy}"]


@pytest.mark.parametrize("folder", EXAMPLES)
@pytest.mark.parametrize("policy", POLICIES)
def test_simulate_manifests_decisions_unchanged(folder: str, policy: str, tmp_path: Path) -> None:
    assert manifest_digest(folder, policy, tmp_path) == MANIFEST_DIGESTS[f"{folder}/{policy}"]


def main() -> None:
    """Print every digest, as the constants above hold them."""
    import tempfile

    tmp = Path(tempfile.mkdtemp())
    print("OPENB_DIGESTS = {")
    for policy in POLICIES:
        print(f'    "{policy}": "{openb_digest(OPENB, policy)}",')
    print("}")
    print("SESSION_DIGESTS = {")
    for mix in sorted(SESSION_SIZES):
        for policy in SESSION_POLICIES:
            print(f'    "{mix}/{policy}": "{session_digest(mix, policy)}",')
    print("}")
    print("MANIFEST_DIGESTS = {")
    for folder in EXAMPLES:
        for policy in POLICIES:
            print(f'    "{folder}/{policy}": "{manifest_digest(folder, policy, tmp)}",')
    print("}")


if __name__ == "__main__":
    main()
