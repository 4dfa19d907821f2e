"""API calls carried by one thread, many at once: libcurl's multi interface, by ``pycurl``.

A bound pod costs kgpu three calls (the read before its Binding where the server ignores the
Binding's preconditions, the Binding, the Scheduled event). Made each on a thread of its own
(64 binders, 2 event senders), a call cost about 150 µs of this process's CPU, much of it
in switching those threads in and out of the interpreter and the kernel; one thread driving
every transfer through libcurl's multi interface spends about a third of that, and the API
server less too (``bench/e2e_vs_kube_scheduler.py``, docs/BENCHMARKS.md).

The thread (``kube-calls``, started at the first call) waits with epoll (``poll`` where
there is none; either way any file descriptor number works) on the sockets libcurl names
through ``M_SOCKETFUNCTION``, for as long as ``M_TIMERFUNCTION`` says, and on a pipe that
:meth:`CurlPump.call` writes to from other threads; ``curl_multi_socket_action`` then moves
the transfers on. HTTP/1.1, connections kept alive and reused, at most ``connections`` open
(further transfers wait inside libcurl for one to free); each handle is set up once
(:func:`kgpu.kube.api.curl_calls.configure`) and reused.

Each call's ``done`` runs on that thread, with the answer's status and body, or the
``pycurl.error`` that ended it: it must not block (a blocking API call there would hold up
every other transfer), and may start further calls. :meth:`CurlPump.later` runs a function
there after a delay (an event's retry). A ``done`` that raises is logged; the thread goes on.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import os
import select
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pycurl

from kgpu.kube.api.curl_calls import CurlSettings, configure, set_request

log = logging.getLogger(__name__)

# (HTTP status, body, the error that ended the call or None); status 0 with an error.
Done = Callable[[int, bytes, pycurl.error | None], None]

CLOSED = "the API client was closed"


@dataclass(slots=True)
class _Call:
    method: str
    url: str
    headers: Sequence[str]
    payload: bytes | None
    timeout: tuple[float, float]
    done: Done
    chunks: list[bytes] = field(default_factory=list)


class CurlPump:
    """Thread-safe: :meth:`call` and :meth:`later` from any thread."""

    def __init__(
        self, settings: CurlSettings, *, connections: int = 32, name: str = "kube-calls"
    ) -> None:
        self._settings = settings
        self._connections = connections
        self._name = name
        self._lock = threading.Lock()  # starting and closing
        self._thread: threading.Thread | None = None
        self._closed = False
        self._incoming: deque[_Call] = deque()
        self._due: deque[Callable[[], None]] = deque()
        # (when, tie-break, function): :meth:`later`'s, kept by the thread alone.
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._ticket = itertools.count()
        self._signalled = False  # a byte is in the pipe, or about to be
        self._wake_r, self._wake_w = -1, -1
        self._ident = -1  # the thread's

    # ------------------------------------------------------------------ from any thread

    def call(
        self,
        method: str,
        url: str,
        headers: Sequence[str],
        payload: bytes | None,
        timeout: tuple[float, float],
        done: Done,
    ) -> None:
        """Send one request; ``done`` gets its answer on the pump's thread (after
        :meth:`close`, at once on this one, with an error)."""
        self._ensure_started()
        with self._lock:  # once closed, nothing more is taken: every call is answered
            if not self._closed:
                self._incoming.append(_Call(method, url, headers, payload, timeout, done))
                if threading.get_ident() != self._ident:  # its own are taken before it waits
                    self._wake()
                return
        done(0, b"", pycurl.error(pycurl.E_ABORTED_BY_CALLBACK, CLOSED))

    def later(self, delay: float, function: Callable[[], None]) -> None:
        """Run ``function`` on the pump's thread after ``delay`` seconds (never, once
        closed)."""
        self._ensure_started()
        when = time.monotonic() + delay
        with self._lock:
            if not self._closed:
                self._due.append(
                    lambda: heapq.heappush(self._timers, (when, next(self._ticket), function))
                )
                self._wake()

    def close(self, timeout: float = 5.0) -> None:
        """Stop: transfers still running end with an error ``done`` hears of."""
        with self._lock:
            self._closed = True
            thread = self._thread
        if thread is not None:
            self._wake()
            thread.join(timeout)

    # ------------------------------------------------------------------ the thread

    def _ensure_started(self) -> None:
        if self._thread is not None:
            return
        with self._lock:
            if self._thread is not None or self._closed:
                return
            self._wake_r, self._wake_w = os.pipe()
            os.set_blocking(self._wake_r, False)
            os.set_blocking(self._wake_w, False)
            thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            thread.start()
            self._thread = thread

    def _wake(self) -> None:
        # One byte until the thread has read it: a burst of calls wakes it once. The
        # thread clears the flag before it takes the calls, so none is left behind.
        if not self._signalled:
            self._signalled = True
            with contextlib.suppress(BlockingIOError, OSError):
                os.write(self._wake_w, b"\0")

    def _run(self) -> None:
        self._ident = threading.get_ident()
        loop = _Loop(self._settings, self._connections, self._wake_r)
        try:
            while not self._closed:
                self._take(loop)
                loop.step(self._wait_s(loop))
                if loop.woken:
                    loop.woken = False
                    self._signalled = False
                self._fire_timers()
        except Exception:  # a bug here would leave every call unanswered: say so
            log.exception("%s: the call thread failed", self._name)
        finally:
            with self._lock:
                self._closed = True
                left = [*loop.abandon(), *self._incoming]
                self._incoming.clear()
            for call in left:
                _answer(call, 0, pycurl.error(pycurl.E_ABORTED_BY_CALLBACK, CLOSED))
            loop.close()
            os.close(self._wake_r)
            os.close(self._wake_w)

    def _take(self, loop: _Loop) -> None:
        while self._due:
            self._due.popleft()()
        while self._incoming:
            loop.start(self._incoming.popleft())

    def _wait_s(self, loop: _Loop) -> float | None:
        wait = loop.wait_s()
        if self._timers:
            until = max(0.0, self._timers[0][0] - time.monotonic())
            wait = until if wait is None else min(wait, until)
        return wait

    def _fire_timers(self) -> None:
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            _, _, function = heapq.heappop(self._timers)
            try:
                function()
            except Exception:
                log.exception("%s: a delayed call failed", self._name)


class _Loop:
    """The multi handle, its sockets and its timer: the pump thread's alone."""

    def __init__(self, settings: CurlSettings, connections: int, wake_fd: int) -> None:
        self._settings = settings
        self._multi = pycurl.CurlMulti()
        self._multi.setopt(pycurl.M_SOCKETFUNCTION, self._on_socket)
        self._multi.setopt(pycurl.M_TIMERFUNCTION, self._on_timer)
        self._multi.setopt(pycurl.M_MAX_TOTAL_CONNECTIONS, connections)
        self._multi.setopt(pycurl.M_MAXCONNECTS, connections)
        self._poller = _Poller()
        self._wake_fd = wake_fd
        self._poller.watch(wake_fd, True, False)
        self._deadline: float | None = None
        self._idle: list[pycurl.Curl] = []
        self._running: dict[pycurl.Curl, _Call] = {}
        self.woken = False

    def start(self, call: _Call) -> None:
        handle = self._idle.pop() if self._idle else self._new_handle()
        try:
            set_request(
                handle,
                call.method,
                call.url,
                call.headers,
                call.payload,
                call.timeout,
                call.chunks.append,
            )
        except (pycurl.error, ValueError, TypeError) as exc:
            self._idle.append(handle)
            _answer(call, 0, pycurl.error(pycurl.E_BAD_FUNCTION_ARGUMENT, str(exc)))
            return
        self._running[handle] = call
        self._multi.add_handle(handle)  # sets the timer: the transfer starts in step()

    def _new_handle(self) -> pycurl.Curl:
        handle = pycurl.Curl()
        configure(handle, self._settings)
        return handle

    def wait_s(self) -> float | None:
        if self._deadline is None:
            return None
        return max(0.0, self._deadline - time.monotonic())

    def step(self, wait: float | None) -> None:
        """Wait for a socket, the timer or the wake pipe; move the transfers on; answer
        the finished ones."""
        for fd, mask in self._poller.poll(wait):
            if fd == self._wake_fd:
                with contextlib.suppress(BlockingIOError):
                    while os.read(fd, 4096):
                        pass
                self.woken = True
                continue
            action = (
                (pycurl.CSELECT_IN if mask & _READ else 0)
                | (pycurl.CSELECT_OUT if mask & _WRITE else 0)
                | (pycurl.CSELECT_ERR if mask & _BROKEN else 0)
            )
            self._multi.socket_action(fd, action)
        if self._deadline is not None and time.monotonic() >= self._deadline:
            self._deadline = None
            self._multi.socket_action(pycurl.SOCKET_TIMEOUT, 0)
        self._finish()

    def _finish(self) -> None:
        while True:
            queued, ok, failed = self._multi.info_read()
            for handle in ok:
                self._end(handle, None)
            for handle, code, message in failed:
                self._end(handle, pycurl.error(code, message))
            if not queued:
                return

    def _end(self, handle: pycurl.Curl, error: pycurl.error | None) -> None:
        call = self._running.pop(handle)
        status = 0 if error is not None else int(handle.getinfo(pycurl.RESPONSE_CODE))
        self._multi.remove_handle(handle)
        self._idle.append(handle)
        _answer(call, status, error)

    def _on_socket(self, what: int, fd: int, multi: object, data: object) -> None:
        if what == pycurl.POLL_REMOVE:
            self._poller.forget(fd)
        else:
            read = what in (pycurl.POLL_IN, pycurl.POLL_INOUT)
            write = what in (pycurl.POLL_OUT, pycurl.POLL_INOUT)
            self._poller.watch(fd, read, write)

    def _on_timer(self, ms: int) -> None:
        self._deadline = None if ms < 0 else time.monotonic() + ms / 1000

    def abandon(self) -> list[_Call]:
        """The calls still running, taken off (closing)."""
        calls = list(self._running.values())
        for handle in list(self._running):
            self._multi.remove_handle(handle)
            self._idle.append(handle)
        self._running.clear()
        return calls

    def close(self) -> None:
        for handle in self._idle:
            handle.close()
        self._idle.clear()
        self._multi.close()
        self._poller.close()


