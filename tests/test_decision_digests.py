"""Decisions kept across a restructuring: digests of what the scheduler decides, committed
before the code moved and compared after.

Three kinds of decision are pinned, each through an entry point users call:

- every built-in policy's openb replay (default trace, seed 42): each pod's node, GPU
  minors, milli and GPU memory, in arrival order;
- the queue sessions of ``bench/session.py`` at a small size, both mixes, three cycles
  each: every bind, eviction (with its reason and message), nomination, pending reason and
  event, and the queues' allocated and fair figures;
- ``bench/core.py``'s pods of new shapes (``--new-shapes``) at a small size under the
  policies that score with FGD's model, and bestfit: every decision, a placement's node and
  GPU slots or a refusal's message, as the scheduling core makes it without its per-shape
  cache (no shape repeats);
- ``kgpu simulate manifests --json`` on every folder of ``examples/`` under every policy:
  every pod's and node's figures (not the notes on skipped documents, which are words for
  the reader, not decisions).

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
NEW_SHAPE_SIZE = (600, 6500)  # nodes, pods: past what the nodes hold, so refusals come too
NEW_SHAPE_POLICIES = ("bestfit", "fgd", "kgpu")

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
NEW_SHAPE_DIGESTS: dict[str, str] = {
    "bestfit": "7219464f98477432",
    "fgd": "d86360f9f3fb90af",
    "kgpu": "6f158fa68703119b",
}
MANIFEST_DIGESTS: dict[str, str] = {
    "autoscale/random": "e15be87cc75c454b",
    "autoscale/dotprod": "d00c4496ff71f5f9",
    "autoscale/gpuclustering": "c1f0793795390930",
    "autoscale/gpupacking": "b3945415b24bd697",
    "autoscale/bestfit": "a326bd075bbfc8b8",
    "autoscale/fgd": "1de3163cb4d55537",
    "autoscale/kgpu": "74002c8bb33b762b",
    "manifests/random": "317d7ddb245e0d85",
    "manifests/dotprod": "97a51f13fd1cd1f5",
    "manifests/gpuclustering": "28a9040d4e549dab",
    "manifests/gpupacking": "0e2f9869b458c5dc",
    "manifests/bestfit": "2995876602eed98c",
    "manifests/fgd": "b7ef07640b38e8c7",
    "manifests/kgpu": "a6146b29c545a45a",
    "queues/random": "962d373a9014baf1",
    "queues/dotprod": "e3951e55c8f2f107",
    "queues/gpuclustering": "e817bba6f030f611",
    "queues/gpupacking": "c1f1aabb8052e608",
    "queues/bestfit": "fcda0da3a90c3f6c",
    "queues/fgd": "86fb9283b9f3faf2",
    "queues/kgpu": "08590e1e396c0974",
    "workspaces/random": "61aae6bb1b978291",
    "workspaces/dotprod": "f18465012d86a93e",
    "workspaces/gpuclustering": "9dbadb95773ad817",
    "workspaces/gpupacking": "1082afbd7670c8ad",
    "workspaces/bestfit": "16700ae7cdf84a94",
    "workspaces/fgd": "59fb18692cd886eb",
    "workspaces/kgpu": "6d9e7bd1904e2f64",
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


def bench_module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[f"bench_{name}"] = module
    spec.loader.exec_module(module)
    return module


def new_shape_digest(policy: str) -> str:
    bench = bench_module("core")
    nodes, pods = NEW_SHAPE_SIZE
    rng = np.random.default_rng(5)
    cluster = bench.make_nodes(nodes, rng)
    base = bench.make_pods(pods, rng)
    varied = bench.make_new_shapes(base, rng)
    decided: list[Any] = []
    bench.run(policy, cluster, varied, 5, cache=True, typical=base, decided=decided)
    return digest(
        [(d.node, d.gpus) if isinstance(d, bench.Placement) else d.message for d in decided]
    )


def session_digest(mix: str, policy: str) -> str:
    bench = bench_module("session")
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
    decided = json.loads(out.read_text())
    decided.pop("notes", None)
    return digest(decided)


@pytest.mark.slow
@pytest.mark.parametrize("policy", POLICIES)
def test_openb_replay_decisions_unchanged(openb_dir: Path, policy: str) -> None:
    assert openb_digest(openb_dir, policy) == OPENB_DIGESTS[policy]


@pytest.mark.parametrize("mix", sorted(SESSION_SIZES))
@pytest.mark.parametrize("policy", SESSION_POLICIES)
def test_queue_session_decisions_unchanged(mix: str, policy: str) -> None:
    assert session_digest(mix, policy) == SESSION_DIGESTS[f"{mix}/{policy}"]


@pytest.mark.parametrize("policy", NEW_SHAPE_POLICIES)
def test_new_shape_decisions_unchanged(policy: str) -> None:
    assert new_shape_digest(policy) == NEW_SHAPE_DIGESTS[policy]


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
    print("NEW_SHAPE_DIGESTS = {")
    for policy in NEW_SHAPE_POLICIES:
        print(f'    "{policy}": "{new_shape_digest(policy)}",')
    print("}")
    print("MANIFEST_DIGESTS = {")
    for folder in EXAMPLES:
        for policy in POLICIES:
            print(f'    "{folder}/{policy}": "{manifest_digest(folder, policy, tmp)}",')
    print("}")


if __name__ == "__main__":
    main()
