"""``/metrics``, ``/healthz`` and ``/readyz`` over HTTP, for the scheduler and the node agent.

``/healthz`` (also ``/livez``) answers 200 while ``live`` names no problem, 503 with the
problems otherwise: a probe restarts a process whose loop has stopped turning. ``/readyz``
likewise with ``ready``. ``/metrics`` is whatever ``render`` returns, in Prometheus' text
format.

It binds ``host``: 127.0.0.1 for a workstation's ``kgpu run`` and ``kgpu agent``, the
pod's IP in the install (``--metrics-address``), never every interface unless asked. Slow
or half-sent requests are cut off (:mod:`kgpu.kube.api.http_serving`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from prometheus_client.exposition import CONTENT_TYPE_LATEST

from kgpu.kube.api.http_serving import (
    DEADLINE_S,
    MAX_CONNECTIONS,
    BoundedServer,
    DeadlineHandler,
)

Problems = Callable[[], list[str]]


def _none() -> list[str]:
    return []


class HealthServer:
    """Serves on ``port`` (0: any free port; see ``port`` after)."""

    def __init__(
        self,
        render: Callable[[], bytes],
        ready: Problems,
        *,
        live: Problems = _none,
        host: str = "127.0.0.1",
        port: int = 10251,
        deadline: float = DEADLINE_S,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        handler = _handler(render, ready, live)
        self._server = BoundedServer(
            (host, port), handler, deadline=deadline, max_connections=max_connections
        )
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="metrics-http", daemon=True
        )

    def start(self) -> HealthServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(render: Callable[[], bytes], ready: Problems, live: Problems) -> type[DeadlineHandler]:
    class Handler(DeadlineHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._answer(200, render(), CONTENT_TYPE_LATEST)
            elif path in ("/healthz", "/livez"):
                self._problems(live(), "not live")
            elif path == "/readyz":
                self._problems(ready(), "not ready")
            else:
                self._answer(404, b"not found")

        def _problems(self, problems: list[str], what: str) -> None:
            if problems:
                self._answer(503, f"{what}: {', '.join(problems)}".encode())
            else:
                self._answer(200, b"ok")

        def _answer(self, code: int, body: bytes, content_type: str = "text/plain") -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # probes every few seconds would drown the process's own log

    return Handler
