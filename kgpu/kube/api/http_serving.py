"""The HTTP servers kgpu runs (metrics and probes, the admission webhook), bounded.

The standard library's threading server gives every connection a thread for as long as the
client keeps it open: a hundred clients that send half a request and wait hold a hundred
threads, forever. Here a connection has ``deadline`` seconds to send each request and get
its answer (an idle keep-alive connection waiting for its next request counts too), after
which its socket is shut and its thread ends; and at most ``max_connections`` are served at
once, a connection beyond that being closed at once, unanswered. So the process holds at
most ``max_connections`` threads, each for at most ``deadline`` seconds.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final

DEADLINE_S: Final = 15.0  # the API server gives a webhook 10 s at most; probes 2 s
MAX_CONNECTIONS: Final = 64


class BoundedServer(ThreadingHTTPServer):
    """A :class:`ThreadingHTTPServer` for handlers derived from :class:`DeadlineHandler`."""

    daemon_threads = True  # a hung client never keeps the process from exiting

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[DeadlineHandler],
        *,
        deadline: float = DEADLINE_S,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        super().__init__(address, handler)
        self.deadline = deadline
        self._slots = threading.BoundedSemaphore(max_connections)
        self.refused = 0  # connections closed unanswered for want of a slot

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.refused += 1
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()  # no thread started, so none will release it
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


class DeadlineHandler(BaseHTTPRequestHandler):
    """Each request, from its first byte awaited to its answer sent, within the server's
    deadline; past it the connection is shut, which ends any read or write blocked on it."""

    server: BoundedServer

    def setup(self) -> None:
        # A read blocked longer than the whole deadline is cut by the timer anyway; the
        # socket's own timeout is a second guard should a timer thread not start.
        super().setup()
        self.connection.settimeout(self.server.deadline)

    def handle_one_request(self) -> None:
        timer = threading.Timer(self.server.deadline, self._cut)
        timer.daemon = True
        timer.start()
        try:
            super().handle_one_request()
        finally:
            timer.cancel()

    def _cut(self) -> None:
        self.close_connection = True
        with contextlib.suppress(OSError):  # closed meanwhile
            self.connection.shutdown(socket.SHUT_RDWR)
