"""What kgpu's HTTP endpoints and its printed text give away, or let a client hold (issue:
100 half-sent requests held 100 threads; losing leadership was not logged; control
characters from objects were printed raw)."""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from kgpu.kube.admission.webhook_server import WebhookServer, tls_context
from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.event_recorder import event_body
from kgpu.kube.api.leader_election import LeaderElector, LeaseTiming
from kgpu.kube.api.printable import EscapingFormatter, printable
from kgpu.kube.explain.explanation import explain_unreadable
from kgpu.kube.install.webhook_certs import generate_tls
from kgpu.kube.live.health_server import HealthServer
from tests.kube_double import KubeDouble
from tests.kube_objects import wait_until

HALF_SENT = b"GET /healthz HTTP/1.1\r\nHost: kgpu\r\nX-Slow: "  # no end of headers, ever


@contextlib.contextmanager
def health(deadline: float = 15.0, max_connections: int = 64) -> Iterator[HealthServer]:
    server = HealthServer(
        lambda: b"m 1\n", list, port=0, deadline=deadline, max_connections=max_connections
    ).start()
    try:
        yield server
    finally:
        server.stop()


def half_sent(port: int) -> socket.socket:
    conn = socket.create_connection(("127.0.0.1", port), timeout=10)
    conn.sendall(HALF_SENT)
    return conn


def answer(port: int, path: str = "/healthz") -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(f"GET {path} HTTP/1.0\r\n\r\n".encode())
        return read_all(conn)


def read_all(conn: socket.socket) -> bytes:
    out = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := conn.recv(4096):
            out += chunk
    return out


def test_a_half_sent_request_is_cut_off_unanswered() -> None:
    with health(deadline=0.5) as server:
        conn = half_sent(server.port)
        # The server shuts the connection once its deadline has passed: no answer, and
        # no thread left waiting for the rest of the headers.
        assert read_all(conn) == b""
        conn.close()
        assert answer(server.port).startswith(b"HTTP/1.0 200 OK")


def test_a_hundred_half_sent_requests_hold_a_bounded_number_of_threads() -> None:
    before = threading.active_count()
    with health(deadline=2.0, max_connections=8) as server:
        held = [half_sent(server.port) for _ in range(100)]
        # Each served connection has a thread and a timer: at most 2 x 8, not 100.
        assert threading.active_count() - before <= 2 * 8 + 1
        # Beyond the eight, connections were closed at once, unanswered.
        assert sum(read_all(c) == b"" for c in held[8:]) == 92
        for conn in held:
            conn.close()
        wait_until(lambda: answer(server.port).startswith(b"HTTP/1.0 200 OK"), timeout=10)


def test_the_webhook_cuts_off_a_client_stalled_in_the_handshake_or_the_request(
    tmp_path: Path,
) -> None:
    tls = generate_tls(["localhost"], ["127.0.0.1"])
    (tmp_path / "tls.crt").write_bytes(tls.cert_pem)
    (tmp_path / "tls.key").write_bytes(tls.key_pem)
    context = tls_context(tmp_path / "tls.crt", tmp_path / "tls.key")
    webhook = WebhookServer(("127.0.0.1", 0), context, "kgpu-scheduler", deadline=0.5)
    thread = webhook.start_background()
    trusting = ssl.create_default_context(cadata=tls.ca_pem.decode())
    try:
        stalled = socket.create_connection(("127.0.0.1", webhook.port), timeout=10)
        stalled.sendall(b"\x16\x03\x01")  # the first bytes of a ClientHello, and no more
        assert read_all(stalled) == b""
        stalled.close()
        raw = socket.create_connection(("127.0.0.1", webhook.port), timeout=10)
        with trusting.wrap_socket(raw, server_hostname="localhost") as conn:
            conn.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
            with contextlib.suppress(ssl.SSLError):  # a shut socket, not a TLS close
                assert conn.recv(4096) == b""
        raw = socket.create_connection(("127.0.0.1", webhook.port), timeout=10)
        with trusting.wrap_socket(raw, server_hostname="localhost") as conn:
            conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert conn.recv(4096).startswith(b"HTTP/1.1 200 OK")
    finally:
        webhook.shutdown()
        webhook.server_close()
        thread.join(timeout=5)


