"""A cache of one resource type, kept current by list-then-watch on its own thread.

The cycle, as client-go's reflector runs it:

1. List: the store becomes exactly what the server holds (objects missing from the list
   were deleted while we were not watching, and leave the store).
2. Watch from the list's resourceVersion; apply ADDED, MODIFIED and DELETED in order;
   BOOKMARK events only move the resourceVersion forward, so a later watch can start from
   a recent point even when nothing of ours changed.
3. When the watch ends, however it ends (the server's timeout, a dropped connection, a
   garbled stream), list again, at least as new as the last resourceVersion seen.
   Relisting rather than re-watching costs one list per watch (minutes apart) and repairs
   anything a broken stream lost.
4. When that version is not served (410 Gone: compacted away; or 504 "Too large resource
   version"), list whatever the API server holds now.

Lists are served from the API server's watch cache (resourceVersion "0", or the last
version seen), never read from etcd: a version read from etcd counts every type's writes
and can be ahead of this type's watch cache, which then refuses to watch from it.

Errors back off exponentially (with jitter) and never end the thread; the cache is
``stale`` from a failed list or watch until a list succeeds again. A custom resource
whose CRD is not installed (404) leaves the cache empty and marked ``absent``, counts as
synced, and is looked for again every ``absent_retry`` seconds.

Objects are stored as the dicts the API returned and replaced whole, never mutated, so
readers may keep them after the lock is released.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from kgpu.kube.api.backoff import Backoff
from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.errors import Expired, KubeError, NotFound
from kgpu.kube.api.resource_types import Resource, object_key, resource_version
from kgpu.kube.api.watch_stream import Watch

log = logging.getLogger(__name__)

# (event type, object): called on the informer's thread after the store changed.
OnChange = Callable[[str, dict[str, Any]], None]


class Informer:
    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        *,
        on_change: OnChange | None = None,
        optional: bool = False,
        watch_seconds: int | None = None,
        absent_retry: float = 30.0,
        backoff: Backoff | None = None,
    ) -> None:
        self.client = client
        self.resource = resource
        self.optional = optional
        self.watch_seconds = watch_seconds
        self.absent_retry = absent_retry
        self.on_change = on_change
        self._backoff = backoff or Backoff(initial=0.2, maximum=10.0)
        self._lock = threading.Lock()
        self._store: dict[str, dict[str, Any]] = {}
        self._stop = threading.Event()
        self._watch: Watch | None = None
        self._thread: threading.Thread | None = None
        self.synced = threading.Event()
        self.absent = False
        self.resource_version = ""
        # Counts, for metrics and tests: lists (the first one included) and watches opened.
        self.lists = 0
        self.watches = 0
        self.last_error = ""
        # Since its last list or watch failed, until a list succeeds: what it holds may be
        # out of date (readiness says so; the scheduler goes on with what it has).
        self.stale = False

    # ------------------------------------------------------------------ reading

    def items(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._store.values())

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            return self._store.get(key)

    def __len__(self) -> int:
        with self._lock:
            return len(self._store)

    # ------------------------------------------------------------------ running

    def start(self) -> Informer:
        self._thread = threading.Thread(
            target=self._run, name=f"informer-{self.resource.plural}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        watch = self._watch
        if watch is not None:
            watch.close()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        version = "0"  # whatever the watch cache holds
        while not self._stop.is_set():
            try:
                self._list(version)
                self._backoff.reset()
                self._watch_until_it_ends()
                version = self.resource_version or "0"
            except Expired as exc:
                log.info("%s: %s; listing afresh", self.resource.plural, exc)
                version = "0"
                # Not at once: a server that keeps answering 410 must not be hammered.
                self._stop.wait(self._backoff.next())
            except NotFound as exc:
                if not self.optional:
                    self._failed(exc)
                    continue
                if not self.absent:
                    log.info(
                        "%s: not served (CRD not installed?); retrying every %.0fs",
                        self.resource.plural,
                        self.absent_retry,
                    )
                self._replace([], "")
                self.absent = True
                self.synced.set()
                self._stop.wait(self.absent_retry)
            except KubeError as exc:
                self._failed(exc)
            except Exception:  # a bug must not leave the cache frozen for good
                log.exception("%s: informer failed; listing again", self.resource.plural)
                self._stop.wait(self._backoff.next())

    def _failed(self, exc: KubeError) -> None:
        if self._stop.is_set():
            return
        self.last_error = str(exc)
        self.stale = True
        delay = self._backoff.next()
        log.warning("%s: %s; retrying in %.1fs", self.resource.plural, exc, delay)
        self._stop.wait(delay)

    def _list(self, version: str) -> None:
        listed = self.client.list(self.resource, resource_version=version)
        self.lists += 1
        self.absent = False
        self._replace(listed.items, listed.resource_version)
        self.stale = False
        self.synced.set()

    def _replace(self, items: list[dict[str, Any]], version: str) -> None:
        fresh = {object_key(obj): obj for obj in items}
        with self._lock:
            old = self._store
            self._store = fresh
            self.resource_version = version
        if self.on_change is None:
            return
        for key, obj in old.items():
            if key not in fresh:
                self.on_change("DELETED", obj)
        for key, obj in fresh.items():
            before = old.get(key)
            if before is None:
                self.on_change("ADDED", obj)
            elif resource_version(before) != resource_version(obj):
                self.on_change("MODIFIED", obj)

    def _watch_until_it_ends(self) -> None:
        if self._stop.is_set():
            return
        watch = self.client.watch(
            self.resource, self.resource_version, timeout_seconds=self.watch_seconds
        )
        self._watch = watch
        self.watches += 1
        try:
            for event in watch:
                self._apply(event.type, event.object)
                if self._stop.is_set():
                    break
        except KubeError as exc:
            if isinstance(exc, Expired) or self._stop.is_set():
                raise
            # A dropped or garbled stream: the relist that follows repairs what it lost.
            log.info("%s: watch ended: %s", self.resource.plural, exc)
        finally:
            self._watch = None
            watch.close()

    def _apply(self, kind: str, obj: dict[str, Any]) -> None:
        version = resource_version(obj)
        key = object_key(obj)
        with self._lock:
            if kind in ("ADDED", "MODIFIED"):
                self._store[key] = obj
            elif kind == "DELETED":
                self._store.pop(key, None)
            if version:
                self.resource_version = version
        if kind != "BOOKMARK" and self.on_change is not None:
            self.on_change(kind, obj)
