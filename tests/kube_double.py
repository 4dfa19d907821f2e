"""A stateful Kubernetes API double: a real HTTP server on 127.0.0.1, for fault tests.

It serves what kgpu's edge uses, with the API server's semantics where kgpu relies on
them: list (``resourceVersion`` in ``metadata``), watch from a resourceVersion with
bookmarks (``allowWatchBookmarks``) and the server's ``timeoutSeconds``, 410 Gone for a
version older than the kept history (inside the stream as an ERROR event, as the real
watch cache answers, or as an HTTP 410), create (409 AlreadyExists), JSON merge patch with
``metadata.uid`` and ``metadata.resourceVersion`` as preconditions (409), PUT with
optimistic concurrency (409), delete (an object with ``metadata.finalizers`` is only
marked with ``deletionTimestamp``, and goes when an update removes its last finalizer; no
finalizer may be added to it meanwhile, 422), ``pods/{name}/eviction`` with
PodDisruptionBudgets (:mod:`tests.eviction_double`; policy/v1beta1 poddisruptionbudgets
served as v1.20 does), ``pods/{name}/binding`` (409 when already bound;
the Binding's annotations copied onto the pod; its ``metadata.uid`` and
``metadata.resourceVersion`` preconditions checked as v1.23+ servers do, or ignored as
v1.20 does with ``binding_preconditions=False``; ``dryRun=All`` stores nothing), the
``status`` subresource, core/v1 events, coordination.k8s.io/v1 leases,
scheduling.k8s.io/v1 priorityclasses, karpenter.sh/v1 nodeclaims (always served), what the
Workspace controller writes (core/v1 services, apps/v1 deployments and statefulsets), and
kgpu.io/v1alpha1 custom resources and leaderworkerset.x-k8s.io/v1 leaderworkersets (404
until their CRD is "installed"), and resource.k8s.io/v1 (Kubernetes 1.34's DRA: discovery at
``/apis/resource.k8s.io/v1``, deviceclasses and resourceslices, namespaced resourceclaims
and resourceclaimtemplates; the claims' ``status`` subresource refuses with 422 what the
real server's validation does that kgpu could get wrong; all 404 with ``dra=False``, as a
server before 1.34).

Faults on purpose, for the tests to drive:

- ``fail(method, path_regex, status, times)``: answer a Status with that code instead;
- ``slow(method, path_regex, seconds, times)``: wait before handling (the call still takes
  effect after the wait, as a slow server's would, even if the client gave up);
- ``before(method, path_regex, action, times)``: run ``action()`` first (delete the pod the
  request is about, say);
- ``drop_watches()``: cut every open watch mid-stream, without the closing chunk;
- ``compact()``: forget the history, so a watch from an older version gets 410.

With ``graceful_pods`` a bound pod that is deleted is only marked (``deletionTimestamp``)
and keeps running until the test calls ``remove``, as a kubelet takes its grace period.

The first three never apply to a dry run (``dryRun=All``). Every request is logged in
``requests`` (method, path, user agent, status answered, query string).
"""

from __future__ import annotations

import bisect
import copy
import json
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from tests.eviction_double import evict

Coll = tuple[str, str]  # (group, plural)

