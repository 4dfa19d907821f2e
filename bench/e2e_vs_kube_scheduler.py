"""kgpu against kube-scheduler v1.20.2, side by side: pods bound a second and CPU a pod.

    .venv/bin/python bench/e2e_vs_kube_scheduler.py [--nodes 1000] [--pods 10000]
        [--schedulers kube-scheduler,kgpu] [--profile] [--keep-server]

For each scheduler in turn, on a fresh server (etcd and kube-apiserver v1.20.2 started by
``../shared/tools/kube-apiserver/start.sh`` under ``--kapi-dir``, ``--port`` and
``--etcd-port``, stopped after): creates ``--nodes`` nodes of 8 GPUs (96 cores, 1 TiB; the
nodes of ``bench/e2e.py``) and ``--pods`` pending pods, half CPU-only, a quarter one whole
GPU, a quarter two (``nvidia.com/gpu`` limits, which both schedulers understand), then
starts the scheduler as a process of its own and times from its start until the bench's
watch (of bound pods only) has seen every pod bound. kube-scheduler is the binary
``../shared/tools/kube-node/build.sh`` puts in /var/cache/kube-extra, with its client's qps
and burst at 5,000 (its default of 50 would be the limit) and leader election off; kgpu is
``kgpu run`` from this interpreter (``python -P``: the compiled build under
.venv-compiled), leader election, the Workspace controller and the webhook off.

Prints, per scheduler, pods bound a second, then the CPU milliseconds a bound pod cost the
scheduler's process (from its start until the last bind, and until it went quiet, its
Scheduled events sent), kube-apiserver and etcd (from /proc); and at the end kgpu's
throughput over kube-scheduler's and kube-scheduler's CPU a pod over kgpu's. The targets
(issue 20): kgpu at least twice kube-scheduler's pods a second, at most 1.0 CPU ms a pod.

``--profile`` runs kgpu in this process instead (its loop as ``kgpu run`` has it: shares
confined through reservation pods) and prints its CPU a pod by thread (read from /proc: the
pod watch's decoding and cache, the sessions, the call thread that carries the binds and the
Scheduled events) and the garbage collector's share of it; ``--cprofile`` adds every thread
under ``cProfile`` timed by its own CPU clock, each thread's time split by what its functions
are (HTTP: libcurl, urllib3, TLS, sockets and kgpu's driving of them; JSON; metrics; the
events' and the binds' own code; the rest of kgpu), the sessions' into snapshot, session
input, deciding and hand-over (the profiler's own cost inflates the total; the shares are
what it is for).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import os
import pstats
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from e2e import NAMESPACES, add_node, cpu_seconds, in_parallel, server_pids

from kgpu import core_build
from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.errors import KubeError
from kgpu.kube.api.resource_types import PODS

HERE = Path(__file__).resolve().parent
TOOLS = HERE.parent.parent / "shared" / "tools"
KUBE_SCHEDULER = Path("/var/cache/kube-extra/kube-scheduler")
APISERVER = Path("/var/cache/kube-apiserver-1.20/bin/kube-apiserver")
KGPU_NAME = "kgpu-bench"
NAMESPACE = "bench"
# Per 4 pods: CPU-only, one GPU, CPU-only, two GPUs: 7,500 of 8,000 GPUs for 10,000 pods.
GPUS = (0, 1, 0, 2)


def pod(i: int, scheduler: str) -> dict[str, Any]:
    gpus = GPUS[i % len(GPUS)]
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    resources = {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": limits}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"p{i:05d}", "namespace": NAMESPACE},
        "spec": {
            "schedulerName": scheduler,
            "containers": [{"name": "main", "image": "example/train:1", "resources": resources}],
        },
    }


class Server:
    """A fresh etcd and kube-apiserver of our own (never the default ports' one)."""

    def __init__(self, opts: argparse.Namespace) -> None:
        self.dir = Path(opts.kapi_dir)
        self.env = {
            **os.environ,
            "KAPI_DIR": str(self.dir),
            "KAPI_PORT": str(opts.port),
            "KAPI_ETCD_PORT": str(opts.etcd_port),
            "KAPI_APISERVER": str(opts.apiserver),
        }
        self.kubeconfig = str(self.dir / "kubeconfig")

    def start(self) -> None:
        script = TOOLS / "kube-apiserver" / "start.sh"
        done = subprocess.run(["bash", str(script)], env=self.env, capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"{script} failed:\n{done.stdout}{done.stderr}")

    def stop(self) -> None:
        script = TOOLS / "kube-apiserver" / "stop.sh"
        subprocess.run(["bash", str(script)], env=self.env, check=False, capture_output=True)

    def pids(self) -> dict[str, int]:
        return server_pids(self.dir)


class BoundCounter:
    """Counts the bench's pods bound, by a watch of bound pods only (a field selector: the
    server sends each pod once, when it gets its node), on a thread of its own."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self.bound: set[str] = set()
        self.first: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="bound-counter")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        selector = "spec.nodeName!="
        while not self._stop.is_set():
            try:
                listed = self.client.list(PODS, namespace=NAMESPACE, field_selector=selector)
                self._saw(o["metadata"]["name"] for o in listed.items)
                watch = self.client.watch(
                    PODS, listed.resource_version, namespace=NAMESPACE, field_selector=selector
                )
                for event in watch:
                    if event.type in ("ADDED", "MODIFIED"):
                        self._saw([event.object["metadata"]["name"]])
                    if self._stop.is_set():
                        watch.close()
            except KubeError as exc:
                if self._stop.is_set():
                    return
                print(f"  bound-pod watch: {exc}; again", flush=True)
                time.sleep(0.5)

    def _saw(self, names: Any) -> None:
        before = len(self.bound)
        self.bound.update(names)
        if self.first is None and len(self.bound) > before:
            self.first = time.perf_counter()


def populate(client: KubeClient, opts: argparse.Namespace, scheduler: str) -> None:
    started = time.perf_counter()

    in_parallel(lambda i: add_node(client, f"node-{i:04d}"), list(range(opts.nodes)))
    client.create(NAMESPACES, {"metadata": {"name": NAMESPACE}})
    in_parallel(lambda i: client.create(PODS, pod(i, scheduler), NAMESPACE), list(range(opts.pods)))
    print(
        f"  {opts.nodes} nodes and {opts.pods} pods created in "
        f"{time.perf_counter() - started:.1f}s",
        flush=True,
    )


def command(which: str, kubeconfig: str) -> list[str]:
    if which == "kube-scheduler":
        return [
            str(KUBE_SCHEDULER),
            f"--kubeconfig={kubeconfig}",
            "--leader-elect=false",
            "--port=0",
            "--secure-port=0",
            "--kube-api-qps=5000",
            "--kube-api-burst=5000",
        ]
    return [
        sys.executable,
        "-P",
        "-m",
        "kgpu.cli",
        "run",
        "--kubeconfig",
        kubeconfig,
        "--scheduler-name",
        KGPU_NAME,
        "--metrics-port",
        "0",
        "--no-leader-elect",
        "--no-workspaces",
        "--no-serve-webhook",
    ]


def wait_bound(
    counter: BoundCounter, pods: int, started: float, pid: int | None = None
) -> tuple[float, float]:
    """Seconds from ``started`` until every pod is bound (or progress stopped for 60 s), and
    the CPU seconds process ``pid`` had used when the first bind was seen (its start-up:
    imports, the first lists, the first snapshot and session)."""
    progress = (0, started)
    at_first = 0.0
    while True:
        bound, now = len(counter.bound), time.perf_counter()
        if pid is not None and bound and not at_first:
            at_first = cpu_seconds(pid)
        if bound >= pods:
            return now - started, at_first
        if bound != progress[0]:
            if int(now - started) // 10 != int(progress[1] - started) // 10:
                print(f"    {now - started:5.0f}s: {bound} bound", flush=True)
            progress = (bound, now)
        elif now - progress[1] > 60:
            print(f"  no progress for 60s: {pods - bound} pods not bound", flush=True)
            return progress[1] - started, at_first
        time.sleep(0.05)


def quiet(pid: int, limit: float = 60.0) -> None:
    """Wait until ``pid`` uses under 2% of a core over half a second (its events sent)."""
    deadline = time.perf_counter() + limit
    last = cpu_seconds(pid)
    while time.perf_counter() < deadline:
        time.sleep(0.5)
        now = cpu_seconds(pid)
        if now - last < 0.01:
            return
        last = now


def run_one(which: str, opts: argparse.Namespace) -> dict[str, float]:
    print(f"\n{which}", flush=True)
    server = Server(opts)
    server.start()
    client = KubeClient.from_kubeconfig(server.kubeconfig, pool_size=32)
    try:
        populate(client, opts, "default-scheduler" if which == "kube-scheduler" else KGPU_NAME)
        counter = BoundCounter(client)
        counter.start()
        pids = server.pids()
        before = {k: cpu_seconds(p) for k, p in pids.items()}
        log = open(Path(opts.kapi_dir) / f"{which}.log", "wb")  # noqa: SIM115
        started = time.perf_counter()
        env = dict(os.environ)
        if which == "kgpu" and opts.kgpu_path:
            env["PYTHONPATH"] = os.pathsep.join([opts.kgpu_path, env.get("PYTHONPATH", "")])
        proc = subprocess.Popen(command(which, server.kubeconfig), stdout=log, stderr=log, env=env)
        try:
            elapsed, at_first = wait_bound(counter, opts.pods, started, proc.pid)
            at_bind = cpu_seconds(proc.pid)
            servers = {k: cpu_seconds(p) - before[k] for k, p in pids.items()}
            quiet(proc.pid)
            at_quiet = cpu_seconds(proc.pid)
            servers_quiet = {k: cpu_seconds(p) - before[k] for k, p in pids.items()}
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()
            counter.stop()
        bound = len(counter.bound)
        first = (counter.first or started) - started
        rate = bound / max(elapsed, 1e-9)
        print(
            f"  {bound} pods bound in {elapsed:.1f}s: {rate:.0f} pods/s "
            f"(first bind {first:.2f}s after the start)"
        )
        print(f"  CPU ms a bound pod ({os.cpu_count()} cores), until the last bind / until quiet:")
        own = 1000 * at_bind / max(bound, 1)
        print(
            f"    {which}: {own:.2f} / {1000 * at_quiet / max(bound, 1):.2f} "
            f"({at_first:.2f} CPU s before the first bind)"
        )
        for name in servers:
            print(
                f"    {name}: {1000 * servers[name] / max(bound, 1):.2f} / "
                f"{1000 * servers_quiet[name] / max(bound, 1):.2f}"
            )
        return {"rate": rate, "cpu_ms": 1000 * at_quiet / max(bound, 1), "bound": bound}
    finally:
        client.close()
        if not opts.keep_server:
            server.stop()


# Threads by what they do, by the start of their names.
THREADS = (
    ("informer-pods", "pod watch: decoding, cache, wake-ups"),
    ("informer", "other watches"),
    ("loop", "sessions"),
    ("kube-calls", "API calls: binds (read, Binding), events"),
    ("binder", "pool: DRA claims, evictions, status"),
)
# What a function's own time is, by its file.
LAYERS = (
    (
        "HTTP",  # libcurl, urllib3, TLS, sockets, and kgpu's own driving of them
        (
            "urllib3",
            "http/client",
            "email/",
            "ssl",
            "socket",
            "selectors",
            "pycurl",
            "select.",
            "curl_pump.py",
            "curl_calls.py",
            "kube/api/client.py",
        ),
    ),
    ("JSON", ("json/", "'dumps'", "'loads'", "orjson", "json_codec.py")),
    ("metrics", ("prometheus_client",)),
    ("events", ("event_recorder.py", "printable.py", "strftime")),
    ("binds", ("binder.py", "handover.py", "in_flight.py", "record_signature", "hmac.py")),
    ("kgpu", ("/kgpu/", "kgpu.")),
)
# The session's steps, by the functions that do them (cumulative time in the loop thread):
# (step, file, function, or what cProfile calls it where the module is compiled).
STEPS = (
    ("snapshot", "cache_snapshot.py", "build", "'build' of 'SnapshotBuilder'"),
    ("session input", "session_input.py", "assemble", "session_input.assemble"),
    ("deciding", "session_runner.py", "run_session", "session_runner.run_session"),
    ("hand-over", "carry_out.py", "carry_out", "'carry_out' of 'ResultCarrier'"),
)


def profile_kgpu(opts: argparse.Namespace) -> None:
    """kgpu in this process, every thread profiled by its own CPU clock."""
    from kgpu.kube.install.workstation import ensure_namespace
    from kgpu.kube.live.loop import LoopConfig
    from kgpu.kube.live.scheduler_process import RunningScheduler, RunOptions
    from kgpu.kube.objects.reservation_pod import ReservationConfig

    print("\nkgpu, profiled in this process", flush=True)
    server = Server(opts)
    server.start()
    client = KubeClient.from_kubeconfig(server.kubeconfig, pool_size=32)
    profiles: list[tuple[str, cProfile.Profile]] = []
    threads: list[tuple[str, int]] = []  # every thread kgpu starts, by name and Linux id

    def per_thread(*_: Any) -> None:
        threads.append((threading.current_thread().name, threading.get_native_id()))
        if opts.cprofile:
            profile = cProfile.Profile(time.thread_time)
            profiles.append((threading.current_thread().name, profile))
            profile.enable()  # replaces this hook on this thread
        else:
            sys.setprofile(None)

    counter = BoundCounter(client)
    collections = GcClock()
    try:
        populate(client, opts, KGPU_NAME)
        counter.start()
        options = RunOptions(
            kubeconfig=server.kubeconfig,
            scheduler_name=KGPU_NAME,
            metrics_port=None,
            leader_elect=False,
            workspaces=None,
            # As `kgpu run` has it: shares confined through reservation pods.
            loop=LoopConfig(scheduler_name=KGPU_NAME, reservations=ReservationConfig()),
            make_namespace=ensure_namespace,  # the record key's, as `kgpu run` makes it
        )
        threading.setprofile(per_thread)
        main = cProfile.Profile(time.thread_time)
        profiles.append(("main", main))
        cpu = time.process_time()
        own = time.thread_time()
        started = time.perf_counter()
        if opts.cprofile:
            main.enable()
        gc.callbacks.append(collections.callback)
        running = RunningScheduler(options).start()
        elapsed, _ = wait_bound(counter, opts.pods, started)
        recorder = running.recorder
        while recorder.queued and time.perf_counter() - started < elapsed + 300:
            time.sleep(0.2)  # the last Scheduled events
        time.sleep(0.5)  # the last few in the workers' hands
        main.disable()
        threading.setprofile(None)
        gc.callbacks.remove(collections.callback)
        used = time.process_time() - cpu
        by_thread = [(name, thread_cpu(tid)) for name, tid in threads]
        by_thread.append(("main", time.thread_time() - own))
        running.stop()
        counter.stop()
        bound = len(counter.bound)
        print(f"  {bound} pods in {elapsed:.1f}s, {1000 * used / max(bound, 1):.2f} CPU ms a pod")
        loop = running.loop
        print(
            f"  {loop.sessions} sessions: {loop.snapshot_s:.1f}s building snapshots, "
            f"{loop.decide_s:.1f}s deciding (wall)"
        )
        print("  CPU ms a pod by thread (from /proc):")
        grouped: dict[str, float] = {}
        for name, seconds in by_thread:
            group = next((what for start, what in THREADS if name.startswith(start)), "other")
            grouped[group] = grouped.get(group, 0.0) + seconds
        for group, seconds in sorted(grouped.items(), key=lambda kv: -kv[1]):
            print(f"    {group:<38} {1000 * seconds / max(bound, 1):6.3f}")
        print(f"  of which garbage collection (all threads): {collections.summary(bound)}")
        if opts.cprofile:
            report_profile(profiles, bound)
    finally:
        counter.stop()
        client.close()
        if not opts.keep_server:
            server.stop()


class GcClock:
    """CPU the cyclic garbage collector takes, in whichever thread's allocation set it off
    (its own CPU clock: the collector holds the GIL, so no other thread runs meanwhile)."""

    def __init__(self) -> None:
        self.seconds = [0.0, 0.0, 0.0]
        self.runs = [0, 0, 0]
        self._started = 0.0

    def callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.thread_time()
        else:
            self.seconds[info["generation"]] += time.thread_time() - self._started
            self.runs[info["generation"]] += 1

    def summary(self, bound: int) -> str:
        ms = 1000 / max(bound, 1)
        by = ", ".join(
            f"generation {g}: {self.runs[g]} runs, {self.seconds[g] * ms:.3f}" for g in range(3)
        )
        return f"{sum(self.seconds) * ms:.3f} ms a pod ({by})"


def thread_cpu(tid: int) -> float:
    """User plus system CPU seconds of one thread of this process, from /proc."""
    return cpu_seconds(tid, f"/proc/self/task/{tid}/stat")


def report_profile(profiles: list[tuple[str, cProfile.Profile]], bound: int) -> None:
    """CPU a pod by thread, each split by layer; the loop's by session step."""
    groups: dict[str, pstats.Stats] = {}
    for thread, profile in profiles:
        if not profile.getstats():
            continue
        group = next((what for start, what in THREADS if thread.startswith(start)), "other")
        if group in groups:
            groups[group].add(profile)
        else:
            groups[group] = pstats.Stats(profile)
    ms = 1000 / max(bound, 1)
    whole = sum(g.total_tt for g in groups.values())  # type: ignore[attr-defined]
    print(f"  profiled CPU: {whole * ms:.2f} ms a pod (the profiler's own cost included)")
    for group, stats in sorted(groups.items(), key=lambda kv: -kv[1].total_tt):  # type: ignore[attr-defined]
        raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
        layers: dict[str, float] = {}
        for func, (_cc, _nc, tt, _ct, _callers) in raw.items():
            where = f"{func[0]}:'{func[2]}'"
            layer = next((n for n, marks in LAYERS if any(m in where for m in marks)), "other")
            layers[layer] = layers.get(layer, 0.0) + tt
        total = stats.total_tt  # type: ignore[attr-defined]
        split = ", ".join(
            f"{n} {t * ms:.3f}" for n, t in sorted(layers.items(), key=lambda kv: -kv[1])
        )
        print(f"    {group:<38} {total * ms:6.3f} ms a pod ({100 * total / whole:4.1f}%): {split}")
        if group == "sessions":
            for step, path, name, compiled in STEPS:
                spent = sum(
                    v[3]
                    for f, v in raw.items()
                    if (f[0].endswith(path) and f[2] == name) or compiled in f[2]
                )
                print(f"      {step:<36} {spent * ms:6.3f} ms a pod")
    if os.environ.get("BENCH_PROFILE_TOP"):
        for group, stats in groups.items():
            print(f"\n  {group}: the functions that used most CPU (self time)")
            stats.sort_stats("tottime").print_stats(int(os.environ["BENCH_PROFILE_TOP"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--schedulers", default="kube-scheduler,kgpu")
    parser.add_argument("--kapi-dir", default="/tmp/kapi-vs")
    parser.add_argument("--port", type=int, default=6543)
    parser.add_argument("--etcd-port", type=int, default=2479)
    parser.add_argument("--apiserver", default=str(APISERVER))
    parser.add_argument(
        "--profile", action="store_true", help="kgpu in this process: its CPU by thread"
    )
    parser.add_argument(
        "--cprofile", action="store_true", help="with --profile: each thread under cProfile"
    )
    parser.add_argument(
        "--kgpu-path",
        default="",
        help="put this first on the kgpu process's PYTHONPATH: time another tree's kgpu "
        "(`git archive COMMIT kgpu | tar -x -C DIR`)",
    )
    parser.add_argument("--keep-server", action="store_true", help="leave the last server up")
    opts = parser.parse_args()
    print(f"kgpu scheduling core: {core_build()}")
    if opts.profile:
        profile_kgpu(opts)
        return
    results = {which: run_one(which, opts) for which in opts.schedulers.split(",") if which}
    if len(results) == 2:
        kube, kgpu = results["kube-scheduler"], results["kgpu"]
        print(
            f"\nkgpu / kube-scheduler: {kgpu['rate'] / kube['rate']:.2f}x the pods a second "
            f"(target 2x), {kube['cpu_ms'] / kgpu['cpu_ms']:.2f}x less CPU a pod; "
            f"kgpu {kgpu['cpu_ms']:.2f} CPU ms a pod (target 1.0)"
        )


if __name__ == "__main__":
    main()