def test_servers_listen_on_loopback_unless_told() -> None:
    with health() as server:
        assert server._server.server_address[0] == "127.0.0.1"


# ---------------------------------------------------------------------------- leadership


def test_gaining_and_losing_leadership_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kgpu.kube.api.leader_election")
    timing = LeaseTiming(lease_duration=1.5, renew_deadline=1.0, retry_period=0.1)
    with KubeDouble() as double:
        client = KubeClient.from_kubeconfig(double.kubeconfig(tmp_path))
        elector = LeaderElector(
            client, "sched-a", name="kgpu", namespace="kgpu-system", timing=timing
        )
        elector.start()
        try:
            wait_until(lambda: "leading: sched-a holds lease kgpu-system/kgpu" in caplog.text)
            double.fail("*", "/leases/", 503, times=None)
            wait_until(lambda: "lost leadership" in caplog.text)
            double.faults.clear()
            wait_until(lambda: caplog.text.count("leading: sched-a holds lease") == 2)
        finally:
            elector.stop()
            client.close()
    lost = [r for r in caplog.records if "lost leadership" in r.getMessage()]
    assert [r.levelno for r in lost] == [logging.WARNING]
    assert lost[0].getMessage() == (
        "lost leadership: sched-a no longer holds lease kgpu-system/kgpu "
        "(holder: nobody, renewal failed)"
    )
    assert caplog.records[-1].getMessage().startswith("stopped leading: sched-a gives up")


# ---------------------------------------------------------------------------- object text

HOSTILE = "train\x1b[2J\x1b]8;;http://evil\x07\nINFO forged line\u202egpu-0"


def test_printable_escapes_control_format_and_separator_characters() -> None:
    assert printable(HOSTILE) == (
        "train\\x1b[2J\\x1b]8;;http://evil\\x07\\nINFO forged line\\u202egpu-0"
    )
    assert printable("ünïcode 名前 ok") == "ünïcode 名前 ok"
    assert printable("\u2028\x85\ufeff") == "\\u2028\\x85\\ufeff"


def test_an_event_about_a_hostile_pod_is_escaped() -> None:
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}}
    body = event_body(pod, "Warning", "FailedScheduling", f"pod {HOSTILE} pends", "kgpu", "x")
    assert body["message"] == f"pod {printable(HOSTILE)} pends"
    assert not any(c in body["message"] for c in "\x1b\x07\n\u202e")


def test_explain_prints_a_hostile_pod_escaped() -> None:
    lines = explain_unreadable(f"ns/{HOSTILE}", f'annotation gpu-fraction is "{HOSTILE}"').lines()
    text = "\n".join(lines)
    assert len(text.splitlines()) == len(lines)  # no line forged
    assert "\x1b" not in text and "\u202e" not in text
    assert lines[0] == f"Pod ns/{printable(HOSTILE)} is pending: kgpu cannot read its request."


def test_log_lines_escape_object_text_but_keep_tracebacks() -> None:
    formatter = EscapingFormatter("%(levelname)s %(message)s")
    record = logging.LogRecord("kgpu", logging.INFO, __file__, 1, "pod %s bound", (HOSTILE,), None)
    line = formatter.format(record)
    assert line == f"INFO pod {printable(HOSTILE)} bound"
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord("kgpu", logging.ERROR, __file__, 1, "x", (), sys.exc_info())
    assert "Traceback (most recent call last):\n" in formatter.format(record)


def test_the_simulators_report_prints_a_hostile_pod_escaped(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from kgpu.cli import main

    (tmp_path / "cluster.yaml").write_text(
        """\
apiVersion: v1
kind: Node
metadata: {name: gpu-0, labels: {nvidia.com/gpu.memory: "81920"}}
status: {allocatable: {cpu: "8", memory: 64Gi, pods: "110", nvidia.com/gpu: "1"}}
---
apiVersion: v1
kind: Pod
metadata:
  name: "nb\\x1b[2J\\u202e"
  namespace: ml
  annotations: {gpu-fraction: "\\x1b]8;;http://evil\\x07x"}
spec:
  schedulerName: kgpu-scheduler
  containers: [{name: c, image: i}]
"""
    )
    result = CliRunner().invoke(main, ["simulate", "manifests", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output and "\u202e" not in result.output
    # written as escapes (the table may wrap them, but not within "\x1b")
    assert result.output.count("\\x1b") == 2
