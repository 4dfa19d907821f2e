"""The API server's own ceiling for kgpu's binds: pods per second with no scheduler at all.

    bash ../shared/tools/kube-apiserver/start.sh        # once: etcd + kube-apiserver on loopback
    .venv/bin/python bench/apiserver_ceiling.py [--kubeconfig PATH] [--pods 3000]
        [--procs 4] [--threads 8] [--protocols binding,read+binding,patch+binding]

For each protocol, creates ``--pods`` pending pods (the same pods as ``bench/e2e.py``'s, not
timed), then binds them all from ``--procs`` processes of ``--threads`` threads each, and
prints pods bound per second. A pod's bind is exactly the calls kgpu makes for it, with
nothing decided: the Binding (with the two device annotations kgpu writes) and the
Scheduled event, preceded by

- ``binding``: nothing (servers that check a Binding's uid and resourceVersion, v1.23+);
- ``read+binding``: a GET of the pod (what kgpu does on v1.20, which does not check them);
- ``patch+binding``: the annotation patch with uid and resourceVersion preconditions that
  kgpu sent before its Binding carried the annotations (3 writes a pod).

Processes, not only threads, so that the client's Python (one GIL per process) is not what
is measured; the client is plain ``http.client`` over TLS with bodies serialised before the
clock starts, the leanest client there is in Python, so that its CPU takes as little as
possible from the server's on a machine with few cores. Also printed: the mean latency of
each call and the CPU seconds kube-apiserver, etcd and the clients used meanwhile (from
/proc, with the pids start.sh records). Everything is deleted at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import multiprocessing
import os
import ssl
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from e2e import KAPI_DIR, NAMESPACES, cpu_seconds, delete_pods, in_parallel, pod, server_pids

from kgpu.kube.api.client import KubeClient, load_configuration
from kgpu.kube.api.errors import KubeError
from kgpu.kube.api.resource_types import PODS

PROTOCOLS = ("binding", "read+binding", "patch+binding")
# What kgpu writes for a pod sharing GPU 3 of a node, as render_allocation renders it.
ALLOCATION = json.dumps(
    {
        "gpu": [
            {
                "minor": 3,
                "uuid": "GPU-3b0c5a2e-7d51-4f0e-9a1c-2f6d8e4b7c13",
                "resources": {
                    "kubernetes.io/gpu-core": 25,
                    "kubernetes.io/gpu-memory-ratio": 25,
                    "kubernetes.io/gpu-memory": "20480Mi",
                    "kgpu.io/gpu-milli": 250,
                },
            }
        ]
    },
    separators=(",", ":"),
)


@dataclass(frozen=True, slots=True)
class Target:
    """Where and how to connect, in a form a child process can take."""

    host: str
    port: int
    ca_file: str | None
    cert_file: str | None
    key_file: str | None
    headers: tuple[tuple[str, str], ...]

    @classmethod
    def from_kubeconfig(cls, path: str) -> Target:
        config = load_configuration(path)
        url = urlsplit(config.host)
        headers = [("Accept", "application/json")]
        token = (config.api_key or {}).get("authorization") or (config.api_key or {}).get(
            "BearerToken"
        )
        if token:
            headers.append(("Authorization", token))
        return cls(
            url.hostname or "127.0.0.1",
            url.port or 443,
            config.ssl_ca_cert,
            config.cert_file,
            config.key_file,
            tuple(headers),
        )

    def connect(self) -> http.client.HTTPSConnection:
        context = ssl.create_default_context(cafile=self.ca_file)
        if self.cert_file:
            context.load_cert_chain(self.cert_file, self.key_file)
        return http.client.HTTPSConnection(self.host, self.port, context=context, timeout=60)


@dataclass(frozen=True, slots=True)
class Calls:
    """One pod's calls, serialised: (method, path, body or None)."""

    steps: tuple[tuple[str, str, bytes | None], ...]


def calls_for(protocol: str, namespace: str, obj: dict[str, Any], node: str) -> Calls:
    name, pod_uid = obj["metadata"]["name"], obj["metadata"]["uid"]
    version = obj["metadata"]["resourceVersion"]
    path = f"/api/v1/namespaces/{namespace}/pods/{name}"
    notes = {"kgpu.io/device-allocation": ALLOCATION, "kgpu.io/visible-devices": "3"}
    steps: list[tuple[str, str, bytes | None]] = []
    binding_meta: dict[str, Any] = {"name": name, "uid": pod_uid, "resourceVersion": version}
    if protocol == "read+binding":
        steps.append(("GET", path, None))
    if protocol == "patch+binding":
        patch = {"metadata": {"uid": pod_uid, "resourceVersion": version, "annotations": notes}}
        steps.append(("PATCH", path, json.dumps(patch).encode()))
        binding_meta = {"name": name, "uid": pod_uid}
    else:
        binding_meta["annotations"] = notes
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": binding_meta,
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    steps.append(("POST", f"{path}/binding", json.dumps(binding).encode()))
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.{time.time_ns():x}", "namespace": namespace},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": name,
            "namespace": namespace,
            "uid": pod_uid,
        },
        "reason": "Scheduled",
        "message": f"Successfully assigned {namespace}/{name} to {node} (GPU 3)",
        "type": "Normal",
        "source": {"component": "kgpu-scheduler"},
        "reportingComponent": "kgpu-scheduler",
        "reportingInstance": "ceiling",
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
    steps.append(("POST", f"/api/v1/namespaces/{namespace}/events", json.dumps(event).encode()))
    return Calls(tuple(steps))