_READ = select.POLLIN | select.POLLPRI
_WRITE = select.POLLOUT
_BROKEN = select.POLLERR | select.POLLHUP


class _Poller:
    """The sockets to wait on: epoll where there is one, else ``poll``, called directly
    (:mod:`selectors` costs several Python calls for each of the two or three changes a
    transfer makes). epoll's event bits are poll's."""

    def __init__(self, *, epoll: bool = True) -> None:
        has_epoll = epoll and hasattr(select, "epoll")
        self._epoll = select.epoll() if has_epoll else None
        self._poll = select.poll() if self._epoll is None else None
        self._masks: dict[int, int] = {}

    def watch(self, fd: int, read: bool, write: bool) -> None:
        mask = (_READ if read else 0) | (_WRITE if write else 0)
        known = self._masks.get(fd)
        if known == mask:
            return
        self._masks[fd] = mask
        if self._poll is not None:
            self._poll.register(fd, mask)  # registers or modifies
            return
        assert self._epoll is not None
        try:
            if known is None:
                self._epoll.register(fd, mask)
            else:
                self._epoll.modify(fd, mask)
        except OSError:
            # A socket closed without a POLL_REMOVE left epoll by itself, and its number
            # came back for a new one (ENOENT); or the reverse (EEXIST).
            with contextlib.suppress(OSError):
                self._epoll.unregister(fd)
            self._epoll.register(fd, mask)

    def forget(self, fd: int) -> None:
        if self._masks.pop(fd, None) is None:
            return
        with contextlib.suppress(OSError, KeyError):
            if self._epoll is not None:
                self._epoll.unregister(fd)
            elif self._poll is not None:
                self._poll.unregister(fd)

    def poll(self, wait: float | None) -> list[tuple[int, int]]:
        found: list[tuple[int, int]]
        if self._epoll is not None:
            found = self._epoll.poll(-1 if wait is None else wait)
        else:
            assert self._poll is not None
            found = self._poll.poll(None if wait is None else int(wait * 1000 + 0.999))  # ms
        return found

    def close(self) -> None:
        if self._epoll is not None:
            self._epoll.close()


def _answer(call: _Call, status: int, error: pycurl.error | None) -> None:
    try:
        call.done(status, b"".join(call.chunks), error)
    except Exception:
        log.exception("%s %s: handling the answer failed", call.method, call.url)
