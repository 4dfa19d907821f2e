"""Calls to the Kubernetes API, over the official ``kubernetes`` Python client's connection.

The official client brings what is hard to get right: kubeconfig and in-cluster loading,
TLS, client certificates, bearer tokens and exec-plugin refresh, proxies, and the urllib3
connection pool built from all that. kgpu sends its calls straight through that pool, below
the generated ``CoreV1Api`` methods and ``ApiClient.call_api``: one code path for core
objects, leases and our custom resources alike, plain dicts in and out (which
:mod:`kgpu.kube.objects.node_pod` reads, as it reads manifest files), no model (de)serialisation of
10,000 pods per list, no trouble with the ``Status`` that the API server answers a pod
binding with, and a third less CPU a call than through the generated layer (a pod costs a
read, its Binding and an event). Watches and lists go through that pool; every other call
through libcurl with the same settings (:mod:`kgpu.kube.api.curl_calls`), which costs a
third of the pool's CPU a call; JSON both ways through orjson
(:mod:`kgpu.kube.api.json_codec`).

Every call has a time bound: ``Timeouts.request`` for an ordinary call, the watch's own
``timeoutSeconds`` plus ``Timeouts.watch_grace`` for a watch (whose stream of events
:mod:`kgpu.kube.api.watch_stream` reads). The client retries nothing
itself (urllib3's retries are off): errors come out as :mod:`kgpu.kube.api.errors`, and the
caller, who knows whether a retry is safe, decides.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import urllib3
from kubernetes import config as kube_config
from kubernetes.client import ApiClient, Configuration
from kubernetes.config.config_exception import ConfigException

from kgpu.kube.api import json_codec
from kgpu.kube.api.curl_calls import CurlCalls, CurlSettings, header_lines, usable_for
from kgpu.kube.api.curl_pump import CurlPump
from kgpu.kube.api.errors import (
    CALL_ERRORS,
    BadConfig,
    Conflict,
    KubeError,
    Unavailable,
    from_exception,
    from_status,
)
from kgpu.kube.api.resource_types import PODS, Resource
from kgpu.kube.api.watch_stream import Watch

Body = Mapping[str, Any] | Sequence[Mapping[str, Any]]
# What a call started by :meth:`KubeClient.request_async` hands its ``then``: the decoded
# answer, or the error the call ended with.
Answer = dict[str, Any] | KubeError
Then = Callable[[Answer], None]
MERGE_PATCH = "application/merge-patch+json"

# What the dry-run Bindings that learn whether the server checks a Binding's preconditions
# send: a uid and a resourceVersion no pod has, and a node name no node has (a dry run binds
# nothing, and the server does not look the node up).
_IMPOSSIBLE_UID = "00000000-0000-0000-0000-000000000000"
_IMPOSSIBLE_VERSION = "1"
_PROBE_NODE = "kgpu-precondition-probe"

log = logging.getLogger(__name__)

_CREDENTIALS_TTL_S = 1.0  # see KubeClient._credentials


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Bounds on every call, in seconds."""

    connect: float = 5.0
    # The longest wait for any byte of a list; for any other call, with ``connect``, the
    # longest the whole call may take (kgpu.kube.api.curl_calls).
    request: float = 15.0
    watch: int = 300  # timeoutSeconds asked of the server for one watch
    watch_grace: float = 30.0  # silence past ``watch`` after which the client gives up


@dataclass(frozen=True, slots=True)
class ObjectList:
    items: list[dict[str, Any]]
    resource_version: str


def load_configuration(kubeconfig: str | None = None, context: str | None = None) -> Configuration:
    """Connection settings from ``kubeconfig``; with none given, from the pod's service
    account when running in a cluster, else from $KUBECONFIG or ~/.kube/config."""
    configuration = Configuration()
    try:
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            kube_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            kube_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig,
                context=context,
                client_configuration=configuration,
                persist_config=False,
            )
    except (ConfigException, OSError, ValueError, TypeError) as exc:
        where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        raise BadConfig(f"cannot use kubeconfig {where}: {exc}") from exc
    return configuration


