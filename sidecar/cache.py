"""The in-memory cluster graph the sidecar scores on.

Informer events (Nodes, Pods, GPUTelemetry) mutate columnar numpy state in place under one
lock; :meth:`GraphCache.snapshot` publishes an immutable-by-convention copy
(:class:`Published`) that a request scores on without holding the lock, so every score of one
request sees one consistent cluster. Publishing copies a few arrays and happens only when
something changed (or the published copy is older than ``snapshot_max_age_s``), never per
request.

Allocated resources are the bound pods' requests plus *assumed* pods: pods we scored best and
have not yet seen bound. An assumption expires after ``assume_ttl_s`` (:mod:`sidecar.assumed`)
and is replaced by the real charge when the pod shows up bound, wherever it landed.

Topology: zone, rack and NVLink domain labels become cluster-wide integer ids in the snapshot;
:func:`topology_edges` turns them into graph edges (same NVLink domain, same rack).
"""

from __future__ import annotations

import math
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from dsan.api import telemetry as tele_api
from dsan.api.types import (
    LABEL_GPU_MODEL,
    LABEL_HOURLY_COST,
    RESOURCE_GPU,
    Topology,
    parse_float_label,
)
from dsan.snapshot import MAX_GPUS, ClusterSnapshot, PodSpec
from sidecar.assumed import AssumedPods
from sidecar.config import SidecarConfig
from sidecar.podspec import PodError, parse_quantity, pod_key, podspec_from_pod
from sidecar.telemetry import CHANNELS, BadTelemetry, new_windows

_C = CHANNELS
_TERMINAL = ("Succeeded", "Failed")