# (group, plural) -> (namespaced, kind, apiVersion)
RESOURCES: dict[Coll, tuple[bool, str, str]] = {
    ("", "nodes"): (False, "Node", "v1"),
    ("", "pods"): (True, "Pod", "v1"),
    ("", "events"): (True, "Event", "v1"),
    ("", "namespaces"): (False, "Namespace", "v1"),
    ("", "configmaps"): (True, "ConfigMap", "v1"),
    ("", "secrets"): (True, "Secret", "v1"),
    ("coordination.k8s.io", "leases"): (True, "Lease", "coordination.k8s.io/v1"),
    ("kgpu.io", "queues"): (False, "Queue", "kgpu.io/v1alpha1"),
    ("kgpu.io", "podgroups"): (True, "PodGroup", "kgpu.io/v1alpha1"),
    ("kgpu.io", "devices"): (False, "Device", "kgpu.io/v1alpha1"),
    ("kgpu.io", "workspaces"): (True, "Workspace", "kgpu.io/v1alpha1"),
    # KAITO's, served once "installed" (KAITO installs its CRD, not kgpu).
    ("kaito.sh", "workspaces"): (True, "Workspace", "kaito.sh/v1beta1"),
    # Koordinator's Device (koordlet's), read where a node has no kgpu.io Device.
    ("scheduling.koordinator.sh", "devices"): (
        False,
        "Device",
        "scheduling.koordinator.sh/v1alpha1",
    ),
    # What the Workspace controller renders; LeaderWorkerSets only once "installed".
    ("", "services"): (True, "Service", "v1"),
    ("apps", "deployments"): (True, "Deployment", "apps/v1"),
    ("apps", "statefulsets"): (True, "StatefulSet", "apps/v1"),
    ("leaderworkerset.x-k8s.io", "leaderworkersets"): (
        True,
        "LeaderWorkerSet",
        "leaderworkerset.x-k8s.io/v1",
    ),
    ("karpenter.sh", "nodeclaims"): (False, "NodeClaim", "karpenter.sh/v1"),
    # Volcano's, read beside kgpu's when Volcano's controllers stay.
    ("scheduling.volcano.sh", "queues"): (False, "Queue", "scheduling.volcano.sh/v1beta1"),
    ("scheduling.volcano.sh", "podgroups"): (True, "PodGroup", "scheduling.volcano.sh/v1beta1"),
    ("scheduling.k8s.io", "priorityclasses"): (False, "PriorityClass", "scheduling.k8s.io/v1"),
    # As v1.20 serves them (policy/v1 came in 1.21), with pods/eviction (tests.eviction_double).
    ("policy", "poddisruptionbudgets"): (True, "PodDisruptionBudget", "policy/v1beta1"),
    # Dynamic Resource Allocation (Kubernetes 1.34), served unless ``dra=False`` (a server
    # older than 1.34, like the local v1.20 one).
    ("resource.k8s.io", "deviceclasses"): (False, "DeviceClass", "resource.k8s.io/v1"),
    ("resource.k8s.io", "resourceslices"): (False, "ResourceSlice", "resource.k8s.io/v1"),
    ("resource.k8s.io", "resourceclaims"): (True, "ResourceClaim", "resource.k8s.io/v1"),
    ("resource.k8s.io", "resourceclaimtemplates"): (
        True,
        "ResourceClaimTemplate",
        "resource.k8s.io/v1",
    ),
    # What `kgpu run --serve-webhook` registers (it does not call them: no admission here).
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"): (
        False,
        "MutatingWebhookConfiguration",
        "admissionregistration.k8s.io/v1",
    ),
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations"): (
        False,
        "ValidatingWebhookConfiguration",
        "admissionregistration.k8s.io/v1",
    ),
}
CUSTOM = {c for c in RESOURCES if c[0] == "kgpu.io"}
LWS: Coll = ("leaderworkerset.x-k8s.io", "leaderworkersets")
# Served only when in ``installed``: kgpu's CRDs, and LeaderWorkerSet's (not kgpu's to install).
KAITO: Coll = ("kaito.sh", "workspaces")
OPTIONAL = {*CUSTOM, LWS, KAITO}
DRA_GROUP = "resource.k8s.io"
DRA = {c for c in RESOURCES if c[0] == DRA_GROUP}
CLAIMS: Coll = (DRA_GROUP, "resourceclaims")


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


def status_body(code: int, reason: str, message: str) -> dict[str, Any]:
    ok = 200 <= code < 300
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if ok else "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