def worker(
    target: Target, work: list[Calls], threads: int, start_at: float
) -> tuple[int, list[float], list[int], list[int], float]:
    """Run in a child process: every pod's calls, ``threads`` pods at once, from
    ``start_at`` (a shared wall clock, so all processes start together). Answers the pods
    done, then per step the seconds spent, the calls and the failures, and its CPU seconds."""
    steps = len(work[0].steps) if work else 0
    spent = [0.0] * steps
    failed = [0] * steps
    calls_made = [0] * steps
    connections: dict[int, http.client.HTTPSConnection] = {}
    lock = threading.Lock()

    def one(calls: Calls) -> None:
        me = threading.get_ident()
        conn = connections.get(me)
        if conn is None:
            conn = connections[me] = target.connect()
        for i, (method, path, body) in enumerate(calls.steps):
            began = time.perf_counter()
            kind = "application/merge-patch+json" if method == "PATCH" else "application/json"
            headers = {**dict(target.headers), "Content-Type": kind}
            conn.request(method, path, body=body, headers=headers)
            answer = conn.getresponse()
            answer.read()
            took = time.perf_counter() - began
            with lock:
                spent[i] += took
                calls_made[i] += 1
                failed[i] += answer.status >= 300
            if answer.status >= 300:
                return

    time.sleep(max(0.0, start_at - time.time()))
    cpu = time.process_time()
    with ThreadPoolExecutor(threads) as pool:
        for _ in pool.map(one, work):
            pass
    for conn in connections.values():
        conn.close()
    return len(work) - sum(failed), spent, calls_made, failed, time.process_time() - cpu


def measure(
    client: KubeClient, target: Target, opts: argparse.Namespace, protocol: str, tag: str
) -> None:
    namespace = f"ceiling-{tag}-{protocol.replace('+', '-')}"
    client.create(NAMESPACES, {"metadata": {"name": namespace}})
    try:
        made: list[dict[str, Any]] = []

        def create(i: int) -> None:
            made.append(client.create(PODS, pod(f"p{i:05d}", namespace, i), namespace))

        in_parallel(create, list(range(opts.pods)))
        made.sort(key=lambda o: str(o["metadata"]["name"]))
        work = [
            calls_for(protocol, namespace, o, f"node-{i % 1000:04d}") for i, o in enumerate(made)
        ]
        shares = [work[i :: opts.procs] for i in range(opts.procs)]
        pids = server_pids()
        before = {k: cpu_seconds(p) for k, p in pids.items()}
        start_at = time.time() + 1.0  # every process is up and connected by then
        context = multiprocessing.get_context("fork")
        with context.Pool(opts.procs) as pool:
            results = pool.starmap(
                worker, [(target, share, opts.threads, start_at) for share in shares]
            )
        elapsed = time.time() - start_at
        used = {k: cpu_seconds(p) - before[k] for k, p in pids.items()}
        done = sum(r[0] for r in results)
        labels = _labels(protocol)
        spent = [sum(r[1][i] for r in results) for i in range(len(labels))]
        calls = [sum(r[2][i] for r in results) for i in range(len(labels))]
        failed = [sum(r[3][i] for r in results) for i in range(len(labels))]
        clients = sum(r[4] for r in results)
        writes = len(labels) - (1 if protocol == "read+binding" else 0)
        print(
            f"\n{protocol}: {done} pods in {elapsed:.1f}s: {done / elapsed:.0f} pods/s "
            f"({writes} writes a pod: {writes * done / elapsed:.0f} writes/s; "
            f"{opts.procs} processes x {opts.threads} threads in flight)"
        )
        for label, seconds, n, bad in zip(labels, spent, calls, failed, strict=True):
            print(f"  {label:<10} mean {1000 * seconds / max(n, 1):6.1f} ms, {bad} failed")
        cpu = ", ".join(f"{k} {v:.1f}" for k, v in used.items())
        print(
            f"  CPU seconds ({os.cpu_count()} cores, {elapsed:.1f}s wall): {cpu}, clients {clients:.1f}"
        )
    finally:
        clean_up(client, namespace)


def _labels(protocol: str) -> list[str]:
    first = {"read+binding": ["GET pod"], "patch+binding": ["PATCH pod"]}.get(protocol, [])
    return [*first, "Binding", "Event"]


def clean_up(client: KubeClient, namespace: str) -> None:
    delete_pods(client, namespace)
    with contextlib.suppress(KubeError):
        client.delete(NAMESPACES, namespace)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", default=str(KAPI_DIR / "kubeconfig"))
    parser.add_argument("--pods", type=int, default=3000)
    parser.add_argument("--procs", type=int, default=4)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--protocols", default=",".join(PROTOCOLS))
    opts = parser.parse_args()
    protocols = [p for p in opts.protocols.split(",") if p]
    for protocol in protocols:
        if protocol not in PROTOCOLS:
            parser.error(f"--protocols: {protocol!r} is not one of {', '.join(PROTOCOLS)}")
    client = KubeClient.from_kubeconfig(opts.kubeconfig, pool_size=32)
    target = Target.from_kubeconfig(opts.kubeconfig)
    tag = uuid.uuid4().hex[:6]
    try:
        for protocol in protocols:
            measure(client, target, opts, protocol, tag)
    finally:
        client.close()


if __name__ == "__main__":
    main()