@dataclass(slots=True)
class _Charge:
    node: str
    spec: PodSpec
    gpus: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Published:
    """One consistent view: the snapshot plus what requests need to read it fast."""

    snap: ClusterSnapshot
    #: node name -> row of ``snap``; shared between publishes while the node set is unchanged.
    index: Mapping[str, int]
    #: GPU model name -> index into ``snap.gpu_models``.
    models: Mapping[str, int]
    #: Wall time (epoch s) of each node's newest telemetry window; -inf = never.
    telemetry_time: npt.NDArray[np.float64]
    #: Monotonic time of publication.
    at: float
    version: int
    #: Position in the cache's row-change log this snapshot reflects
    #: (:meth:`GraphCache.changed_rows`).
    changes: int = 0
    #: Names ``index`` (row i is ``snap.names[i]``): gRPC clients send rows of this table
    #: instead of names. Changes with the node set; random per process, so a client's table
    #: from before a restart never matches.
    table_epoch: int = 0


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

    # Columns, allocated with spare capacity by _alloc; rows 0..len-1 are live.
    _cpu_cap: npt.NDArray[np.float64]
    _cpu_used: npt.NDArray[np.float64]
    _mem_cap: npt.NDArray[np.float64]
    _mem_used: npt.NDArray[np.float64]
    _gpu_count: npt.NDArray[np.int32]
    _gpu_model: npt.NDArray[np.int32]
    _gpu_free: npt.NDArray[np.int32]
    _zone: npt.NDArray[np.int32]
    _rack: npt.NDArray[np.int32]
    _nvlink: npt.NDArray[np.int32]
    _cost: npt.NDArray[np.float64]
    _pod_count: npt.NDArray[np.int32]
    _tele: npt.NDArray[np.float32]
    _tele_pos: npt.NDArray[np.int64]
    _tele_time: npt.NDArray[np.float64]

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
        self._T = cfg.telemetry_window
        self._names: list[str] = []
        self._index: dict[str, int] = {}
        self._index_pub: dict[str, int] = {}
        #: Last parsed row per node, to skip updates that change nothing we read.
        self._rows: dict[str, tuple[Any, ...]] = {}
        self._nodeset_version = 0
        self._index_pub_version = -1
        self._epoch_base = secrets.randbits(30) << 32
        self._alloc(16)
        self._models: list[str] = []
        self._model_idx: dict[str, int] = {}
        self._models_pub: dict[str, int] = {}
        #: Held by whoever reads a published snapshot (see snapshot()).
        self.scoring_lock = threading.Lock()
        self._topo_ids: tuple[dict[str, int], dict[str, int], dict[str, int]] = ({}, {}, {})
        self._node_pods: dict[str, set[str]] = {}
        self._pods: dict[str, _Charge] = {}
        self._assumed: AssumedPods[_Charge] = AssumedPods(cfg.assume_ttl_s, cfg.assume_max,
                                                         clock)
        self._pending_tele: dict[str, tele_api.GPUTelemetry] = {}
        self._version = 0
        self._tele_version = 0
        #: Bumped when a node's static columns (capacity, model, topology, price) change.
        self._static_version = 0
        self._tele_pub: tuple[int, npt.NDArray[np.float32]] | None = None
        self._tele_in_snap = -1  # telemetry version held by the published snapshot
        self._published: Published | None = None
        #: Row-change log: the row of every column write, in order (a row may repeat), so
        #: per-pod-class score caches recompute only rows changed since they last looked.
        #: ``_changes_base`` is the absolute position of ``_changes[0]`` (the log is trimmed).
        self._changes: list[int] = []
        self._changes_base = 0
        #: Wall time of the last change applied (for the cache-age metric).
        self.last_change_wall = wall()

    # --- storage ---------------------------------------------------------------------------
    def _alloc(self, cap: int) -> None:
        old = getattr(self, "_cap", 0)
        n = len(self._names)

        def grow(name: str, shape: tuple[int, ...], dtype: Any, fill: Any) -> None:
            arr = np.full((cap, *shape), fill, dtype=dtype)
            if old:
                arr[:n] = getattr(self, name)[:n]
            setattr(self, name, arr)

        grow("_cpu_cap", (), np.float64, 0.0)
        grow("_cpu_used", (), np.float64, 0.0)
        grow("_mem_cap", (), np.float64, 0.0)
        grow("_mem_used", (), np.float64, 0.0)
        grow("_gpu_count", (), np.int32, 0)
        grow("_gpu_model", (), np.int32, -1)
        grow("_gpu_free", (MAX_GPUS,), np.int32, 0)
        grow("_zone", (), np.int32, -1)
        grow("_rack", (), np.int32, -1)
        grow("_nvlink", (), np.int32, -1)
        grow("_cost", (), np.float64, 1.0)
        grow("_pod_count", (), np.int32, 0)
        grow("_tele", (self._T, _C), np.float32, 0.0)
        grow("_tele_pos", (), np.int64, 0)
        grow("_tele_time", (), np.float64, -math.inf)
        self._cap = cap

    def _touch(self) -> None:
        self._version += 1
        self.last_change_wall = self._wall()
        if len(self._changes) > 4 * len(self._names) + 4096:
            # Trim the log; a class cache that has not looked since recomputes everything.
            drop = len(self._changes) // 2
            del self._changes[:drop]
            self._changes_base += drop

    def _topo_id(self, level: int, value: str | None) -> int:
        if value is None:
            return -1
        ids = self._topo_ids[level]
        return ids.setdefault(value, len(ids))

    def _model_id(self, model: str | None) -> int:
        if not model:
            return -1
        if model not in self._model_idx:
            self._model_idx[model] = len(self._models)
            self._models.append(model)
            self._models_pub = dict(self._model_idx)
        return self._model_idx[model]

    # --- nodes -------------------------------------------------------------------------------
    def upsert_node(self, obj: Mapping[str, Any]) -> None:
        try:
            row = self._parse_node(obj)
        except (PodError, KeyError, TypeError, ValueError, AttributeError):
            self.stats.bad_objects["node"] += 1
            return
        name = row[0]
        with self._lock:
            i = self._index.get(name)
            old = self._rows.get(name)
            if i is not None and old == row:
                return  # a heartbeat or status-only update: nothing we read changed
            self._rows[name] = row
            self._static_version += 1
            if i is not None and old is not None and old[1:4] != row[1:4]:
                # Capacity changed under a live row. Scorers that cache per snapshot object
                # (FGD) only diff the used columns, so give them a new snapshot object.
                self._nodeset_version += 1
            if i is None:
                if len(self._names) == self._cap:
                    self._alloc(self._cap * 2)
                i = len(self._names)
                self._names.append(name)
                self._index[name] = i
                self._nodeset_version += 1
                self._tele_pos[i] = 0
                self._tele_time[i] = -math.inf
                self._tele[i] = 0.0
            self._set_row(i, row)
            pending = self._pending_tele.pop(name, None)
            if pending is not None:
                self._apply_telemetry(i, pending)
            self._touch()

    def _parse_node(self, obj: Mapping[str, Any]) -> tuple[Any, ...]:
        meta = obj["metadata"]
        name = str(meta["name"])
        labels = meta.get("labels") or {}
        status = obj.get("status") or {}
        alloc = status.get("allocatable") or status.get("capacity") or {}
        cpu = float(parse_quantity(alloc.get("cpu", 0), f"Node {name} allocatable.cpu")) * 1000
        mem = float(parse_quantity(alloc.get("memory", 0), f"Node {name} allocatable.memory"))
        gpus = int(parse_quantity(alloc.get(RESOURCE_GPU, 0), f"Node {name} allocatable gpu"))
        topo = Topology.from_labels(labels)
        cost = parse_float_label(labels.get(LABEL_HOURLY_COST))
        return (name, cpu, mem / 2**20, min(gpus, MAX_GPUS), labels.get(LABEL_GPU_MODEL), topo,
                1.0 if cost is None else cost)

    def _set_row(self, i: int, row: tuple[Any, ...]) -> None:
        name, cpu, mem, gpus, model, topo, cost = row
        self._changes.append(i)
        self._cpu_cap[i], self._mem_cap[i], self._gpu_count[i] = cpu, mem, gpus
        self._gpu_model[i] = self._model_id(model) if gpus > 0 else -1
        self._zone[i] = self._topo_id(0, topo.zone)
        self._rack[i] = self._topo_id(1, topo.rack)
        self._nvlink[i] = self._topo_id(2, topo.nvlink_domain)
        self._cost[i] = cost
        # Re-charge from scratch: the GPU count may have changed under the node's pods.
        self._cpu_used[i] = self._mem_used[i] = 0.0
        self._pod_count[i] = 0
        self._gpu_free[i] = np.where(np.arange(MAX_GPUS) < gpus, 1000, 0)
        for key in self._node_pods.get(name, ()):
            charge = self._pods.get(key) or self._assumed.get(key)
            if charge is not None:
                self._charge(i, charge)

    def delete_node(self, name: str) -> None:
        with self._lock:
            i = self._index.pop(name, None)
            if i is None:
                return
            last = len(self._names) - 1
            if i != last:  # swap-remove keeps the columns dense
                moved = self._names[last]
                for arr in self._columns():
                    arr[i] = arr[last]
                self._names[i] = moved
                self._index[moved] = i
            self._names.pop()
            self._rows.pop(name, None)
            self._changes.append(i)  # rows moved: the node-set version below resets caches
            self._nodeset_version += 1
            self._tele_version += 1
            self._touch()

    def _columns(self) -> Iterable[npt.NDArray[Any]]:
        return (self._cpu_cap, self._cpu_used, self._mem_cap, self._mem_used, self._gpu_count,
                self._gpu_model, self._gpu_free, self._zone, self._rack, self._nvlink,
                self._cost, self._pod_count, self._tele, self._tele_pos, self._tele_time)

    def replace_nodes(self, objs: Iterable[Mapping[str, Any]]) -> None:
        """A relist: the list is the whole truth, nodes not in it are gone."""
        with self._lock:
            seen = set()
            for obj in objs:
                self.upsert_node(obj)
                seen.add(str((obj.get("metadata") or {}).get("name")))
            for name in [n for n in self._names if n not in seen]:
                self.delete_node(name)

    # --- pods --------------------------------------------------------------------------------
    def _charge(self, i: int, c: _Charge) -> None:
        spec = c.spec
        self._changes.append(i)
        self._cpu_used[i] += spec.cpu_milli
        self._mem_used[i] += spec.mem_mib
        self._pod_count[i] += 1
        if spec.num_gpu == 0 or spec.gpu_milli == 0:
            c.gpus = ()
            return
        # Best fit, as dsan.policies.base.best_fit_gpus, on the live row (no snapshot copy).
        # At most 8 GPUs: Python on a list beats a dozen numpy calls on the request path.
        count = int(self._gpu_count[i])
        free: list[int] = self._gpu_free[i, :count].tolist()
        milli = spec.gpu_milli
        fits = sorted((f, g) for g, f in enumerate(free) if f >= milli)  # (free, slot): stable
        if len(fits) < spec.num_gpu:
            # The cluster bound more than our view allows (a stale view or a device plugin
            # that over-shares): charge the freest GPUs and count it, never go negative.
            self.stats.overcommits += 1
            fits = sorted((-f, g) for g, f in enumerate(free))
        c.gpus = tuple(sorted(g for _, g in fits[: spec.num_gpu]))
        for g in c.gpus:
            free[g] = max(0, free[g] - milli)
        self._gpu_free[i, :count] = free

    def _uncharge(self, c: _Charge) -> None:
        i = self._index.get(c.node)
        if i is None:
            return
        spec = c.spec
        self._changes.append(i)
        self._cpu_used[i] = max(0.0, self._cpu_used[i] - spec.cpu_milli)
        self._mem_used[i] = max(0.0, self._mem_used[i] - spec.mem_mib)
        self._pod_count[i] = max(0, self._pod_count[i] - 1)
        for g in c.gpus:
            if g < self._gpu_count[i]:
                self._gpu_free[i, g] = min(1000, self._gpu_free[i, g] + spec.gpu_milli)

    def _attach(self, key: str, c: _Charge) -> None:
        self._node_pods.setdefault(c.node, set()).add(key)
        i = self._index.get(c.node)
        if i is not None:
            self._charge(i, c)

    def _detach(self, key: str, c: _Charge) -> None:
        self._uncharge(c)
        pods = self._node_pods.get(c.node)
        if pods is not None:
            pods.discard(key)
            if not pods:
                del self._node_pods[c.node]

    def upsert_pod(self, obj: Mapping[str, Any]) -> None:
        try:
            key = pod_key(obj)
            node = (obj.get("spec") or {}).get("nodeName")
            phase = (obj.get("status") or {}).get("phase")
        except AttributeError:
            self.stats.bad_objects["pod"] += 1
            return
        with self._lock:
            old = self._pods.get(key)
            if node and phase not in _TERMINAL and old is not None and old.node == node:
                return  # a status update: requests of a bound pod do not change
            if not node or phase in _TERMINAL:
                if old is not None:
                    self._detach(key, self._pods.pop(key))
                    self._touch()
                return
            try:
                spec = podspec_from_pod(obj, self._model_idx)
            except PodError:
                self.stats.bad_objects["pod"] += 1
                return
            self._drop_assumed(key)
            # A gRPC client that sent no UID was assumed under namespace/name.
            self._drop_assumed(spec.name)
            if old is not None:
                self._detach(key, old)
            charge = _Charge(node=str(node), spec=spec)
            self._pods[key] = charge
            self._attach(key, charge)
            self._touch()

    def delete_pod(self, obj: Mapping[str, Any]) -> None:
        key = pod_key(obj)
        with self._lock:
            old = self._pods.pop(key, None)
            if old is not None:
                self._detach(key, old)
            self._drop_assumed(key)
            meta = obj.get("metadata") or {}
            self._drop_assumed(f"{meta.get('namespace', 'default')}/{meta.get('name', '')}")
            self._touch()

    def replace_pods(self, objs: Iterable[Mapping[str, Any]]) -> None:
        with self._lock:
            seen = set()
            for obj in objs:
                self.upsert_pod(obj)
                seen.add(pod_key(obj))
            for key in [k for k in self._pods if k not in seen]:
                self._detach(key, self._pods.pop(key))
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
            if key in self._pods:
                return  # already bound: the real charge wins
            pub = self._published
            start = self._changes_base + len(self._changes)
            current = (patch_published and pub is not None and pub.version == self._version
                       and pub.index is self._index_pub
                       and self._index_pub_version == self._nodeset_version)
            self._drop_assumed(key)
            self._expire()
            charge = _Charge(node=node, spec=spec)
            for old, evicted in self._assumed.add(key, charge):
                self._detach(old, evicted)
            self._attach(key, charge)
            self._touch()
            if current and start >= self._changes_base:
                assert pub is not None
                self._patch(pub, self._changes[start - self._changes_base:])

    def _patch(self, pub: Published, rows: list[int]) -> None:
        """Copy the allocation columns of ``rows`` into ``pub``'s snapshot; republish it."""
        snap = pub.snap
        if len(rows) <= 4:  # an assumption (and the pod's previous one): scalar writes
            for r in rows:
                snap.cpu_used[r] = self._cpu_used[r]
                snap.mem_used[r] = self._mem_used[r]
                snap.gpu_free[r] = self._gpu_free[r]
                if snap.pod_count is not None:
                    snap.pod_count[r] = self._pod_count[r]
        else:
            idx = np.asarray(rows, dtype=np.int64)
            snap.cpu_used[idx] = self._cpu_used[idx]
            snap.mem_used[idx] = self._mem_used[idx]
            snap.gpu_free[idx] = self._gpu_free[idx]
            if snap.pod_count is not None:
                snap.pod_count[idx] = self._pod_count[idx]
        snap.version = self._version
        self._published = Published(
            snap=snap, index=pub.index, models=pub.models, telemetry_time=pub.telemetry_time,
            at=pub.at, version=self._version,
            changes=self._changes_base + len(self._changes), table_epoch=pub.table_epoch)

    def changed_rows(self, since: int, upto: int) -> list[int] | None:
        """Rows written between change-log positions ``since`` and ``upto`` (from
        :attr:`Published.changes`), with repeats; None if the log no longer reaches back."""
        with self._lock:
            if since < self._changes_base:
                return None
            base = self._changes_base
            return self._changes[since - base: upto - base]

    def _drop_assumed(self, key: str) -> None:
        old = self._assumed.pop(key)
        if old is not None:
            self._detach(key, old)

    def _expire(self) -> None:
        for key, charge in self._assumed.expire():
            self._detach(key, charge)
            self.stats.assumed_expired += 1
            self._touch()

    @property
    def assumed_count(self) -> int:
        return len(self._assumed)

    # --- telemetry ---------------------------------------------------------------------------
    def upsert_telemetry(self, obj: Mapping[str, Any]) -> None:
        tel = tele_api.parse(obj)
        if tel is None:
            self.stats.bad_objects["telemetry"] += 1
            return
        with self._lock:
            i = self._index.get(tel.node_name)
            if i is None:
                self._pending_tele[tel.node_name] = tel
                return
            if self._apply_telemetry(i, tel):
                self._touch()

    def delete_telemetry(self, obj: Mapping[str, Any]) -> None:
        name = str((obj.get("metadata") or {}).get("name", ""))
        with self._lock:
            self._pending_tele.pop(name, None)
            i = self._index.get(name)
            if i is not None:
                self._tele_time[i] = -math.inf  # history kept, but stale from now on
                self._changes.append(i)
                self._tele_version += 1
                self._touch()

    def replace_telemetry(self, objs: Iterable[Mapping[str, Any]]) -> None:
        for obj in objs:
            self.upsert_telemetry(obj)

    def _apply_telemetry(self, i: int, tel: tele_api.GPUTelemetry) -> bool:
        """Append the windows newer than what the node's ring holds; False if none."""
        cpu_frac = self._cpu_used[i] / self._cpu_cap[i] if self._cpu_cap[i] > 0 else 0.0
        mem_frac = self._mem_used[i] / self._mem_cap[i] if self._mem_cap[i] > 0 else 0.0
        try:
            got = new_windows(tel, float(self._tele_time[i]), self._T, cpu_frac, mem_frac,
                              self._cfg.gpu_power_ref_w)
        except BadTelemetry:
            self.stats.bad_objects["telemetry"] += 1
            return False
        if got is None:
            return False
        windows, end = got
        slots = (self._tele_pos[i] + np.arange(len(windows))) % self._T
        self._tele[i, slots] = windows
        self._tele_pos[i] = (self._tele_pos[i] + len(windows)) % self._T
        self._tele_time[i] = end
        self._tele_version += 1
        self._changes.append(i)
        return True

    # --- publishing --------------------------------------------------------------------------
    def snapshot(self) -> Published:
        """The current consistent view; cheap when nothing changed.

        While the node set is unchanged, the published ClusterSnapshot is one object refreshed
        in place, so scorers that cache per snapshot (FGD diffs the snapshot it saw last) stay
        incremental. Hence: hold :attr:`scoring_lock` from this call until done reading.
        """
        now = self._clock()
        with self._lock:
            self._expire()
            pub = self._published
            if (pub is not None and pub.version == self._version
                    and now - pub.at < self._cfg.snapshot_max_age_s):
                return pub
            n = len(self._names)
            if self._index_pub_version != self._nodeset_version:
                self._index_pub = dict(self._index)
                self._index_pub_version = self._nodeset_version
            if self._tele_pub is None or self._tele_pub[0] != self._tele_version \
                    or self._tele_pub[1].shape[0] != n:
                order = (self._tele_pos[:n, None] + np.arange(self._T)[None, :]) % self._T
                tele = np.take_along_axis(self._tele[:n], order[:, :, None], axis=1)
                self._tele_pub = (self._tele_version, tele)
            tele_time = self._tele_time[:n].copy()
            live = self._live_columns(n)
            snap = pub.snap if pub is not None and pub.index is self._index_pub else None
            if snap is None:
                cols: dict[str, Any] = {k: v.copy() for k, v in live.items()}
                snap = ClusterSnapshot(
                    names=list(self._names), gpu_models=list(self._models),
                    telemetry=self._tele_pub[1].copy(), telemetry_age_s=self._ages(tele_time),
                    version=self._version, **cols)
                # Ages alone do not count: stale telemetry is the fallback's business.
                snap.telemetry_version = self._tele_version + self._static_version
            else:
                for k, v in live.items():
                    np.copyto(getattr(snap, k), v)
                if len(snap.gpu_models) != len(self._models):
                    snap.gpu_models[:] = self._models
                assert snap.telemetry is not None and snap.telemetry_age_s is not None
                if self._tele_in_snap != self._tele_pub[0]:
                    np.copyto(snap.telemetry, self._tele_pub[1])
                self._ages(tele_time, out=snap.telemetry_age_s)
                snap.version = self._version
                snap.telemetry_version = self._tele_version + self._static_version
            self._tele_in_snap = self._tele_pub[0]
            pub = Published(snap=snap, index=self._index_pub, models=self._models_pub,
                            telemetry_time=tele_time, at=now, version=self._version,
                            changes=self._changes_base + len(self._changes),
                            table_epoch=self._epoch_base + self._index_pub_version)
            self._published = pub
            self.stats.publishes += 1
            return pub

    def _ages(self, tele_time: npt.NDArray[np.float64],
              out: npt.NDArray[np.float64] | None = None) -> npt.NDArray[np.float64]:
        """Telemetry ages on a coarse clock: wall time rounded down to a multiple of
        ``snapshot_max_age_s``, so republishes between two grid points (informer events)
        leave every age as it was, and per-node caches that read ages (DSAN's logits) stay
        valid. Ages read at most one step young, the bound the republish interval already
        set; telemetry sampled after the grid point reads 0, never negative."""
        step = self._cfg.snapshot_max_age_s
        grid = math.floor(self._wall() / step) * step
        ages = np.subtract(grid, tele_time, out=out)
        return np.maximum(ages, 0.0, out=ages)

    def _live_columns(self, n: int) -> dict[str, npt.NDArray[Any]]:
        return {"cpu_cap": self._cpu_cap[:n], "cpu_used": self._cpu_used[:n],
                "mem_cap": self._mem_cap[:n], "mem_used": self._mem_used[:n],
                "gpu_count": self._gpu_count[:n], "gpu_model": self._gpu_model[:n],
                "gpu_free": self._gpu_free[:n], "zone": self._zone[:n], "rack": self._rack[:n],
                "nvlink": self._nvlink[:n], "hourly_cost": self._cost[:n],
                "pod_count": self._pod_count[:n]}

    @property
    def models(self) -> Mapping[str, int]:
        """GPU model name -> index; replaced, never mutated, when a model appears."""
        return self._models_pub

    def __len__(self) -> int:
        return len(self._names)