@dataclass
class Fault:
    method: str
    path: re.Pattern[str]
    status: int = 0
    delay: float = 0.0
    action: Callable[[], None] | None = None
    times: int | None = 1  # None: every time
    query: str = ""  # matches only requests whose query string contains this

    def matches(self, method: str, path: str, query: str) -> bool:
        # Never a dry run: the scheduler's dry-run Bindings (learning what the server checks)
        # must not take the fault a test means for a real Binding.
        if "dryRun=" in query:
            return False
        return self.method in ("*", method) and bool(self.path.search(path)) and self.query in query


@dataclass
class Route:
    coll: Coll
    namespace: str | None
    name: str
    sub: str


@dataclass
class Logged:
    method: str
    path: str
    agent: str
    status: int
    query: str = ""


class KubeDouble:
    def __init__(
        self,
        *,
        history: int = 10_000,
        bookmark_every: float = 0.3,
        gone_in_stream: bool = True,
        crds: bool = False,
        binding_preconditions: bool = True,
        graceful_pods: bool = False,
        dra: bool = True,
        token: str = "double-token",
    ) -> None:
        self._cond = threading.Condition()
        # Every call must carry it, as a real server's authentication demands (401 if not).
        self.token = token
        self._rv = 100
        self._objects: dict[Coll, dict[str, dict[str, Any]]] = {c: {} for c in RESOURCES}
        self._history: list[tuple[int, Coll, str, dict[str, Any]]] = []
        self._history_rvs: list[int] = []
        self._max_history = history
        self._compacted = 0  # watches from a version below this get 410
        self._drops = 0
        self.open_watches = 0
        self.bookmark_every = bookmark_every
        self.gone_in_stream = gone_in_stream
        self.installed: set[Coll] = set(CUSTOM) if crds else set()
        self.binding_preconditions = binding_preconditions
        # Bound pods deleted are only marked (deletionTimestamp), as with a kubelet that
        # takes its grace period; ``remove`` then takes them away.
        self.graceful_pods = graceful_pods
        # Whether resource.k8s.io/v1 is served (discovery included); False: 404, as v1.20.
        self.dra = dra
        self.faults: list[Fault] = []
        self.requests: list[Logged] = []
        self._server = _Server(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    # ------------------------------------------------------------------ lifecycle

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> KubeDouble:
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._cond:
            self._drops += 1
            self._cond.notify_all()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> KubeDouble:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def kubeconfig(self, directory: Path, user: str = "") -> str:
        """A kubeconfig for the double; ``user`` (YAML) replaces its bearer token."""
        path = directory / "kubeconfig-double"
        user = user or f"{{token: {self.token}}}"
        path.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters: [{{name: double, cluster: {{server: '{self.url}'}}}}]\n"
            f"users: [{{name: u, user: {user}}}]\n"
            "contexts: [{name: double, context: {cluster: double, user: u}}]\n"
            "current-context: double\n"
        )
        return str(path)

    # ------------------------------------------------------------------ faults

    def fail(
        self, method: str, path: str, status: int, times: int | None = 1, query: str = ""
    ) -> None:
        fault = Fault(method, re.compile(path), status=status, times=times, query=query)
        with self._cond:
            self.faults.append(fault)

    def slow(
        self, method: str, path: str, seconds: float, times: int | None = 1, query: str = ""
    ) -> None:
        fault = Fault(method, re.compile(path), delay=seconds, times=times, query=query)
        with self._cond:
            self.faults.append(fault)

    def before(
        self,
        method: str,
        path: str,
        action: Callable[[], None],
        times: int | None = 1,
        query: str = "",
    ) -> None:
        fault = Fault(method, re.compile(path), action=action, times=times, query=query)
        with self._cond:
            self.faults.append(fault)

    def wait_watches(self, count: int, timeout: float = 5.0) -> None:
        """Wait until at least ``count`` watches are open (so a drop reaches them)."""
        with self._cond:
            if not self._cond.wait_for(lambda: self.open_watches >= count, timeout):
                raise AssertionError(f"{self.open_watches} watches open, expected {count}")

    def drop_watches(self) -> None:
        with self._cond:
            self._drops += 1
            self._cond.notify_all()

    def compact(self) -> None:
        with self._cond:
            self._compacted = self._rv  # watching from now on is fine; from before, 410
            self._history.clear()
            self._history_rvs.clear()

    def install_crds(self) -> None:
        with self._cond:
            self.installed = set(CUSTOM)

    def _take_faults(self, method: str, path: str, query: str) -> list[Fault]:
        with self._cond:
            hits = [f for f in self.faults if f.matches(method, path, query)]
            for fault in hits:
                if fault.times is not None:
                    fault.times -= 1
                    if fault.times <= 0:
                        self.faults.remove(fault)
            return hits

    # ------------------------------------------------------------------ objects

    def put(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace an object directly (status included), as a test sets a scene."""
        coll = _coll_of(obj)
        meta = obj.setdefault("metadata", {})
        with self._cond:
            key = _key(meta.get("namespace"), meta["name"])
            old = self._objects[coll].get(key)
            meta.setdefault("uid", old["metadata"]["uid"] if old else str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", _now())
            return self._store(coll, key, obj, "MODIFIED" if old else "ADDED")

    def get(
        self, plural: str, name: str, namespace: str | None = None, group: str | None = None
    ) -> dict[str, Any] | None:
        """``group`` None: the first group with that plural (kgpu.io's workspaces)."""
        coll = next(c for c in RESOURCES if c[1] == plural and group in (None, c[0]))
        with self._cond:
            found = self._objects[coll].get(_key(namespace, name))
            return copy.deepcopy(found) if found else None

    def objects(self, plural: str) -> list[dict[str, Any]]:
        coll = next(c for c in RESOURCES if c[1] == plural)
        with self._cond:
            return copy.deepcopy(list(self._objects[coll].values()))

    def bound(self) -> dict[str, str]:
        """Each bound pod's name and its node."""
        return {
            p["metadata"]["name"]: p["spec"]["nodeName"]
            for p in self.objects("pods")
            if p["spec"].get("nodeName")
        }

    def remove(self, plural: str, name: str, namespace: str | None = None) -> None:
        coll = next(c for c in RESOURCES if c[1] == plural)
        with self._cond:
            self._delete(coll, _key(namespace, name))

    def _store(self, coll: Coll, key: str, obj: dict[str, Any], kind: str) -> dict[str, Any]:
        self._rv += 1
        _, kind_name, api_version = RESOURCES[coll]
        obj["kind"], obj["apiVersion"] = kind_name, api_version
        obj["metadata"]["resourceVersion"] = str(self._rv)
        self._objects[coll][key] = obj
        self._record(coll, kind, obj)
        return copy.deepcopy(obj)

    def _terminate(self, key: str, pod: dict[str, Any]) -> dict[str, Any]:
        """A bound pod's graceful deletion: marked, and gone only once its kubelet says so
        (``remove``); until then it still runs, and holds what it held."""
        if pod["metadata"].get("deletionTimestamp"):
            return copy.deepcopy(pod)
        marked = copy.deepcopy(pod)
        marked["metadata"]["deletionTimestamp"] = _now()
        marked["metadata"]["deletionGracePeriodSeconds"] = 30
        return self._store(("", "pods"), key, marked, "MODIFIED")

    def _delete(self, coll: Coll, key: str) -> dict[str, Any]:
        obj = self._objects[coll].pop(key, None)
        if obj is None:
            raise ApiError(404, "NotFound", f'{coll[1]} "{key}" not found')
        self._rv += 1
        obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self._rv)}}
        self._record(coll, "DELETED", obj)
        return copy.deepcopy(obj)

    def _record(self, coll: Coll, kind: str, obj: dict[str, Any]) -> None:
        self._history.append((self._rv, coll, kind, copy.deepcopy(obj)))
        self._history_rvs.append(self._rv)
        if len(self._history) > self._max_history:
            dropped = len(self._history) - self._max_history
            self._compacted = self._history_rvs[dropped - 1] + 1
            del self._history[:dropped]
            del self._history_rvs[:dropped]
        self._cond.notify_all()

    # ------------------------------------------------------------------ the API

    def handle(self, method: str, route: Route, query: dict[str, str], body: Any) -> Any:
        """One non-watch request: the answer's (code, body)."""
        coll, ns, name, sub = route.coll, route.namespace, route.name, route.sub
        if (coll in OPTIONAL and coll not in self.installed) or (coll in DRA and not self.dra):
            raise ApiError(404, "NotFound", "404 page not found")
        namespaced = RESOURCES[coll][0]
        with self._cond:
            objects = self._objects[coll]
            if not name:
                if method == "GET":
                    items = [
                        o
                        for o in objects.values()
                        if ns is None or o["metadata"].get("namespace") == ns
                    ]
                    kind = RESOURCES[coll][1] + "List"
                    return 200, {
                        "kind": kind,
                        "apiVersion": RESOURCES[coll][2],
                        "metadata": {"resourceVersion": str(self._rv)},
                        "items": items,
                    }
                if method == "POST":
                    return 201, self._create(coll, ns if namespaced else None, body)
                raise ApiError(405, "MethodNotAllowed", method)
            key = _key(ns if namespaced else None, name)
            if sub == "binding" and method == "POST":
                return 201, self._bind(key, body, query.get("dryRun") == "All")
            if sub == "eviction" and method == "POST" and coll == ("", "pods"):
                return 201, evict(self, key, body)
            current = objects.get(key)
            if current is None:
                raise ApiError(404, "NotFound", f'{coll[1]} "{name}" not found')
            if method == "GET":
                return 200, current
            if method == "DELETE":
                if coll == ("", "pods") and self.graceful_pods and current["spec"].get("nodeName"):
                    return 200, self._terminate(key, current)
                if current["metadata"].get("finalizers"):
                    return 200, self._mark_deleted(coll, key, current)
                return 200, self._delete(coll, key)
            if method == "PATCH":
                return 200, self._patch(coll, key, current, body, sub)
            if method == "PUT":
                return 200, self._replace(coll, key, current, body, sub)
            raise ApiError(405, "MethodNotAllowed", method)

    def _create(self, coll: Coll, ns: str | None, body: dict[str, Any]) -> dict[str, Any]:
        meta = body.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        if not meta.get("name"):
            raise ApiError(422, "Invalid", "metadata.name: Required value")
        if ns is not None:
            meta["namespace"] = ns
        key = _key(ns, meta["name"])
        if key in self._objects[coll]:
            raise ApiError(409, "AlreadyExists", f'{coll[1]} "{meta["name"]}" already exists')
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = _now()
        if coll == ("", "pods"):
            body.setdefault("spec", {}).setdefault("schedulerName", "default-scheduler")
            body.setdefault("status", {}).setdefault("phase", "Pending")
        return self._store(coll, key, body, "ADDED")

    def _patch(
        self, coll: Coll, key: str, current: dict[str, Any], patch: Any, sub: str
    ) -> dict[str, Any]:
        meta = patch.get("metadata") or {} if isinstance(patch, dict) else {}
        if meta.get("uid") and meta["uid"] != current["metadata"]["uid"]:
            raise ApiError(409, "Conflict", "Precondition failed: UID in precondition")
        version = meta.get("resourceVersion")
        if version and version != current["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", "the object has been modified")
        if sub == "status":
            patch = {"status": patch.get("status")}
        merged = merge_patch(copy.deepcopy(current), patch)
        merged["metadata"]["uid"] = current["metadata"]["uid"]
        return self._updated(coll, key, current, merged)

    def _replace(
        self, coll: Coll, key: str, current: dict[str, Any], body: dict[str, Any], sub: str
    ) -> dict[str, Any]:
        version = body.get("metadata", {}).get("resourceVersion")
        if version and version != current["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", "the object has been modified")
        fresh = copy.deepcopy(current)
        if sub == "status":
            if coll == CLAIMS:
                _check_claim_status(current.get("status") or {}, body.get("status") or {})
            fresh["status"] = body.get("status")
        else:
            fresh = {
                **body,
                "metadata": {**body.get("metadata", {}), "uid": current["metadata"]["uid"]},
            }
            # As the real server: with a status subresource, a PUT of the object leaves
            # its status as it was.
            fresh.pop("status", None)
            if "status" in current:
                fresh["status"] = copy.deepcopy(current["status"])
        return self._updated(coll, key, current, fresh)

    def _updated(
        self, coll: Coll, key: str, current: dict[str, Any], fresh: dict[str, Any]
    ) -> dict[str, Any]:
        """Store an update, with the API server's rules for finalizers: none may be added
        to an object being deleted (422), the deletion mark cannot be changed, and an object
        being deleted goes once its last finalizer is removed."""
        before, after = current["metadata"], fresh["metadata"]
        marked = before.get("deletionTimestamp")
        for field in ("deletionTimestamp", "deletionGracePeriodSeconds"):
            after.pop(field, None)
            if field in before:
                after[field] = before[field]
        had = before.get("finalizers") or []
        if marked and any(f not in had for f in after.get("finalizers") or []):
            raise ApiError(
                422,
                "Invalid",
                "metadata.finalizers: Forbidden: no new finalizers can be added if the object "
                "is being deleted",
            )
        stored = self._store(coll, key, fresh, "MODIFIED")
        if marked and had and not after.get("finalizers"):  # the last one went
            self._delete(coll, key)
        return stored

    def _mark_deleted(self, coll: Coll, key: str, current: dict[str, Any]) -> dict[str, Any]:
        """A DELETE of an object with finalizers: marked, and gone when the last goes."""
        if current["metadata"].get("deletionTimestamp"):
            return copy.deepcopy(current)
        marked = copy.deepcopy(current)
        marked["metadata"]["deletionTimestamp"] = _now()
        marked["metadata"]["deletionGracePeriodSeconds"] = 0
        return self._store(coll, key, marked, "MODIFIED")

    def _bind(self, key: str, body: dict[str, Any], dry_run: bool) -> dict[str, Any]:
        """As kube-apiserver's BindingREST: preconditions first (v1.23+), then the pod must
        be unbound; the node is set and the Binding's annotations merged in, in one write."""
        pods = self._objects[("", "pods")]
        pod = pods.get(key)
        if pod is None:
            raise ApiError(404, "NotFound", f'pods "{key}" not found')
        meta = body.get("metadata") or {}
        for field, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
            want, have = meta.get(field), pod["metadata"][field]
            if self.binding_preconditions and want and want != have:
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on pods "{key}": Precondition failed: '
                    f"{label} in precondition: {want}, {label} in object meta: {have}",
                )
        node = pod.get("spec", {}).get("nodeName")
        if node:
            raise ApiError(409, "Conflict", f'pod {key} is already assigned to node "{node}"')
        if dry_run:
            return status_body(201, "", "")
        bound = copy.deepcopy(pod)
        bound["spec"]["nodeName"] = body["target"]["name"]
        notes = meta.get("annotations") or {}
        if notes:
            had = pod["metadata"].get("annotations") or {}
            bound["metadata"]["annotations"] = {**had, **notes}
        self._store(("", "pods"), key, bound, "MODIFIED")
        return status_body(201, "", "")

    # ------------------------------------------------------------------ watching

    def watch(self, handler: BaseHTTPRequestHandler, route: Route, query: dict[str, str]) -> None:
        coll, ns = route.coll, route.namespace
        if (coll in OPTIONAL and coll not in self.installed) or (coll in DRA and not self.dra):
            raise ApiError(404, "NotFound", "404 page not found")
        timeout = float(query.get("timeoutSeconds") or 1800)
        bookmarks = query.get("allowWatchBookmarks") == "true"
        start = query.get("resourceVersion") or "0"
        with self._cond:
            since = int(start)
            drops = self._drops
            if since and since < self._compacted and not self.gone_in_stream:
                raise ApiError(410, "Expired", f"too old resource version: {since}")
            initial = []
            if not since:  # no version: the current objects first, as ADDED
                since = self._rv
                initial = [("ADDED", copy.deepcopy(o)) for o in self._objects[coll].values()]
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        write = _chunk_writer(handler)
        if since < self._compacted:
            gone = status_body(410, "Expired", f"too old resource version: {since}")
            write({"type": "ERROR", "object": gone})
            write(None)
            return
        for event_type, obj in initial:
            write({"type": event_type, "object": obj})
        with self._cond:
            self.open_watches += 1
            self._cond.notify_all()
        try:
            self._stream(write, handler, coll, ns, since, drops, timeout, bookmarks)
        finally:
            with self._cond:
                self.open_watches -= 1

    def _stream(
        self,
        write: Callable[[dict[str, Any] | None], None],
        handler: BaseHTTPRequestHandler,
        coll: Coll,
        ns: str | None,
        since: int,
        drops: int,
        timeout: float,
        bookmarks: bool,
    ) -> None:
        kind, api_version = RESOURCES[coll][1], RESOURCES[coll][2]
        deadline = time.monotonic() + timeout
        next_bookmark = time.monotonic() + self.bookmark_every
        position = since
        while True:
            with self._cond:
                events, scanned = self._events_after(coll, ns, position)
                if not events and self._drops == drops:
                    wait = min(deadline, next_bookmark) - time.monotonic()
                    self._cond.wait(max(0.0, wait))
                    events, scanned = self._events_after(coll, ns, position)
                dropped = self._drops != drops
            if dropped:
                _cut(handler)
                return
            for event_type, obj in events:
                write({"type": event_type, "object": obj})
            position = scanned
            now = time.monotonic()
            if bookmarks and now >= next_bookmark:
                mark = {
                    "kind": kind,
                    "apiVersion": api_version,
                    "metadata": {"resourceVersion": str(position)},
                }
                write({"type": "BOOKMARK", "object": mark})
                next_bookmark = now + self.bookmark_every
            if now >= deadline:
                write(None)
                return

    def _events_after(
        self, coll: Coll, ns: str | None, position: int
    ) -> tuple[list[tuple[str, dict[str, Any]]], int]:
        start = bisect.bisect_right(self._history_rvs, position)
        events = [
            (kind, obj)
            for _, c, kind, obj in self._history[start:]
            if c == coll and (ns is None or obj["metadata"].get("namespace") == ns)
        ]
        return events, self._rv


