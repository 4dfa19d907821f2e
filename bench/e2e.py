"""Pods bound per second by kgpu's live scheduler against a real kube-apiserver.

    bash ../shared/tools/kube-apiserver/start.sh        # once: etcd + kube-apiserver on loopback
    .venv/bin/python bench/e2e.py [--kubeconfig PATH] [--nodes 1000] [--pods 10000]
                                  [--workers 16] [--batch 1000]

Creates ``--nodes`` GPU nodes (8 A100 each, GPU Feature Discovery labels, Ready) and
``--pods`` pending GPU pods in a fresh namespace (three in four shares of one GPU by the
``gpu-fraction`` annotation, the others one or two whole GPUs; 0.66 GPU each on average),
then starts the scheduler that ``kgpu run`` starts, in this process with its default
settings (but ``--workers``, the binds in flight at once, and ``--batch``, the pods
decided per session), and times from its start until every pod is bound, as its own
watch of the API server reports. Each pod costs the API server two writes: the Binding,
which carries the device annotations, and the Scheduled event; on a server that ignores
a Binding's preconditions (v1.20) also a read of the pod just before its Binding (see
``kgpu.kube.live.binder``).

Prints the pods bound per second, then where the time went: the scheduler's own work
(snapshot and decisions per session, and the pods it decides per second of that), the
mean latency of each API call a bind makes, the API writes per second against a plain
write rate (measured first, with pod patches and nothing else running), and the CPU seconds
used meanwhile by this process, kube-apiserver and etcd (read from /proc, with the pids
start.sh records). ``bench/apiserver_ceiling.py`` measures the server's own ceiling for
these calls. Everything is deleted at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kgpu import core_build
from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.errors import KubeError
from kgpu.kube.api.resource_types import NODES, PODS, Resource
from kgpu.kube.install.workstation import ensure_namespace
from kgpu.kube.live.loop import LoopConfig
from kgpu.kube.live.scheduler_process import RunningScheduler, RunOptions

KAPI_DIR = Path(os.environ.get("KAPI_DIR", "/var/cache/kube-apiserver-1.20"))
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
SCHEDULER = "kgpu-bench"
TICKS = os.sysconf("SC_CLK_TCK")


def node(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    alloc = {"cpu": "96", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": "8"}
    labels = {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.memory": "81920",
    }
    obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
    status = {
        "capacity": alloc,
        "allocatable": alloc,
        "conditions": [{"type": "Ready", "status": "True"}],
    }
    return obj, status


def add_node(client: KubeClient, name: str) -> None:
    """Create ``node(name)``, Ready and without the not-ready taint."""
    obj, status = node(name)
    client.create(NODES, obj)
    client.patch(NODES, name, {"status": status}, subresource="status")
    client.patch(NODES, name, {"spec": {"taints": None}})  # no node controller lifts it


# Per 8 pods: shares of 0.25, 0.25, 0.25, 0.5, 0.5, 0.5 and one and two whole GPUs:
# 5.25 GPUs, so 10,000 pods ask for 6,562 of 1,000 nodes' 8,000 GPUs (82%).
MIX = ("0.25", "0.5", "0.25", "0.5", 1, "0.5", 2, "0.25")


def pod(name: str, namespace: str, i: int) -> dict[str, Any]:
    want = MIX[i % len(MIX)]
    annotations = {"gpu-fraction": want} if isinstance(want, str) else {}
    limits = {"nvidia.com/gpu": str(want)} if isinstance(want, int) else {}
    resources = {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": limits}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
        "spec": {
            "schedulerName": SCHEDULER,
            "containers": [{"name": "main", "image": "example/infer:1", "resources": resources}],
        },
    }


def cpu_seconds(pid: int, stat: str = "") -> float:
    """User plus system CPU time of a process, from /proc/PID/stat (or ``stat``)."""
    try:
        fields = Path(stat or f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / TICKS


def server_pids(kapi_dir: Path = KAPI_DIR) -> dict[str, int]:
    """The pids of kube-apiserver and etcd that start.sh recorded under ``kapi_dir``."""
    pids = {}
    for name in ("kube-apiserver", "etcd"):
        path = kapi_dir / "run" / f"{name}.pid"
        if path.exists():
            pids[name] = int(path.read_text().strip())
    return pids


def in_parallel(call: Any, items: list[Any], workers: int = 16) -> None:
    with ThreadPoolExecutor(workers) as pool:
        for _ in pool.map(call, items):
            pass


def write_ceiling(client: KubeClient, namespace: str, count: int, workers: int) -> float:
    """Writes per second the API server takes with nothing else going on: merge patches of
    an annotation on the bench's own pods, ``workers`` at once (before scheduling starts)."""

    def touch(i: int) -> None:
        patch = {"metadata": {"annotations": {"bench/touched": "yes"}}}
        client.patch(PODS, f"p{i:05d}", patch, namespace)

    started = time.perf_counter()
    in_parallel(touch, list(range(count)), workers)
    return count / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", default=str(KAPI_DIR / "kubeconfig"))
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument(
        "--workers", type=int, default=LoopConfig().bind_workers, help="binds in flight at once"
    )
    parser.add_argument(
        "--batch", type=int, default=LoopConfig().batch_size, help="pods decided per session"
    )
    parser.add_argument(
        "--event-workers",
        type=int,
        default=RunOptions().event_workers,
        help="threads sending Scheduled events",
    )
    opts = parser.parse_args()
    print(f"kgpu scheduling core: {core_build()}")
    client = KubeClient.from_kubeconfig(opts.kubeconfig, pool_size=32)
    tag = uuid.uuid4().hex[:6]
    namespace = f"bench-{tag}"
    names = [f"bench-{tag}-{i:04d}" for i in range(opts.nodes)]
    client.create(NAMESPACES, {"metadata": {"name": namespace}})
    try:
        measure(client, opts, namespace, names, tag)
    finally:
        started = time.perf_counter()
        clean_up(client, namespace, names)
        print(f"\ncleaned up in {time.perf_counter() - started:.1f}s")
        client.close()


