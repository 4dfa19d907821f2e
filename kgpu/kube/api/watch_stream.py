"""One open watch: the API server's stream of newline-separated JSON events, read as they
arrive, and ended from any thread.

An ``ERROR`` event inside the stream (410 Gone among them) comes out as the
:mod:`kgpu.kube.api.errors` class of its status, as an error answer to the request itself
would; a watch that ``close`` ended simply stops.
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kgpu.kube.api import json_codec
from kgpu.kube.api.errors import CALL_ERRORS, KubeError, Unavailable, from_exception, from_status
from kgpu.kube.api.resource_types import Resource


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: str  # ADDED, MODIFIED, DELETED or BOOKMARK
    object: dict[str, Any]


class Watch:
    """One open watch: iterate for its events; ``close`` from any thread ends it."""

    def __init__(self, raw: Any, resource: Resource, what: str) -> None:
        self._raw = raw
        self._resource = resource
        self._what = what
        self._closed = False

    def __iter__(self) -> Iterator[WatchEvent]:
        what = self._what
        try:
            for line in _lines(self._raw):
                event = json_codec.loads(line)
                kind, obj = event.get("type"), event.get("object")
                if not isinstance(obj, dict) or not isinstance(kind, str):
                    raise Unavailable(f"{what}: an event without type or object: {line[:200]!r}")
                if kind == "ERROR":
                    raise from_status(int(obj.get("code") or 500), json.dumps(obj), what)
                obj.setdefault("kind", self._resource.kind)
                obj.setdefault("apiVersion", self._resource.api_version)
                yield WatchEvent(kind, obj)
        except KubeError:
            raise
        except (*CALL_ERRORS, AttributeError) as exc:
            # AttributeError: http.client reading a response that ``close`` has just closed
            # from another thread. Either way, a closed watch simply ends.
            if self._closed:
                return
            if isinstance(exc, AttributeError):
                raise
            raise from_exception(exc, what) from exc
        finally:
            self.close()

    def close(self) -> None:
        """End the watch now. A thread blocked reading it is woken by shutting the socket
        down (closing alone does not wake a blocked recv); the connection is never pooled
        again, since a watch rarely ends at a clean boundary."""
        self._closed = True
        connection = getattr(self._raw, "connection", None)
        sock = getattr(connection, "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(*CALL_ERRORS):
            self._raw.close()


def _lines(response: Any) -> Iterator[bytes]:
    """The stream's newline-separated JSON documents, as they arrive."""
    pending = b""
    for chunk in response.stream(64 * 1024, decode_content=True):
        pending += chunk
        if b"\n" not in pending:
            continue
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line.strip():
                yield line
    if pending.strip():
        yield pending