# ---------------------------------------------------------------------------- HTTP


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _key(namespace: str | None, name: str) -> str:
    return f"{namespace}/{name}" if namespace else name


def _coll_of(obj: dict[str, Any]) -> Coll:
    group = obj["apiVersion"].rpartition("/")[0] if "/" in obj["apiVersion"] else ""
    return next(
        c for c, (_, kind, _v) in RESOURCES.items() if c[0] == group and kind == obj["kind"]
    )


def parse_route(path: str) -> Route | None:
    parts = [unquote(p) for p in path.strip("/").split("/")]
    if parts[:2] == ["api", "v1"]:
        group, rest = "", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, rest = parts[1], parts[3:]
    else:
        return None
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not rest or (group, rest[0]) not in RESOURCES:
        return None
    return Route(
        (group, rest[0]),
        namespace,
        rest[1] if len(rest) > 1 else "",
        rest[2] if len(rest) > 2 else "",
    )


def _dra_discovery() -> dict[str, Any]:
    """``GET /apis/resource.k8s.io/v1``: what a 1.34 server lists of the group."""
    resources = [
        {"name": plural, "namespaced": namespaced, "kind": kind, "verbs": _VERBS}
        for (group, plural), (namespaced, kind, _) in RESOURCES.items()
        if group == DRA_GROUP
    ]
    resources.append(
        {
            "name": "resourceclaims/status",
            "namespaced": True,
            "kind": "ResourceClaim",
            "verbs": ["get", "patch", "update"],
        }
    )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{DRA_GROUP}/v1",
        "resources": resources,
    }


_VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]


def _check_claim_status(old: dict[str, Any], new: dict[str, Any]) -> None:
    """What kube-apiserver's ResourceClaim status validation refuses (422) and kgpu could
    get wrong: an allocation changed in place, consumers without an allocation, and an
    allocation dropped while consumers remain."""
    before, after = old.get("allocation"), new.get("allocation")
    if before is not None and after is not None and before != after:
        raise ApiError(422, "Invalid", "status.allocation: Invalid value: field is immutable")
    if new.get("reservedFor") and after is None:
        raise ApiError(
            422,
            "Invalid",
            "status.reservedFor: Forbidden: may not be specified when `allocated` is not set",
        )


def _chunk_writer(handler: BaseHTTPRequestHandler) -> Callable[[dict[str, Any] | None], None]:
    def write(event: dict[str, Any] | None) -> None:
        if event is None:
            handler.wfile.write(b"0\r\n\r\n")
        else:
            data = json.dumps(event).encode() + b"\n"
            handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        handler.wfile.flush()

    return write


def _cut(handler: BaseHTTPRequestHandler) -> None:
    """End a chunked answer the way a dropped connection does: half a chunk, then nothing."""
    try:
        handler.wfile.write(b'40\r\n{"type": "MODIF')
        handler.wfile.flush()
        handler.connection.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    handler.close_connection = True