def delete_pods(client: KubeClient, namespace: str) -> None:
    """Delete every pod of ``namespace`` (grace period 0: no kubelet will confirm).
    Deleting 10,000 pods outlasts one request's time limit on the server, which goes on
    deleting: ask again until none are left."""
    for _ in range(20):
        try:
            if not client.list(PODS, namespace=namespace).items:
                break
            query = [("gracePeriodSeconds", "0")]
            client.request("DELETE", PODS.path(namespace), query=query, timeout=120)
        except KubeError as exc:
            print(f"  deleting pods: {exc}")


def clean_up(client: KubeClient, namespace: str, names: list[str]) -> None:
    """Delete the bench's pods, nodes and namespace."""
    delete_pods(client, namespace)

    def delete_node(name: str) -> None:
        with contextlib.suppress(KubeError):
            client.delete(NODES, name)

    in_parallel(delete_node, names)
    with contextlib.suppress(KubeError):
        client.delete(NAMESPACES, namespace)


def watched_bound(running: RunningScheduler, namespace: str) -> int:
    """The bench's pods that the scheduler's own watch shows bound."""
    return sum(
        1
        for p in running.pods.items()
        if p["metadata"].get("namespace") == namespace and p["spec"].get("nodeName")
    )


def measure(
    client: KubeClient, opts: argparse.Namespace, namespace: str, names: list[str], tag: str
) -> None:
    started = time.perf_counter()

    in_parallel(lambda name: add_node(client, name), names)
    print(f"{opts.nodes} nodes created in {time.perf_counter() - started:.1f}s", flush=True)
    started = time.perf_counter()
    in_parallel(
        lambda i: client.create(PODS, pod(f"p{i:05d}", namespace, i), namespace),
        list(range(opts.pods)),
    )
    print(f"{opts.pods} pods created in {time.perf_counter() - started:.1f}s", flush=True)
    ceiling = write_ceiling(client, namespace, min(opts.pods, 2000), opts.workers + 2)
    print(f"API server, plain pod patches {opts.workers + 2} at once: {ceiling:.0f} writes/s")

    pids = server_pids()
    cpu_before = {k: cpu_seconds(p) for k, p in pids.items()}
    own_before = time.process_time()
    options = RunOptions(
        kubeconfig=opts.kubeconfig,
        scheduler_name=SCHEDULER,
        metrics_port=None,
        lease_name=f"kgpu-bench-{tag}",
        loop=LoopConfig(scheduler_name=SCHEDULER, bind_workers=opts.workers, batch_size=opts.batch),
        event_workers=opts.event_workers,
        make_namespace=ensure_namespace,  # the record key's, where nothing made it
    )
    running = RunningScheduler(options)
    started = time.perf_counter()
    running.start()
    first_bound = None
    progress = (0, started)  # (pods bound, when that count was first seen)
    try:
        while True:
            # Scanning the watch's cache costs this process about 0.1 CPU ms a pod over a
            # run, which would count as the scheduler's: follow the binds' count, and scan
            # only once they have bound every pod, until the watch shows it too.
            bound = running.loop.bound
            if bound >= opts.pods:
                bound = watched_bound(running, namespace)
            now = time.perf_counter()
            if bound and first_bound is None:
                first_bound = now - started
            if bound >= opts.pods:
                break
            if bound != progress[0]:
                if int(now - started) // 10 != int(progress[1] - started) // 10:
                    print(f"  {now - started:5.0f}s: {bound} bound", flush=True)
                progress = (bound, now)
            elif now - progress[1] > 60:
                bound = watched_bound(running, namespace)
                print(f"no progress for 60s: {opts.pods - bound} pods not bound", flush=True)
                break
            time.sleep(0.2)
        elapsed = progress[1] - started if bound < opts.pods else time.perf_counter() - started
        own = time.process_time() - own_before
        cpu = {k: cpu_seconds(p) - cpu_before[k] for k, p in pids.items()}
        registry = running.metrics.registry
        loop = running.loop
        recorder = running.recorder
        events_sent, events_queued = recorder.sent, recorder.queued
        # Events are sent behind the binds (scheduling never waits on them): the work is
        # only all done once the last pod's Scheduled event is.
        while recorder.queued and time.perf_counter() - started < elapsed + 600:
            time.sleep(0.2)
        time.sleep(0.5)  # the last few in the workers' hands
        drained = time.perf_counter() - started
        own_all = time.process_time() - own_before
        cpu_all = {k: cpu_seconds(p) - cpu_before[k] for k, p in pids.items()}
    finally:
        running.stop()

    def sample(name: str, **labels: str) -> float:
        return registry.get_sample_value(name, labels) or 0.0

    print(
        f"\n{bound} pods on {opts.nodes} nodes bound in {elapsed:.1f}s: {bound / elapsed:.0f} "
        f"pods/s (first bind {first_bound or 0:.2f}s after the scheduler started)"
    )
    print("\nwhere the time goes")
    print(
        f"  scheduler: {loop.sessions} sessions, {loop.snapshot_s:.1f}s building snapshots, "
        f"{loop.decide_s:.1f}s deciding"
    )
    session_s = loop.snapshot_s + loop.decide_s
    print(
        f"  scheduler alone: {bound / max(session_s, 1e-9):.0f} pods decided per second of "
        "session time (wall time, sharing the GIL with the calls, informers and events)"
    )
    for step, what in (("check", "GET pod before its Binding"), ("bind", "Binding")):
        count = sample("kgpu_binding_duration_seconds_count", step=step)
        total = sample("kgpu_binding_duration_seconds_sum", step=step)
        mean = 1000 * total / max(count, 1)
        print(f"  {what:<27} API calls: {count:.0f}, mean {mean:.1f} ms")
    workers = (options.loop or LoopConfig()).bind_workers
    print(f"  binds in flight at once: {workers}; events: {options.event_workers}")
    print(
        f"  Scheduled events sent by the time the last pod was bound: {events_sent}, "
        f"{events_queued} still queued; all sent {drained - elapsed:.1f}s later "
        f"({recorder.sent} sent, {recorder.failed} failed, {recorder.dropped} dropped)"
    )
    writes = (bound + events_sent) / elapsed
    print(
        f"  API writes until the last bind (Bindings with annotations, Scheduled events): "
        f"{writes:.0f}/s, {100 * writes / ceiling:.0f}% of the plain patch rate measured above"
    )
    print(
        f"  CPU seconds ({os.cpu_count()} cores), until the last bind ({elapsed:.1f}s) / "
        f"until the last event ({drained:.1f}s), and a pod's share of the latter:"
    )
    rows = [("this process (scheduler, informers, binds, events)", own, own_all)]
    rows += [(name, cpu[name], cpu_all[name]) for name in cpu]
    for name, seconds, total in rows:
        print(
            f"    {name}: {seconds:.1f} / {total:.1f}, {1000 * total / max(bound, 1):.2f} ms a pod"
        )
    print(
        f"\n{bound} pods bound and their Scheduled events sent in {drained:.1f}s: "
        f"{bound / drained:.0f} pods/s"
    )


if __name__ == "__main__":
    main()