class KubeClient:
    """Thread-safe: one client serves the informers, the binders and the elector at once."""

    def __init__(
        self,
        configuration: Configuration,
        *,
        timeouts: Timeouts | None = None,
        user_agent: str = "kgpu",
        pool_size: int = 32,
    ) -> None:
        self.timeouts = timeouts or Timeouts()
        # Retries are the caller's decision (a retried POST could bind twice); and a pool as
        # wide as the calls in flight, or connections are opened and dropped for every call
        # (libcurl's calls keep to it too).
        configuration.retries = urllib3.util.Retry(total=False)
        configuration.connection_pool_maxsize = pool_size
        self._api = ApiClient(configuration)
        self._configuration = configuration
        self._pool = self._api.rest_client.pool_manager
        self._host = configuration.host  # a property that reads the proxy environment
        self._user_agent = user_agent
        self._auth: tuple[float, dict[str, str]] = (-_CREDENTIALS_TTL_S, {})
        self._binding_preconditions: bool | None = None  # see learn_binding_preconditions
        # Every call but watches through libcurl, where it carries the settings over: a
        # third of the CPU a call (kgpu.kube.api.curl_calls); the calls that must not hold
        # up their caller (binds, events) many at once from one thread
        # (kgpu.kube.api.curl_pump), or else from a pool of threads.
        self._curl: CurlCalls | None = None
        self._pump: CurlPump | None = None
        if usable_for(configuration):
            settings = CurlSettings.of(configuration, user_agent)
            self._curl = CurlCalls(settings)
            self._pump = CurlPump(settings, connections=pool_size)
        self._pool_size = pool_size
        # Content type ("" without a body) -> (the credentials they were made with, the
        # header lines): see _prepare_curl.
        self._lines: dict[str, tuple[dict[str, str], list[str]]] = {}
        self._threads: ThreadPoolExecutor | None = None
        self._threads_lock = threading.Lock()

    @classmethod
    def from_kubeconfig(
        cls, kubeconfig: str | None = None, *, context: str | None = None, **kwargs: Any
    ) -> KubeClient:
        return cls(load_configuration(kubeconfig, context), **kwargs)

    @property
    def host(self) -> str:
        """The API server's URL ("https://10.0.0.1:6443")."""
        return self._host

    def close(self) -> None:
        if self._pump is not None:
            self._pump.close()
        if self._threads is not None:
            self._threads.shutdown(wait=True)
        if self._curl is not None:
            self._curl.close()
        self._api.close()  # type: ignore[no-untyped-call]

    # ------------------------------------------------------------------ raw calls

    def _send(
        self,
        method: str,
        path: str,
        query: Sequence[tuple[str, str]],
        body: Body | None,
        content_type: str,
        timeout: tuple[float, float],
        *,
        stream: bool = False,
    ) -> urllib3.BaseHTTPResponse:
        # Straight onto the library's urllib3 pool (its TLS, client certificates, proxy):
        # the generated layer around it (model sanitising, header and query processing, and
        # a ``Configuration.host`` that reads the proxy environment on every call) was a
        # third of a call's CPU, and a pod costs three calls.
        url, headers, payload = self._prepare(path, query, body, content_type)
        headers["User-Agent"] = self._user_agent
        return self._pool.urlopen(
            method,
            url,
            body=payload,
            headers=headers,
            timeout=urllib3.Timeout(connect=timeout[0], read=timeout[1]),
            retries=False,
            redirect=False,
            preload_content=not stream,
        )

    def _prepare(
        self,
        path: str,
        query: Sequence[tuple[str, str]],
        body: Body | None,
        content_type: str,
    ) -> tuple[str, dict[str, str], bytes | None]:
        """The URL, the headers (but the user agent) and the serialised body of a call."""
        url = self._host + path
        if query:
            url += "?" + urlencode(query)
        headers = {"Accept": "application/json"}
        headers.update(self._credentials())
        payload = None
        if body is not None:
            headers["Content-Type"] = content_type
            payload = json_codec.dumps(body)
        return url, headers, payload

    def _prepare_curl(
        self,
        path: str,
        query: Sequence[tuple[str, str]],
        body: Body | None,
        content_type: str,
    ) -> tuple[str, list[str], bytes | None]:
        """:meth:`_prepare` as libcurl takes it: the header lines, made once per content
        type and token (every call of a kind sends the same)."""
        url = self._host + path
        if query:
            url += "?" + urlencode(query)
        credentials = self._credentials()
        kind = content_type if body is not None else ""
        known = self._lines.get(kind)
        if known is None or known[0] is not credentials:
            headers = {"Accept": "application/json", **credentials}
            if body is not None:
                headers["Content-Type"] = content_type
            known = (credentials, header_lines(headers))
            self._lines[kind] = known
        payload = json_codec.dumps(body) if body is not None else None
        return url, known[1], payload

    def _credentials(self) -> dict[str, str]:
        """The bearer token header, read again at most once a second: reading it runs the
        kubeconfig's refresh hook (which renews an expired exec-plugin or OIDC token, and
        re-reads a service account's token file when due) but also sets every connection
        setting again, the host by reading the whole proxy environment: a third of a call's
        CPU if done per call. A token renewed meanwhile is picked up within the second."""
        now = time.monotonic()
        read_at, header = self._auth
        if now - read_at >= _CREDENTIALS_TTL_S:
            header = {}
            bearer = self._configuration.auth_settings().get("BearerToken")
            if bearer is not None and bearer["value"]:
                header = {bearer["key"]: bearer["value"]}
            self._auth = (now, header)  # one tuple: other threads see the old or the new
        return header

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: Body | None = None,
        content_type: str = "application/json",
        timeout: float | None = None,
        long_answer: bool = False,
        read_answer: bool = True,
    ) -> dict[str, Any]:
        """One call; the decoded JSON answer, or a :class:`KubeError`. A ``long_answer``
        (a list) goes through urllib3, whose time bound is on each byte, not the whole.
        ``read_answer`` False: a successful answer is not decoded ({} comes back), for
        calls whose answer no one reads (a Binding's Status, a created Event: a tenth of
        the CPU of such a call)."""
        what = f"{method} {path}"
        bound = (self.timeouts.connect, timeout or self.timeouts.request)
        try:
            if self._curl is not None and not long_answer:
                url, lines, payload = self._prepare_curl(path, query, body, content_type)
                status, raw = self._curl.call(method, url, lines, payload, bound)
            else:
                response = self._send(method, path, query, body, content_type, bound)
                status, raw = response.status, response.data
        except CALL_ERRORS as exc:
            raise from_exception(exc, what) from exc
        return _decoded(what, status, raw, read_answer)

    def request_async(
        self,
        method: str,
        path: str,
        then: Then,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: Body | None = None,
        content_type: str = "application/json",
        read_answer: bool = True,
    ) -> None:
        """One call, started and not waited for: ``then`` gets what :meth:`request` would
        return, or the :class:`KubeError` it would raise, on the calls' own thread
        (kgpu.kube.api.curl_pump), where it must not block; without libcurl, on a thread
        of a pool as wide as the client's connection pool."""
        pump = self._pump
        if pump is None:
            self._call_threads().submit(
                self._request_then, method, path, then, query, body, content_type, read_answer
            )
            return
        what = f"{method} {path}"
        bound = (self.timeouts.connect, self.timeouts.request)
        url, lines, payload = self._prepare_curl(path, query, body, content_type)

        def done(status: int, raw: bytes, error: Exception | None) -> None:
            answer: Answer
            try:
                if error is not None:
                    raise from_exception(error, what) from error
                answer = _decoded(what, status, raw, read_answer)
            except KubeError as exc:
                answer = exc
            then(answer)

        pump.call(method, url, lines, payload, bound, done)

    def later(self, delay: float, function: Callable[[], None]) -> None:
        """Run ``function`` after ``delay`` seconds where :meth:`request_async`'s ``then``
        run (a retry after a back-off)."""
        if self._pump is not None:
            self._pump.later(delay, function)
        else:
            timer = threading.Timer(delay, function)
            timer.daemon = True
            timer.start()

    def _request_then(
        self,
        method: str,
        path: str,
        then: Then,
        query: Sequence[tuple[str, str]],
        body: Body | None,
        content_type: str,
        read_answer: bool,
    ) -> None:
        answer: Answer
        try:
            answer = self.request(
                method,
                path,
                query=query,
                body=body,
                content_type=content_type,
                read_answer=read_answer,
            )
        except KubeError as exc:
            answer = exc
        try:
            then(answer)
        except Exception:  # as the call thread does: said, and the pool goes on
            log.exception("%s %s: handling the answer failed", method, path)

    def _call_threads(self) -> ThreadPoolExecutor:
        with self._threads_lock:
            if self._threads is None:
                self._threads = ThreadPoolExecutor(self._pool_size, thread_name_prefix="kube-calls")
            return self._threads

    # ------------------------------------------------------------------ objects

    def list(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        resource_version: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
    ) -> ObjectList:
        """All objects of a type. ``resource_version`` "X" asks for a state at least as new
        as X (served from the API server's watch cache); None for a fresh quorum read."""
        query = [("resourceVersion", resource_version)] if resource_version else []
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        data = self.request("GET", resource.path(namespace), query=query, long_answer=True)
        items = data.get("items") or []
        for item in items:
            # The API server leaves kind and apiVersion out of a list's items.
            item.setdefault("kind", resource.kind)
            item.setdefault("apiVersion", resource.api_version)
        version = data.get("metadata", {}).get("resourceVersion", "")
        return ObjectList(items, str(version))

    def watch(
        self,
        resource: Resource,
        resource_version: str,
        *,
        namespace: str | None = None,
        timeout_seconds: int | None = None,
        field_selector: str = "",
    ) -> Watch:
        """Changes after ``resource_version``, bookmarks included, until the server ends
        the watch (after ``timeout_seconds``) or something breaks (a :class:`KubeError`;
        410 Gone, sent at the start or inside the stream, is :class:`Expired`)."""
        seconds = timeout_seconds or self.timeouts.watch
        query = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", resource_version),
            ("timeoutSeconds", str(seconds)),
        ]
        if field_selector:
            query.append(("fieldSelector", field_selector))
        path = resource.path(namespace)
        what = f"WATCH {path}"
        bound = (self.timeouts.connect, seconds + self.timeouts.watch_grace)
        try:
            raw = self._send("GET", path, query, None, "application/json", bound, stream=True)
        except CALL_ERRORS as exc:
            raise from_exception(exc, what) from exc
        if raw.status != 200:  # unread: the body is the stream
            try:
                body = raw.read()
            except CALL_ERRORS:
                body = b""
            finally:
                raw.close()
            raise from_status(raw.status, body, what)
        return Watch(raw, resource, what)

    def get(self, resource: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        return self.request("GET", resource.path(namespace, name))

    def create(
        self,
        resource: Resource,
        obj: Mapping[str, Any],
        namespace: str | None = None,
        *,
        read_answer: bool = True,
    ) -> dict[str, Any]:
        """The object as created ({} with ``read_answer`` False: see :meth:`request`)."""
        return self.request("POST", resource.path(namespace), body=obj, read_answer=read_answer)

    def create_async(
        self,
        resource: Resource,
        obj: Mapping[str, Any],
        namespace: str | None,
        then: Then,
        *,
        read_answer: bool = True,
    ) -> None:
        """:meth:`create`, started and not waited for (see :meth:`request_async`)."""
        path = resource.path(namespace)
        self.request_async("POST", path, then, body=obj, read_answer=read_answer)

    def replace(
        self, resource: Resource, name: str, obj: Mapping[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        """PUT: fails with Conflict if ``obj``'s resourceVersion is no longer current."""
        return self.request("PUT", resource.path(namespace, name), body=obj)

    def patch(
        self,
        resource: Resource,
        name: str,
        patch: Mapping[str, Any],
        namespace: str | None = None,
        subresource: str = "",
    ) -> dict[str, Any]:
        """A JSON merge patch (RFC 7386). A ``metadata.uid`` or ``metadata.resourceVersion``
        in the patch is a precondition: the server answers 409 if it does not match."""
        path = resource.path(namespace, name, subresource)
        return self.request("PATCH", path, body=patch, content_type=MERGE_PATCH)

    def delete(self, resource: Resource, name: str, namespace: str | None = None) -> None:
        self.request("DELETE", resource.path(namespace, name))

    def bind_async(
        self,
        namespace: str,
        name: str,
        node: str,
        then: Then,
        *,
        uid: str = "",
        resource_version: str = "",
        annotations: Mapping[str, str] | None = None,
        dry_run: bool = False,
    ) -> None:
        """Create the pod's Binding (pods/binding), started and not waited for (see
        :meth:`request_async`); a pod already bound answers 409.

        The API server copies the Binding's ``annotations`` onto the pod in the same write
        that sets its node, so a bound pod carries them from its first bound version on.
        ``uid`` and ``resource_version`` are preconditions (409 when they do not match the
        pod) only where the server checks them, which v1.20 does not: see
        :meth:`learn_binding_preconditions`. ``dry_run`` validates without binding."""
        path, query, body = _binding(
            namespace, name, node, uid, resource_version, annotations, dry_run
        )
        self.request_async("POST", path, then, query=query, body=body, read_answer=False)

    def learn_binding_preconditions(
        self,
        namespace: str,
        name: str,
        uid: str,
        resource_version: str,
        then: Callable[[bool], None],
    ) -> None:
        """Whether this API server refuses a Binding whose ``metadata.uid`` or
        ``metadata.resourceVersion`` does not match the pod, handed to ``then`` where
        :meth:`request_async`'s answers are (at once if known). Servers from v1.23 on do
        (kubernetes#105913), except releases that lost the uid check (kubernetes#116550);
        v1.20 ignores both and binds whatever pod has the name.

        Learned once per client, by two dry-run Bindings of the unbound pod ``name`` (as
        of ``uid`` and ``resource_version``), each with one precondition no pod can meet:
        both refused with "Precondition failed" means the server checks them; one accepted
        means it does not. Dry runs store nothing. Any other answer (the pod gone or bound
        meanwhile, a failed call) teaches nothing: False for now, and the next bind asks
        again. The answer is kept across threads without a lock: two binds learning it at
        once just ask twice."""
        known = self._binding_preconditions
        if known is not None:
            then(known)
            return
        # Each dry run with one precondition no pod can meet.
        wrong = [(_IMPOSSIBLE_UID, resource_version), (uid, _IMPOSSIBLE_VERSION)]

        def ask(step: int) -> None:
            probe_uid, probe_version = wrong[step]
            self.bind_async(
                namespace,
                name,
                _PROBE_NODE,
                lambda answer: answered(step, answer),
                uid=probe_uid,
                resource_version=probe_version,
                dry_run=True,
            )

        def answered(step: int, answer: Answer) -> None:
            if not isinstance(answer, KubeError):  # accepted: no check
                self._binding_preconditions = False
                then(False)
            elif not (
                isinstance(answer, Conflict) and "precondition failed" in str(answer).lower()
            ):
                then(False)  # refused for something else: nothing learned, asked again
            elif step + 1 < len(wrong):
                ask(step + 1)
            else:
                self._binding_preconditions = True
                then(True)

        ask(0)


def _decoded(what: str, status: int, raw: bytes, read_answer: bool) -> dict[str, Any]:
    """The answer's JSON, or the :class:`KubeError` its status means (raised)."""
    if not 200 <= status < 300:
        raise from_status(status, raw, what)
    if not read_answer:
        return {}
    try:
        data = json_codec.loads(raw) if raw else {}
    except ValueError as exc:
        raise Unavailable(f"{what}: the answer is not JSON: {raw[:200]!r}") from exc
    return data if isinstance(data, dict) else {"value": data}


def _binding(
    namespace: str,
    name: str,
    node: str,
    uid: str,
    resource_version: str,
    annotations: Mapping[str, str] | None,
    dry_run: bool,
) -> tuple[str, list[tuple[str, str]], dict[str, Any]]:
    """The path, query and body of a pod's Binding (:meth:`KubeClient.bind_async`)."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if uid:
        metadata["uid"] = uid
    if resource_version:
        metadata["resourceVersion"] = resource_version
    if annotations:
        metadata["annotations"] = dict(annotations)
    body = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": metadata,
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    query = [("dryRun", "All")] if dry_run else []
    return PODS.path(namespace, name, "binding"), query, body