def _handler(double: KubeDouble) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self, method: str) -> None:
            url = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            logged = Logged(method, url.path, self.headers.get("User-Agent", ""), 0, url.query)
            with double._cond:
                double.requests.append(logged)
            try:
                if self.headers.get("Authorization") != f"Bearer {double.token}":
                    raise ApiError(401, "Unauthorized", "Unauthorized")
                for fault in double._take_faults(method, url.path, url.query):
                    if fault.delay:
                        time.sleep(fault.delay)
                    if fault.action is not None:
                        fault.action()
                    if fault.status:
                        raise ApiError(fault.status, "Injected", f"injected {fault.status}")
                if method == "GET" and url.path.rstrip("/") == f"/apis/{DRA_GROUP}/v1":
                    if not double.dra:
                        raise ApiError(404, "NotFound", "404 page not found")
                    logged.status = 200
                    self._answer(200, _dra_discovery())
                    return
                route = parse_route(url.path)
                if route is None:
                    raise ApiError(404, "NotFound", "404 page not found")
                if method == "GET" and query.get("watch") == "true":
                    logged.status = 200
                    double.watch(self, route, query)
                    return
                body = json.loads(raw) if raw else {}
                code, answer = double.handle(method, route, query, body)
            except ApiError as exc:
                code, answer = exc.code, status_body(exc.code, exc.reason, exc.message)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True
                return
            logged.status = code
            self._answer(code, answer)

        def _answer(self, code: int, answer: Any) -> None:
            data = json.dumps(answer).encode()
            try:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_PATCH(self) -> None:
            self._serve("PATCH")

        def do_PUT(self) -> None:
            self._serve("PUT")

        def do_DELETE(self) -> None:
            self._serve("DELETE")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


class _Server(ThreadingHTTPServer):
    request_queue_size = 128
