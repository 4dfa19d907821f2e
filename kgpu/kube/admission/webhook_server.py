"""The admission webhook's HTTPS server (``kgpu webhook``).

``POST /validate`` takes an AdmissionReview v1 and answers with the verdict of
:func:`kgpu.kube.admission.review.review`; ``POST /mutate`` with the pod's GPU environment
(:func:`kgpu.kube.admission.pod_env.mutate`); ``GET /healthz`` answers "ok" for probes. The API server
appends ``?timeout=10s`` to the path; the query is ignored. A Workspace's CREATE reads the
cluster's Nodes (``workspaces``, see :mod:`kgpu.kube.workspaces.node_source`), and a pod's or
PodGroup's the Queues (``queues``, see :mod:`kgpu.kube.admission.queue_fence`), within the
hook's timeout.

The standard library's threading HTTP server, one thread per connection, bounded in threads
and in time (:mod:`kgpu.kube.api.http_serving`): admission traffic is a few requests per pod
created, and each verdict takes microseconds. The TLS handshake runs in the connection's
thread (not in ``accept``), under the same deadline as the request, so a client that stalls
mid-handshake holds up only itself, and only for the deadline.
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
from http import HTTPStatus
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from kgpu.kube.admission.device_writer import DeviceWriters
from kgpu.kube.admission.pod_env import mutate
from kgpu.kube.admission.queue_fence import QueueSource
from kgpu.kube.admission.record_guard import KeySource
from kgpu.kube.admission.review import ReviewError, WorkspaceNodes, review
from kgpu.kube.api.http_serving import BoundedServer, DeadlineHandler
from kgpu.kube.api.resource_types import MUTATE_PATH, WEBHOOK_PATH
from kgpu.model.json_text import OutOfBounds, read_json
from kgpu.model.limits import MAX_OBJECT_DEPTH

log = logging.getLogger("kgpu.webhook")

MAX_BODY: Final = 8 * 1024 * 1024  # a pod with many large annotations stays far below
TIMEOUT_S: Final = 15.0  # per request; the API server gives up after 10 s at most


def tls_context(cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    return context


class WebhookServer(BoundedServer):
    """Serves admission reviews over TLS until :meth:`shutdown`."""

    def __init__(
        self,
        address: tuple[str, int],
        context: ssl.SSLContext,
        scheduler_name: str,
        workspaces: WorkspaceNodes | None = None,
        queues: QueueSource | None = None,
        record_key: KeySource = lambda: None,
        *,
        devices: DeviceWriters | None = None,
        deadline: float = TIMEOUT_S,
    ) -> None:
        super().__init__(address, _Handler, deadline=deadline)
        self.scheduler_name = scheduler_name
        self.workspaces = workspaces
        self.queues = queues
        self.devices = devices
        self.record_key = record_key  # checks kgpu's own changes to its records on pods
        self.socket = context.wrap_socket(
            self.socket, server_side=True, do_handshake_on_connect=False
        )

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def start_background(self) -> threading.Thread:
        """Serve from a daemon thread (tests, and embedding in another process)."""
        thread = threading.Thread(target=self.serve_forever, name="kgpu-webhook", daemon=True)
        thread.start()
        return thread

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that drops the connection or fails the handshake is routine, not a trace.
        log.debug("connection from %s failed", client_address, exc_info=True)


class _Handler(DeadlineHandler):
    server: WebhookServer
    protocol_version = "HTTP/1.1"  # keep-alive: the API server reuses connections

    def do_GET(self) -> None:
        if urlsplit(self.path).path == "/healthz":
            self._send(HTTPStatus.OK, b"ok\n", "text/plain")
        else:
            self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain")

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        if path not in (WEBHOOK_PATH, MUTATE_PATH):
            self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain")
            return
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self._send(HTTPStatus.LENGTH_REQUIRED, b"Content-Length required\n", "text/plain")
            return
        if not 0 <= length <= MAX_BODY:
            self.close_connection = True  # the body is not read, so the stream is unusable
            self._send(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, b"body too large\n", "text/plain")
            return
        body = self.rfile.read(length)
        try:
            request = read_json(body, max_chars=MAX_BODY, max_depth=MAX_OBJECT_DEPTH)
            if path == MUTATE_PATH:
                answer = mutate(request, self.server.scheduler_name)
            else:
                server = self.server
                answer = review(
                    request,
                    server.scheduler_name,
                    server.workspaces,
                    server.queues,
                    server.record_key,
                    devices=server.devices,
                )
        except (ValueError, ReviewError) as exc:  # JsonTextError is a ValueError
            message = str(exc) if isinstance(exc, ReviewError) else "body is not JSON"
            if isinstance(exc, OutOfBounds):
                message = f"body is not JSON within kgpu's bounds ({exc})"
            self._send(HTTPStatus.BAD_REQUEST, f"{message}\n".encode(), "text/plain")
            return
        response = answer["response"]
        if not response["allowed"]:
            log.info("denied %s", response["status"]["message"])
        for warning in response.get("warnings", ()):
            log.info("admitted with a warning: %s", warning)
        self._send(HTTPStatus.OK, json.dumps(answer).encode(), "application/json")

    def _send(self, status: HTTPStatus, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)
