"""The in-memory cluster graph the sidecar scores on: informer events in, snapshots out.

Informer events (Nodes, Pods, GPUTelemetry) mutate the columnar :class:`NodeTable` in place
under one lock: nodes write its static columns, pods charge its allocation columns
(:mod:`sidecar.allocations`: bound pods plus *assumed* ones, pods we scored best and have not
yet seen bound), telemetry appends to its rings. :meth:`GraphCache.snapshot` publishes an
immutable-by-convention copy (:class:`~sidecar.published.Published`) that a request scores on
without holding the lock, so every score of one request sees one consistent cluster.
Publishing copies a few arrays and happens only when something changed (or the published copy
is older than ``snapshot_max_age_s``), never per request; an assumption's rows are copied
into the current one instead.

Topology: zone, rack and NVLink domain labels become cluster-wide integer ids in the snapshot;
:func:`sidecar.topology.topology_edges` turns them into graph edges.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy.typing as npt

from dsan.api import telemetry as tele_api
from dsan.core.snapshot import PodSpec
from sidecar.allocations import Allocations
from sidecar.config import SidecarConfig
from sidecar.nodetable import NodeTable, parse_node
from sidecar.podspec import PodError, pod_key, podspec_from_pod
from sidecar.published import Published, Publisher
from sidecar.telemetry import BadTelemetry

_TERMINAL = ("Succeeded", "Failed")


@dataclass
class CacheStats:
    """Counters the metrics module exports; plain ints, read without the lock."""

    bad_objects: dict[str, int] = field(default_factory=lambda: {"node": 0, "pod": 0,
                                                                  "telemetry": 0})
    overcommits: int = 0
    assumed_expired: int = 0
    publishes: int = 0


class GraphCache:
    """Nodes, pods and telemetry in columnar form, fed by a ClusterView."""

    def __init__(
        self,
        cfg: SidecarConfig,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._cfg = cfg
        self._clock = clock
        self._wall = wall
        self._lock = threading.RLock()
        self.stats = CacheStats()
        self._table = NodeTable(cfg.telemetry_window)
        self._alloc = Allocations(self._table, cfg.assume_ttl_s, cfg.assume_max, clock,
                                  self.stats)
        self._publisher = Publisher(self._table, cfg.snapshot_max_age_s, wall)
        #: Held by whoever reads a published snapshot (see snapshot()).
        self.scoring_lock = threading.Lock()
        #: Telemetry of nodes not in the table yet, applied when the node appears.
        self._pending_tele: dict[str, tele_api.GPUTelemetry] = {}
        self._version = 0
        #: Wall time of the last change applied (for the cache-age metric).
        self.last_change_wall = wall()

    def _touch(self) -> None:
        self._version += 1
        self.last_change_wall = self._wall()

    # --- nodes -------------------------------------------------------------------------------
    def upsert_node(self, obj: Mapping[str, Any]) -> None:
        try:
            row = parse_node(obj)
        except (PodError, KeyError, TypeError, ValueError, AttributeError):
            self.stats.bad_objects["node"] += 1
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

    def replace_nodes(self, objs: Iterable[Mapping[str, Any]]) -> None:
        """A relist: the list is the whole truth, nodes not in it are gone."""
        with self._lock:
            seen = set()
            for obj in objs:
                self.upsert_node(obj)
                seen.add(str((obj.get("metadata") or {}).get("name")))
            for name in [n for n in self._table.names if n not in seen]:
                self.delete_node(name)

    # --- pods --------------------------------------------------------------------------------
    def upsert_pod(self, obj: Mapping[str, Any]) -> None:
        try:
            key = pod_key(obj)
            node = (obj.get("spec") or {}).get("nodeName")
            phase = (obj.get("status") or {}).get("phase")
        except AttributeError:
            self.stats.bad_objects["pod"] += 1
            return
        with self._lock:
            old = self._alloc.bound.get(key)
            if node and phase not in _TERMINAL and old is not None and old.node == node:
                return  # a status update: requests of a bound pod do not change
            if not node or phase in _TERMINAL:
                if self._alloc.unbind(key):
                    self._touch()
                return
            try:
                spec = podspec_from_pod(obj, self._table.models_pub)
            except PodError:
                self.stats.bad_objects["pod"] += 1
                return
            self._alloc.bind(key, str(node), spec)
            self._touch()

    def delete_pod(self, obj: Mapping[str, Any]) -> None:
        key = pod_key(obj)
        with self._lock:
            self._alloc.unbind(key)
            self._alloc.drop_assumed(key)
            meta = obj.get("metadata") or {}
            self._alloc.drop_assumed(f"{meta.get('namespace', 'default')}/{meta.get('name', '')}")
            self._touch()

    def replace_pods(self, objs: Iterable[Mapping[str, Any]]) -> None:
        with self._lock:
            seen = set()
            for obj in objs:
                self.upsert_pod(obj)
                seen.add(pod_key(obj))
            for key in [k for k in self._alloc.bound if k not in seen]:
                self._alloc.unbind(key)
            self._touch()

    # --- assumed pods ----------------------------------------------------------------------
    def assume(self, key: str, spec: PodSpec, node: str, patch_published: bool = False) -> None:
        """Charge ``spec`` to ``node`` until the pod is seen bound or the TTL runs out.

        ``patch_published``: the caller holds :attr:`scoring_lock` (no request is reading the
        published snapshot), so if that snapshot was current, the few rows this changes are
        written into it as well and it stays current: the next request skips the O(n)
        republish (the scoring engine assumes every winner this way).
        """
        with self._lock:
            if key in self._alloc.bound:
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

    # --- telemetry ---------------------------------------------------------------------------
    def upsert_telemetry(self, obj: Mapping[str, Any]) -> None:
        tel = tele_api.parse(obj)
        if tel is None:
            self.stats.bad_objects["telemetry"] += 1
            return
        with self._lock:
            i = self._table.index.get(tel.node_name)
            if i is None:
                self._pending_tele[tel.node_name] = tel
                return
            if self._apply_telemetry(i, tel):
                self._touch()

    def delete_telemetry(self, obj: Mapping[str, Any]) -> None:
        name = str((obj.get("metadata") or {}).get("name", ""))
        with self._lock:
            self._pending_tele.pop(name, None)
            i = self._table.index.get(name)
            if i is not None:
                self._table.forget_telemetry(i)
                self._touch()

    def replace_telemetry(self, objs: Iterable[Mapping[str, Any]]) -> None:
        for obj in objs:
            self.upsert_telemetry(obj)

    def _apply_telemetry(self, i: int, tel: tele_api.GPUTelemetry) -> bool:
        try:
            return self._table.append_telemetry(i, tel, self._cfg.gpu_power_ref_w)
        except BadTelemetry:
            self.stats.bad_objects["telemetry"] += 1
            return False

    # --- publishing --------------------------------------------------------------------------
    def snapshot(self) -> Published:
        """The current consistent view; cheap when nothing changed.

        While the node set is unchanged, the published ClusterSnapshot is one object refreshed
        in place, so scorers that cache per snapshot (FGD diffs the snapshot it saw last) stay
        incremental. Hence: hold :attr:`scoring_lock` from this call until done reading.
        """
        now = self._clock()
        with self._lock:
            if self._alloc.expire():
                self._touch()
            pub = self._publisher.current
            if (pub is not None and pub.version == self._version
                    and now - pub.at < self._cfg.snapshot_max_age_s):
                return pub
            pub = self._publisher.publish(now, self._version)
            self.stats.publishes += 1
            return pub

    def _live_columns(self, n: int) -> dict[str, npt.NDArray[Any]]:
        """The table's live columns (tests compare published snapshots against them)."""
        return self._table.live_columns(n)

    @property
    def models(self) -> Mapping[str, int]:
        """GPU model name -> index; replaced, never mutated, when a model appears."""
        return self._table.models_pub

    def __len__(self) -> int:
        return len(self._table)
