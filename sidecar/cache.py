"""The in-memory cluster the sidecar scores on: informer events in, published snapshots out.

Events mutate the columnar :class:`NodeTable` in place under one lock (nodes: static columns;
pods: allocation columns via :mod:`sidecar.allocations`; telemetry: the rings). A request
scores on a :class:`~sidecar.published.Published` copy, republished only when something
changed or it is older than ``snapshot_max_age_s``.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from dsan.api import telemetry as tele_api
from dsan.api.types import (
    ANNOTATION_DESIRED_MEMBERS,
    ANNOTATION_MAX_MEMBERS,
    ANNOTATION_MIN_MEMBERS,
    ANNOTATION_TASK_TYPE,
    parse_member_count,
    parse_task_type,
)
from dsan.core.snapshot import PodSpec
from sidecar.allocations import ENDINGS, Allocations
from sidecar.config import SidecarConfig
from sidecar.nodetable import BadTelemetry, NodeTable, parse_node
from sidecar.podspec import PodSpecMemo, pod_key, pod_name
from sidecar.published import Published, Publisher
from sidecar.victims import PodRecord, record

_TERMINAL = ("Succeeded", "Failed")
#: Bad objects remembered as already logged (then forgotten all at once, and logged again).
_LOGGED_MAX = 10_000
log = logging.getLogger("dsan.sidecar.cache")


class GraphCache:
    """Nodes, pods and telemetry in columnar form, fed by a ClusterView."""

    def __init__(self, cfg: SidecarConfig, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self._cfg = cfg
        self._clock = clock
        self._wall = wall
        self._lock = threading.RLock()
        #: Counters the metrics export (plain ints, read without the lock): malformed
        #: objects skipped by kind, and how assumptions ended (sidecar.allocations.ENDINGS).
        self.bad_objects = {"node": 0, "pod": 0, "telemetry": 0}
        self.assumptions_ended = dict.fromkeys(ENDINGS, 0)
        self._table = NodeTable(cfg.telemetry_window)
        self._alloc = Allocations(self._table, cfg.assume_ttl_s, cfg.assume_max, clock,
                                  self.assumptions_ended)
        self._publisher = Publisher(self._table, cfg.snapshot_max_age_s, wall)
        #: Held by whoever reads a published snapshot (see snapshot()).
        self.scoring_lock = threading.Lock()
        #: Telemetry of nodes not in the table yet, applied when the node appears.
        self._pending_tele: dict[str, tele_api.GPUTelemetry] = {}
        #: Bound pods' specs, parsed once per shape: informers resend a pod on every status
        #: change.
        self._specs = PodSpecMemo()
        #: Pods seen pending for cfg.scheduler_name, by UID and by namespace/name (a gRPC
        #: caller may send either), with the resourceVersion last seen ("" if none): the only
        #: pods a score may assume.
        self._ours: dict[str, str] = {}
        #: ``_ours`` as it was when a relist of the pods began (empty otherwise).
        self._ours_before_relist: dict[str, str] = {}
        #: Called with (namespace, name, uid, node) when one of ``_ours`` is seen bound (on
        #: the informer's thread: it must not block).
        self.on_bound: Callable[[str, str, str, str], None] | None = None
        #: Called with (key, namespace/name) when a pod is first seen pending for our
        #: scheduler (on the informer's thread, this cache's lock held: it may assume).
        self.on_pending: Callable[[str, str], None] | None = None
        #: Called with (namespace, name, uid, task type, minimum, maximum) on every event of
        #: a live workload owner of our scheduler that carries dsan.io/max-members and no
        #: desired count yet (on the informer's thread: it must not block).
        self.on_owner: Callable[[str, str, str, str, int, int], None] | None = None
        self._version = 0
        #: Wall time of the last change applied (for the cache-age metric).
        self.last_change_wall = wall()
        #: (kind, namespace/name, resourceVersion) of bad objects logged: a relist delivers
        #: them again, counted but not logged again.
        self._logged: set[tuple[str, str, str]] = set()

    def _bad(self, kind: str, obj: Any, exc: BaseException) -> None:
        """Count a malformed object and log it once per resourceVersion; it is skipped."""
        self.bad_objects[kind] += 1
        ident, rv = _ident(obj)
        key = (kind, ident, rv)
        if key in self._logged:
            return
        if len(self._logged) >= _LOGGED_MAX:
            self._logged.clear()
        self._logged.add(key)
        log.warning("skipping malformed %s %s (resourceVersion %s): %s", kind, ident,
                    rv or "?", exc)

    def _touch(self) -> None:
        self._version += 1
        self.last_change_wall = self._wall()

    def upsert_node(self, obj: Mapping[str, Any]) -> None:
        try:
            row = parse_node(obj)
        except Exception as exc:  # any malformed Node: counted, logged once, skipped
            self._bad("node", obj, exc)
            return
        name = row[0]
        with self._lock:
            i = self._table.upsert(row)
            if i is None:
                return
            self._alloc.recharge(i, name)
            pending = self._pending_tele.pop(name, None)
            if pending is not None:
                self._apply_telemetry(i, pending)
            self._touch()

    def delete_node(self, name: str) -> None:
        with self._lock:
            if self._table.remove(name):
                self._touch()

    def delete_node_obj(self, obj: Mapping[str, Any]) -> None:
        """A DELETED event's Node; one without a name is counted as bad."""
        name = _name(obj)
        if name is None:
            self._bad("node", obj, ValueError("deleted Node without metadata.name"))
            return
        self.delete_node(name)

    def replace_nodes(self, objs: Iterable[Mapping[str, Any]]) -> None:
        """A relist: nodes not in it are gone; a malformed one keeps its last good row."""
        with self._lock:
            seen = set()
            for obj in objs:
                self.upsert_node(obj)
                name = _name(obj)
                if name is not None:
                    seen.add(name)
            for name in [n for n in self._table.names if n not in seen]:
                self.delete_node(name)

    def upsert_pod(self, obj: Mapping[str, Any]) -> None:
        try:
            self._upsert_pod(obj)
        except Exception as exc:  # any malformed Pod: counted, logged once, skipped
            self._bad("pod", obj, exc)

    def _upsert_pod(self, obj: Mapping[str, Any]) -> None:
        key = pod_key(obj)
        meta = obj.get("metadata") or {}
        alias = pod_name(meta)
        spec = obj.get("spec") or {}
        node = spec.get("nodeName")
        phase = (obj.get("status") or {}).get("phase")
        rv = str(meta.get("resourceVersion") or "")
        if (self.on_owner is not None and phase not in _TERMINAL
                and spec.get("schedulerName") == self._cfg.scheduler_name):
            self._owner(meta)
        with self._lock:
            pending = not node and phase not in _TERMINAL
            last_rv = self._ours.get(key, self._ours_before_relist.get(key))
            was_ours = last_rv is not None
            if pending and spec.get("schedulerName") == self._cfg.scheduler_name:
                self._ours[key] = self._ours[alias] = rv
            else:
                self._ours.pop(key, None)
                self._ours.pop(alias, None)
            old = self._alloc.bound.get(key)
            if node and phase not in _TERMINAL and old is not None and old.node == node:
                # Mostly a status update (start time, annotations); an in-place resize
                # changes the requests, and then the charge follows.
                podspec = self._specs.get(obj, self._table.models_pub)
                if podspec == old.spec:
                    old.record = record(obj, str(node), old.spec)
                    return
            if not node or phase in _TERMINAL:
                # An event that did not bind an assumed pod ends the assumption; a relist that
                # delivers the pending pod as it was is no such event.
                dropped = False
                if not (rv and key in self._ours and rv == last_rv):
                    dropped = self._alloc.drop_assumed(key, "informer_event")
                    dropped |= self._alloc.drop_assumed(alias, "informer_event")
                if self._alloc.unbind(key) or dropped:
                    self._touch()
                if key in self._ours and not was_ours and self.on_pending is not None:
                    self.on_pending(key, alias)
                return
            podspec = self._specs.get(obj, self._table.models_pub)
            self._alloc.bind(key, str(node), podspec, record(obj, str(node), podspec))
            self._touch()
        if was_ours and self.on_bound is not None:  # the dsan-scheduler placed it
            self.on_bound(str(meta.get("namespace", "default")), str(meta.get("name", "")),
                          str(meta.get("uid") or ""), str(node))

    def _owner(self, meta: Mapping[str, Any]) -> None:
        ann = meta.get("annotations")
        if not isinstance(ann, Mapping):
            return
        top = parse_member_count(ann.get(ANNOTATION_MAX_MEMBERS))
        if top is None or ANNOTATION_DESIRED_MEMBERS in ann or self.on_owner is None:
            return
        base = parse_member_count(ann.get(ANNOTATION_MIN_MEMBERS)) or 0
        if base <= top:  # an owner whose minimum passes its maximum is granted nothing
            self.on_owner(str(meta.get("namespace", "default")), str(meta.get("name", "")),
                          str(meta.get("uid") or ""),
                          parse_task_type(ann.get(ANNOTATION_TASK_TYPE)), base, top)

    def delete_pod(self, obj: Mapping[str, Any]) -> None:
        try:
            key, alias = pod_key(obj), pod_name(obj.get("metadata") or {})
        except Exception as exc:
            self._bad("pod", obj, exc)
            return
        with self._lock:
            self._ours.pop(key, None)
            self._ours.pop(alias, None)
            self._alloc.unbind(key)
            self._alloc.drop_assumed(key, "deleted")
            self._alloc.drop_assumed(alias, "deleted")
            self._touch()

    def replace_pods(self, objs: Iterable[Mapping[str, Any]]) -> None:
        with self._lock:
            # The old set tells which pods bound while the watch was down were ours.
            self._ours_before_relist, self._ours = self._ours, {}
            try:
                seen = set()
                for obj in objs:
                    self.upsert_pod(obj)
                    with contextlib.suppress(Exception):  # counted as bad by upsert_pod
                        seen.add(pod_key(obj))
                for key in [k for k in self._alloc.bound if k not in seen]:
                    self._alloc.unbind(key)
                # Every assumed pod is one of ours pending (may_assume); one no longer so
                # after the relist was deleted (or finished) while the watch was down.
                for key in [k for k in self._alloc.assumed_keys() if k not in self._ours]:
                    self._alloc.drop_assumed(key, "deleted")
                self._touch()
            finally:
                self._ours_before_relist = {}

    @property
    def scheduler_name(self) -> str:
        return self._cfg.scheduler_name

    def may_assume(self, key: str) -> bool:
        """Only a pod seen pending for our scheduler may be charged after a score, so callers
        cannot hold capacity for made-up pods or another scheduler's (one scored before the
        informer showed it is charged from ``on_pending``)."""
        return key in self._ours

    def assume(self, key: str, spec: PodSpec, node: str, patch_published: bool = False) -> None:
        """Charge ``spec`` to ``node`` until the pod is seen bound or the TTL runs out. With
        ``patch_published`` (the caller holds :attr:`scoring_lock`), a current published
        snapshot gets the changed rows too: the next request skips the O(n) republish."""
        with self._lock:
            if key in self._alloc.bound or key in self._alloc.bound_names:
                return  # already bound: the real charge wins
            current = patch_published and self._publisher.is_current(self._version)
            touched = self._alloc.touched
            touched.clear()
            self._alloc.assume(key, spec, node)
            self._touch()
            if current:
                self._publisher.patch(touched, self._version)

    @property
    def assumed_count(self) -> int:
        return self._alloc.assumed_count

    def bound_pods(self, keys: Iterable[str]) -> list[PodRecord | None]:
        """The bound pods of ``keys`` (UIDs) as the informer last showed them; None for a
        key it does not show bound."""
        with self._lock:
            return [None if (c := self._alloc.bound.get(k)) is None else c.record
                    for k in keys]

    def snapshot_with_charge(
        self, keys: Iterable[str], name: str, nodes: Iterable[str] = ()
    ) -> tuple[Published, tuple[str, PodSpec, tuple[int, ...]] | None]:
        """:meth:`snapshot` and, as of the same moment, the (node, requests, GPU slots) a
        pod is charged with (:meth:`Allocations.find`), or None. Hold :attr:`scoring_lock`."""
        with self._lock:
            pub = self.snapshot()
            charge = self._alloc.find(keys, name, nodes)
            return pub, None if charge is None else (charge.node, charge.spec, charge.gpus)

    def upsert_telemetry(self, obj: Mapping[str, Any]) -> None:
        self._upsert_telemetry(obj)

    def _upsert_telemetry(self, obj: Mapping[str, Any]) -> str | None:
        """Apply one GPUTelemetry object; the node it names (``metadata.name`` of a malformed
        one), or None."""
        try:
            tel = tele_api.GPUTelemetry.from_dict(obj)
        except Exception as exc:  # TelemetryError names the field; anything else is a bug
            self._bad("telemetry", obj, exc)
            return _name(obj)
        with self._lock:
            i = self._table.index.get(tel.node_name)
            if i is None:
                self._pending_tele[tel.node_name] = tel
            elif self._apply_telemetry(i, tel, obj):
                self._touch()
        return tel.node_name or None

    def delete_telemetry(self, obj: Mapping[str, Any]) -> None:
        name = _name(obj)
        if name is None:
            self._bad("telemetry", obj, ValueError("deleted GPUTelemetry without metadata.name"))
            return
        with self._lock:
            self._pending_tele.pop(name, None)
            i = self._table.index.get(name)
            if i is not None:
                self._table.forget_telemetry(i)
                self._touch()

    def replace_telemetry(self, objs: Iterable[Mapping[str, Any]]) -> None:
        """A relist: a node whose object is not in it goes stale, as on a deletion; a
        malformed one keeps what its last good object gave."""
        with self._lock:
            seen = set()
            for obj in objs:
                name = self._upsert_telemetry(obj)
                if name is not None:
                    seen.add(name)
            for name in [n for n in self._pending_tele if n not in seen]:
                del self._pending_tele[name]
            table = self._table
            gone = [i for i, n in enumerate(table.names)
                    if n not in seen and math.isfinite(table.tele_time[i])]
            for i in gone:
                table.forget_telemetry(i)
            if gone:
                self._touch()

    def _apply_telemetry(self, i: int, tel: tele_api.GPUTelemetry,
                         obj: Mapping[str, Any] | None = None) -> bool:
        try:
            return self._table.append_telemetry(i, tel, self._cfg.gpu_power_ref_w)
        except BadTelemetry as exc:
            self._bad("telemetry", obj if obj is not None else
                      {"metadata": {"name": tel.node_name}}, exc)
            return False

    def snapshot(self) -> Published:
        """The current consistent view; cheap when nothing changed. It is refreshed in place
        (see :mod:`sidecar.published`): hold :attr:`scoring_lock` until done reading."""
        now = self._clock()
        with self._lock:
            if self._alloc.expire():
                self._touch()
            pub = self._publisher.current
            if (pub is not None and pub.version == self._version
                    and now - pub.at < self._cfg.snapshot_max_age_s):
                return pub
            return self._publisher.publish(now, self._version)

    @property
    def models(self) -> Mapping[str, int]:
        """GPU model name -> index; replaced, never mutated, when a model appears."""
        return self._table.models_pub

    def __len__(self) -> int:
        return len(self._table)


def _name(obj: Any) -> str | None:
    """``metadata.name`` of an object as a string, or None when it has none."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return name if isinstance(name, str) and name else None


def _ident(obj: Any) -> tuple[str, str]:
    """(namespace/name, resourceVersion) of any object for the log, cut short."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(meta, Mapping):
        return "<without metadata>", ""
    name, ns, rv = meta.get("name"), meta.get("namespace"), meta.get("resourceVersion")
    ident = f"{ns}/{name}" if isinstance(ns, str) and ns else str(name)
    return (ident if len(ident) <= 256 else ident[:253] + "..."), str(rv or "")[:32]
