"""The Workspace controller inside ``kgpu run``: when to reconcile which Workspace.

:class:`kgpu.kube.workspaces.controller.WorkspaceController` does one pass over one
Workspace; this module decides when passes happen, on one thread of its own:

- On a change: an informer caches Workspaces (and, with ``kaito``, a second one KAITO's
  ``kaito.sh`` Workspaces; each optional: a cluster without the CRD reads as
  none, and is looked at again every 30 s). A Workspace is queued when it appears, and
  when anything but its ``metadata`` and ``status`` changed; so the controller's own status
  patch does not set off another pass, while raising ``inference.replicas`` does at once.
- On the controller's requeue: a pass says when to look again (30 s when no node group
  fits, 10 s while replicas are not ready); a pass that asks for nothing is repeated every
  ``resync_s`` all the same, so a workload that stops being ready shows in the conditions.
- After an error of the API server (or a bug): the same Workspace again after an
  exponential back-off of its own (:class:`kgpu.kube.api.backoff.Backoff`), while the others go
  on as scheduled.
- Only on the leader, and only once the Node cache has listed (otherwise an empty cache
  would read as "no node group fits"). A replica that becomes leader queues every
  Workspace, since the one before it may have left some half-done.

The queue holds each Workspace once, due at the earliest time anything asked for, so a
burst of changes costs one pass.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from kgpu.kube.api.backoff import Backoff
from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.errors import KubeError
from kgpu.kube.api.informer import Informer
from kgpu.kube.api.resource_types import KAITO_WORKSPACES, WORKSPACES, object_key
from kgpu.kube.workspaces.controller import WorkspaceController
from kgpu.kube.workspaces.placement_check import DEFAULT_GROUP_PROFILE

log = logging.getLogger(__name__)

KAITO_PREFIX: Final = "kaito.sh:"


@dataclass(frozen=True, slots=True)
class WorkspaceRunOptions:
    profile: str = DEFAULT_GROUP_PROFILE  # the node-group profile (kgpu/profiles/workspaces.yaml)
    resync_s: float = 300.0  # the longest a Workspace goes without a pass
    backoff_initial: float = 1.0
    backoff_max: float = 60.0
    idle_wait: float = 1.0  # how often a replica that does not lead asks again
    # KAITO's kaito.sh Workspaces too (`kgpu run --kaito-workspaces`): a second, optional
    # informer; those KAITO's own controller holds (its finalizer) are left to it.
    kaito: bool = False


def fingerprint(obj: Mapping[str, Any]) -> str:
    """What a pass depends on: everything but metadata and status (and whether a status is
    there at all, so that a lost one is written again)."""
    body = {k: v for k, v in obj.items() if k not in ("metadata", "status", "kind", "apiVersion")}
    body["hasStatus"] = bool(obj.get("status"))
    return json.dumps(body, sort_keys=True, default=str)


class WorkspaceRunner:
    """Reconciles Workspaces on change, on requeue and after back-off (module docstring).

    ``ready``: whether to work now (leading, and the Node cache listed).
    ``nodes``: the Nodes a Workspace without a group is placed on.
    """

    def __init__(
        self,
        client: KubeClient,
        options: WorkspaceRunOptions,
        *,
        ready: Callable[[], bool],
        nodes: Callable[[], Sequence[Mapping[str, Any]]] | None = None,
        watch_seconds: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.options = options
        self.ready = ready
        self.clock = clock
        self.controller = WorkspaceController(client, profile=options.profile, nodes=nodes)
        self.informer = Informer(
            client, WORKSPACES, on_change=self._changed, optional=True, watch_seconds=watch_seconds
        )
        # Keys of KAITO's Workspaces carry KAITO_PREFIX, so that a kgpu.io and a kaito.sh
        # Workspace of the same name are two entries of the one queue.
        self.kaito: tuple[WorkspaceController, Informer] | None = None
        if options.kaito:
            self.kaito = (
                WorkspaceController(
                    client, profile=options.profile, nodes=nodes, resource=KAITO_WORKSPACES
                ),
                Informer(
                    client,
                    KAITO_WORKSPACES,
                    on_change=lambda event, obj: self._changed(event, obj, KAITO_PREFIX),
                    optional=True,
                    watch_seconds=watch_seconds,
                ),
            )
        self._cond = threading.Condition()
        self._due: dict[str, float] = {}  # "namespace/name" -> when to reconcile it
        self._seen: dict[str, str] = {}  # "namespace/name" -> fingerprint last queued for
        self._backoff: dict[str, Backoff] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="workspaces", daemon=True)
        # Counts, for logs and tests.
        self.passes = 0
        self.errors = 0

    # ------------------------------------------------------------------ running

    def _informers(self) -> list[Informer]:
        return [self.informer] + ([self.kaito[1]] if self.kaito is not None else [])

    def _source(self, key: str) -> tuple[WorkspaceController, Informer, str]:
        """The controller and informer of a queue key, and the key as "namespace/name"."""
        if self.kaito is not None and key.startswith(KAITO_PREFIX):
            return (*self.kaito, key.removeprefix(KAITO_PREFIX))
        return self.controller, self.informer, key

    def start(self) -> WorkspaceRunner:
        for informer in self._informers():
            informer.start()
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop after the pass in flight (its calls are bounded by the client's timeouts)."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout)
        for informer in self._informers():
            informer.stop()

    def _run(self) -> None:
        leading = False
        while not self._stop.is_set():
            synced = all(i.synced.is_set() for i in self._informers())
            if not (synced and self.ready()):
                leading = False
                self._stop.wait(self.options.idle_wait)
                continue
            if not leading:
                leading = True
                for obj in self.informer.items():
                    self._queue(object_key(obj), self.clock())
                if self.kaito is not None:
                    for obj in self.kaito[1].items():
                        self._queue(KAITO_PREFIX + object_key(obj), self.clock())
            key = self._next()
            if key is not None:
                self._reconcile(key)

    def _next(self) -> str | None:
        """The Workspace due now, or None after waiting (at most ``idle_wait``, so that
        leadership is checked again) for one to fall due."""
        with self._cond:
            if self._stop.is_set():
                return None
            now = self.clock()
            key = min(self._due, key=lambda k: (self._due[k], k), default=None)
            if key is None or self._due[key] > now:
                wait = self.options.idle_wait
                if key is not None:
                    wait = min(wait, self._due[key] - now)
                self._cond.wait(wait)
                return None
            del self._due[key]
            return key

    def _reconcile(self, key: str) -> None:
        controller, informer, plain = self._source(key)
        namespace, _, name = plain.partition("/")
        try:
            requeue = controller.reconcile(namespace, name)
        except Exception as exc:
            # API errors are expected now and then; anything else is a bug, but one
            # Workspace's bug must not stop the others being reconciled.
            self.errors += 1
            backoff = self._backoff.setdefault(
                key, Backoff(self.options.backoff_initial, self.options.backoff_max)
            )
            delay = backoff.next()
            if isinstance(exc, KubeError):
                log.warning("Workspace %s: %s; retrying in %.1fs", key, exc, delay)
            else:
                log.exception("Workspace %s: reconcile failed; retrying in %.1fs", key, delay)
            self._queue(key, self.clock() + delay)
            return
        self.passes += 1
        self._backoff.pop(key, None)
        if informer.get(plain) is None:
            return  # deleted meanwhile: its workload goes with it (owner references)
        after = requeue if requeue is not None else self.options.resync_s
        self._queue(key, self.clock() + after)

    # ------------------------------------------------------------------ changes

    def _changed(self, event: str, obj: dict[str, Any], prefix: str = "") -> None:
        """Called on the informer's thread."""
        key = prefix + object_key(obj)
        with self._cond:
            if event == "DELETED":
                self._due.pop(key, None)
                self._seen.pop(key, None)
                self._backoff.pop(key, None)
                return
            mark = fingerprint(obj)
            if self._seen.get(key) == mark:
                return  # our own status patch, or a relabel: nothing a pass depends on
            self._seen[key] = mark
        self._queue(key, self.clock())

    def _queue(self, key: str, when: float) -> None:
        with self._cond:
            self._due[key] = min(when, self._due.get(key, when))
            self._cond.notify_all()
