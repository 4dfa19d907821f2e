"""What can go wrong talking to the API server, as a small tree of our own exceptions.

Errors of the libraries underneath (the ``kubernetes`` client, urllib3, sockets, JSON) are
translated here, at the edge, so the rest of kgpu decides what to do next by class alone
and never imports those libraries to catch their errors::

    KubeError                     anything the Kubernetes edge raises
    ├── TemporaryError            the same call may succeed later: retry with back-off
    │   ├── Timeout               no answer within the call's bound (connect or read)
    │   ├── Unavailable           connection refused or reset, 429, 5xx, a garbled answer
    │   └── Conflict              409: someone changed the object first; re-read, then retry
    ├── Expired                   410 Gone, or 504 "Too large resource version": the
    │                             resourceVersion asked for is not served; relist
    └── PermanentError            the same call will fail again: report it, do not retry as is
        ├── NotFound              404 (an object deleted, or a CRD that is not installed)
        ├── Forbidden             401 or 403
        ├── Invalid               400, 422 and any other 4xx
        └── BadConfig             a kubeconfig (or in-cluster setup) that cannot be used

``status`` is the HTTP status (0 when no answer came back) and ``message`` the server's
own words when it sent a ``Status``, so an event or log line can quote it.
"""

from __future__ import annotations

import json
from typing import Any

import pycurl
import urllib3.exceptions
from kubernetes.client.exceptions import OpenApiException

# What the client library may raise on a call: connection and protocol errors, socket errors,
# undecodable bodies, and the client's own exceptions (TLS failures arrive as those); and
# libcurl's, for the calls kgpu.kube.api.curl_calls makes.
CALL_ERRORS = (urllib3.exceptions.HTTPError, OSError, ValueError, OpenApiException, pycurl.error)


class KubeError(Exception):
    """An API call that did not succeed."""

    def __init__(self, message: str, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.reason = reason  # the Status reason: "Conflict", "NotFound", "Expired", ...


class TemporaryError(KubeError):
    """Retry after a delay; the call may well succeed then."""


class Timeout(TemporaryError):
    """The call's time bound ran out: it may or may not have taken effect on the server."""


class Unavailable(TemporaryError):
    """The server could not be reached or was overloaded (429, 5xx)."""


class Conflict(TemporaryError):
    """409: the object changed (or already exists, or is already bound) since it was read."""


class Expired(KubeError):
    """The resourceVersion asked for is not available: compacted away (410 Gone), or newer
    than the API server's watch cache of that type (504 "Too large resource version"),
    which happens to a version from another type's write. List again."""


class PermanentError(KubeError):
    """The request itself is wrong or not allowed; repeating it unchanged will not help."""


class NotFound(PermanentError):
    """404: no such object, or no such resource type (a CRD not installed)."""


class Forbidden(PermanentError):
    """401 or 403."""


class Invalid(PermanentError):
    """400, 422 or another 4xx: the server refused the request's content."""


class BadConfig(PermanentError):
    """No usable connection settings: a missing or malformed kubeconfig, or not in a pod."""


def status_message(body: bytes | str | None) -> tuple[str, str]:
    """The ``message`` and ``reason`` of a Kubernetes ``Status`` body, or the raw text."""
    if not body:
        return "", ""
    text = (body.decode("utf-8", "replace") if isinstance(body, bytes) else body).strip()
    try:
        data: Any = json.loads(text)
    except ValueError:
        return text[:300], ""
    if isinstance(data, dict):
        return str(data.get("message") or text[:300]), str(data.get("reason") or "")
    return text[:300], ""


def from_status(status: int, body: bytes | str | None, what: str) -> KubeError:
    """The error for an HTTP status the server answered ``what`` (e.g. "PATCH pods/p") with."""
    message, reason = status_message(body)
    text = f"{what}: {status} {reason or ''}".rstrip() + (f": {message}" if message else "")
    if status == 409:
        return Conflict(text, status, reason or "Conflict")
    if status == 410:
        return Expired(text, status, reason or "Expired")
    if status == 504 and "too large resource version" in message.lower():
        return Expired(text, status, "TooLargeResourceVersion")
    if status == 404:
        return NotFound(text, status, reason or "NotFound")
    if status in (401, 403):
        return Forbidden(text, status, reason or "Forbidden")
    if status == 429 or status >= 500:
        return Unavailable(text, status, reason or "ServiceUnavailable")
    return Invalid(text, status, reason or "Invalid")


def from_exception(exc: BaseException, what: str) -> KubeError:
    """Our error for an exception a client library raised while calling ``what``."""
    if isinstance(exc, KubeError):
        return exc
    if isinstance(exc, pycurl.error):
        code = exc.args[0] if exc.args else 0
        text = exc.args[1] if len(exc.args) > 1 else str(exc)
        if code == pycurl.E_OPERATION_TIMEDOUT:
            return Timeout(f"{what}: timed out ({text})")
        # Connection refused or reset, a TLS failure, an answer cut short.
        return Unavailable(f"{what}: curl error {code}: {text}")
    if _timed_out(exc):
        return Timeout(f"{what}: timed out ({exc})")
    if isinstance(exc, urllib3.exceptions.HTTPError | OSError | ValueError):
        # Connection refused or reset, a stream cut mid-chunk, a body that is not JSON.
        return Unavailable(f"{what}: {type(exc).__name__}: {exc}")
    status = getattr(exc, "status", None)
    if isinstance(status, int) and status > 0:
        return from_status(status, getattr(exc, "body", None), what)
    return Unavailable(f"{what}: {type(exc).__name__}: {exc}")


def _timed_out(exc: BaseException) -> bool:
    """A timeout, possibly wrapped (urllib3 wraps a socket timeout in a ProtocolError when a
    streamed body stalls)."""
    seen = 0
    current: BaseException | None = exc
    while current is not None and seen < 5:
        if isinstance(current, urllib3.exceptions.NewConnectionError):
            return False  # a refused connection, though urllib3 files it under timeouts
        if isinstance(current, urllib3.exceptions.TimeoutError | TimeoutError):
            return True
        if any(isinstance(a, BaseException) and _timed_out(a) for a in current.args):
            return True
        current = current.__cause__ or current.__context__
        seen += 1
    return False
