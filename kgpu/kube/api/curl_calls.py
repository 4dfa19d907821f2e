"""Ordinary API calls (everything but watches) through libcurl, by ``pycurl``.

A bind costs kgpu a read and a Binding, and each bound pod a Scheduled event: three calls a
pod, and through urllib3 and ``http.client`` each cost about 0.4-0.5 ms of this process's
CPU in pure Python (building the request, parsing the answer's headers with the ``email``
package), most of a bound pod's cost. libcurl does the same in C, with the GIL released
while it waits: about a third of the CPU a call (``bench/e2e_vs_kube_scheduler.py``,
docs/BENCHMARKS.md). Calls that must not wait on the caller's thread (binds, events) go
through one thread's multi interface instead (:mod:`kgpu.kube.api.curl_pump`), with the
same settings, set by :func:`configure` and :func:`set_request` here.

HTTP/1.1 with keep-alive, not HTTP/2: each thread has a connection of its own, so HTTP/2's
multiplexing would buy nothing, and its framing costs both ends CPU (kgpu and the API
server each used less a pod over HTTP/1.1 in ``bench/e2e_vs_kube_scheduler.py``).

Each thread keeps one curl handle, and with it its open connection to the API server, for
all its calls (keep-alive, as urllib3's pool gave). The connection settings are the ones
the ``kubernetes`` client loaded from the kubeconfig or the service account: the server's
CA, the client certificate, whether to verify. Configurations this does not carry over (a
proxy, a TLS server name, no hostname check) keep every call on urllib3
(:func:`usable_for`).

Time bounds: ``connect`` for the connection, and the whole call given up after ``connect``
plus ``read`` seconds. urllib3 bounds the wait for each byte instead, which only differs for
a long answer: lists, which stay on urllib3 (:meth:`KubeClient.list`). libcurl's errors come out as ``pycurl.error`` with its error code, which
:func:`kgpu.kube.api.errors.from_exception` translates.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import certifi
import pycurl
from kubernetes.client import Configuration


def usable_for(configuration: Configuration) -> bool:
    """Whether libcurl can make the calls with exactly these settings."""
    return (
        configuration.host.startswith(("https://", "http://"))
        and not configuration.proxy
        and not getattr(configuration, "tls_server_name", None)
        and configuration.assert_hostname is not False
    )


@dataclass(frozen=True, slots=True)
class CurlSettings:
    """What every call's handle is set up with, from the client's configuration."""

    user_agent: str
    verify: bool
    ca: str
    cert: str | None
    key: str | None

    @classmethod
    def of(cls, configuration: Configuration, user_agent: str) -> CurlSettings:
        return cls(
            user_agent,
            bool(configuration.verify_ssl),
            configuration.ssl_ca_cert or certifi.where(),
            configuration.cert_file,
            configuration.key_file,
        )


def configure(handle: pycurl.Curl, settings: CurlSettings) -> None:
    """Set what stays the same from call to call, once per handle: a handle keeps its
    options, so a call sets only its own (:func:`set_request`), about a fifth of the CPU
    of resetting and setting them all each time."""
    handle.setopt(pycurl.USERAGENT, settings.user_agent)
    handle.setopt(pycurl.HTTP_VERSION, pycurl.CURL_HTTP_VERSION_1_1)
    handle.setopt(pycurl.NOSIGNAL, 1)  # threads: no SIGALRM for timeouts
    handle.setopt(pycurl.FOLLOWLOCATION, 0)
    handle.setopt(pycurl.CAINFO, settings.ca)
    handle.setopt(pycurl.SSL_VERIFYPEER, 1 if settings.verify else 0)
    handle.setopt(pycurl.SSL_VERIFYHOST, 2 if settings.verify else 0)
    if settings.cert:
        handle.setopt(pycurl.SSLCERT, settings.cert)
    if settings.key:
        handle.setopt(pycurl.SSLKEY, settings.key)


def header_lines(headers: dict[str, str]) -> list[str]:
    # "Expect:" off: libcurl would otherwise wait for a 100 Continue before a body.
    return [f"{k}: {v}" for k, v in headers.items()] + ["Expect:"]


def set_request(
    handle: pycurl.Curl,
    method: str,
    url: str,
    headers: Sequence[str],
    payload: bytes | None,
    timeout: tuple[float, float],
    write: Callable[[bytes], object],
) -> None:
    """Set one call's own options on a :func:`configure`\\ d handle, every one of them, so
    nothing of the handle's previous call is left: GET sets HTTPGET (no body, the method
    back to GET); a body is sent as POSTFIELDS under the call's own method."""
    if method == "HEAD":
        raise ValueError("HEAD is not sent through libcurl here (it would wait for a body)")
    handle.setopt(pycurl.URL, url)
    handle.setopt(pycurl.HTTPHEADER, list(headers))
    if payload is None:
        handle.setopt(pycurl.HTTPGET, 1)
    else:
        handle.setopt(pycurl.POSTFIELDS, payload)
    handle.setopt(pycurl.CUSTOMREQUEST, method)
    handle.setopt(pycurl.CONNECTTIMEOUT_MS, int(timeout[0] * 1000))
    handle.setopt(pycurl.TIMEOUT_MS, int((timeout[0] + timeout[1]) * 1000))
    handle.setopt(pycurl.WRITEFUNCTION, write)


class CurlCalls:
    """Thread-safe: one handle (and connection) per calling thread."""

    def __init__(self, settings: CurlSettings) -> None:
        self._settings = settings
        self._local = threading.local()
        self._lock = threading.Lock()
        self._handles: list[pycurl.Curl] = []

    def _handle(self) -> pycurl.Curl:
        handle: pycurl.Curl | None = getattr(self._local, "handle", None)
        if handle is None:
            handle = pycurl.Curl()
            configure(handle, self._settings)
            self._local.handle = handle
            with self._lock:
                self._handles.append(handle)
        return handle

    def call(
        self,
        method: str,
        url: str,
        headers: Sequence[str],
        payload: bytes | None,
        timeout: tuple[float, float],
    ) -> tuple[int, bytes]:
        """Send one request; the status and the body of the answer."""
        handle = self._handle()
        chunks: list[bytes] = []
        set_request(handle, method, url, headers, payload, timeout, chunks.append)
        handle.perform()  # releases the GIL while it waits
        return int(handle.getinfo(pycurl.RESPONSE_CODE)), b"".join(chunks)

    def close(self) -> None:
        with self._lock:
            handles, self._handles = self._handles, []
        for handle in handles:
            handle.close()
