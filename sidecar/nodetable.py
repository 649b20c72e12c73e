"""The node table: one row per node, every column a numpy array, updated in place.

Arrays have spare capacity and a deleted row is swap-removed, so the columns stay dense.
Topology labels become cluster-wide ids, GPU models indices into :attr:`NodeTable.models`,
GPUTelemetry objects windows in a per-node ring.
Nothing here locks: the cache serialises calls.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from dsan.api import telemetry as tele_api
from dsan.api.quantity import parse_quantity
from dsan.api.types import (
    LABEL_GPU_MODEL,
    LABEL_HOURLY_COST,
    RESOURCE_GPU,
    Topology,
    parse_float_label,
)
from dsan.core.snapshot import MAX_GPUS, TELEMETRY_CHANNELS

CHANNELS = len(TELEMETRY_CHANNELS)


class BadTelemetry(ValueError):
    """GPUTelemetry series that cannot be combined (ragged across GPUs); the object is
    skipped."""


#: (cpu_used, mem_used, pod_count, ls_pods, gpu_count, gpu_free): what a charge writes.
Columns = tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.int32],
                npt.NDArray[np.int32], npt.NDArray[np.int32], npt.NDArray[np.int32]]

#: What the table reads of a Node: (name, cpu milli, memory MiB, GPUs, GPU model, topology,
#: hourly cost). Equal tuples mean an update changed nothing the sidecar reads.
NodeRow = tuple[str, float, float, int, str | None, Topology, float]


def parse_node(obj: Mapping[str, Any]) -> NodeRow:
    """A Node object's row; raises on a malformed one (the cache counts and skips it)."""
    meta = obj["metadata"]
    name = str(meta["name"])
    labels = meta.get("labels") or {}
    status = obj.get("status") or {}
    alloc = status.get("allocatable") or status.get("capacity") or {}
    cpu = parse_quantity(alloc.get("cpu", 0), "Node.status.allocatable[cpu]")
    mem = parse_quantity(alloc.get("memory", 0), "Node.status.allocatable[memory]")
    gpus = parse_quantity(alloc.get(RESOURCE_GPU, 0),
                          f"Node.status.allocatable[{RESOURCE_GPU}]")
    if cpu < 0 or mem < 0 or gpus < 0:
        raise ValueError(f"Node {name}: negative allocatable cpu, memory or GPUs")
    topo = Topology.from_labels(labels)
    cost = parse_float_label(labels.get(LABEL_HOURLY_COST))
    # Quantities are at most 2^63-1 (dsan.api.quantity): finite as floats.
    return (name, float(cpu) * 1000, float(mem) / 2**20, min(int(gpus), MAX_GPUS),
            labels.get(LABEL_GPU_MODEL), topo, 1.0 if cost is None else cost)


#: Column -> (shape of a row, dtype, an empty row's value); the telemetry ring ``tele`` is
#: sized per table.
_COLUMNS: dict[str, tuple[tuple[int, ...], Any, Any]] = {
    "cpu_cap": ((), np.float64, 0.0), "cpu_used": ((), np.float64, 0.0),
    "mem_cap": ((), np.float64, 0.0), "mem_used": ((), np.float64, 0.0),
    "gpu_count": ((), np.int32, 0), "gpu_model": ((), np.int32, -1),
    "gpu_free": ((MAX_GPUS,), np.int32, 0), "zone": ((), np.int32, -1),
    "rack": ((), np.int32, -1), "nvlink": ((), np.int32, -1),
    "cost": ((), np.float64, 1.0), "pod_count": ((), np.int32, 0),
    "ls_pods": ((), np.int32, 0),
    "tele_pos": ((), np.int64, 0), "tele_time": ((), np.float64, -math.inf),
}


class NodeTable:
    """Nodes in columnar form, with the versions a publisher needs to know what to copy."""

    cpu_cap: npt.NDArray[np.float64]
    cpu_used: npt.NDArray[np.float64]
    mem_cap: npt.NDArray[np.float64]
    mem_used: npt.NDArray[np.float64]
    gpu_count: npt.NDArray[np.int32]
    gpu_model: npt.NDArray[np.int32]
    gpu_free: npt.NDArray[np.int32]
    zone: npt.NDArray[np.int32]
    rack: npt.NDArray[np.int32]
    nvlink: npt.NDArray[np.int32]
    cost: npt.NDArray[np.float64]
    pod_count: npt.NDArray[np.int32]
    ls_pods: npt.NDArray[np.int32]
    tele: npt.NDArray[np.float32]
    tele_pos: npt.NDArray[np.int64]
    tele_time: npt.NDArray[np.float64]

    def __init__(self, window: int) -> None:
        #: Telemetry windows per node (the ring's length).
        self.window = window
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        #: Last parsed row per node, to skip updates that change nothing we read.
        self._rows: dict[str, NodeRow] = {}
        self.models: list[str] = []
        self._model_idx: dict[str, int] = {}
        #: ``_model_idx`` as handed out: replaced, never mutated, when a model appears.
        self.models_pub: dict[str, int] = {}
        self._topo_ids: tuple[dict[str, int], dict[str, int], dict[str, int]] = ({}, {}, {})
        #: Bumped when rows are added, removed or moved, or a live row's capacity changes.
        self.nodeset_version = 0
        #: Bumped when a node's static columns (capacity, model, topology, price) change.
        self.static_version = 0
        #: Bumped when any node's telemetry (or the rows it is laid out by) changes.
        self.tele_version = 0
        self._cap = 0
        self._alloc(16)

    def __len__(self) -> int:
        return len(self.names)

    def _alloc(self, cap: int) -> None:
        n = len(self.names)
        cols = {**_COLUMNS, "tele": ((self.window, CHANNELS), np.float32, 0.0)}
        for name, (shape, dtype, fill) in cols.items():
            arr = np.full((cap, *shape), fill, dtype=dtype)
            if self._cap:
                arr[:n] = getattr(self, name)[:n]
            setattr(self, name, arr)
        self._cap = cap
        #: The allocation columns a charge writes, rebuilt with the arrays they name.
        self.charge_columns: Columns = (self.cpu_used, self.mem_used, self.pod_count,
                                        self.ls_pods, self.gpu_count, self.gpu_free)

    def live_columns(self, n: int) -> dict[str, npt.NDArray[Any]]:
        """The first ``n`` rows of the columns a ClusterSnapshot has, by its field names."""
        return {("hourly_cost" if k == "cost" else k): getattr(self, k)[:n]
                for k in _COLUMNS if not k.startswith("tele")}

    def _topo_id(self, level: int, value: str | None) -> int:
        if value is None:
            return -1
        ids = self._topo_ids[level]
        return ids.setdefault(value, len(ids))

    def _model_id(self, model: str | None) -> int:
        if not model:
            return -1
        if model not in self._model_idx:
            self._model_idx[model] = len(self.models)
            self.models.append(model)
            self.models_pub = dict(self._model_idx)
        return self._model_idx[model]

    def upsert(self, row: NodeRow) -> int | None:
        """Write a node's static columns (adding its row if new) and empty its allocation
        columns for the caller to re-charge; None when the row is unchanged."""
        name = row[0]
        i = self.index.get(name)
        old = self._rows.get(name)
        if i is not None and old == row:
            return None  # a heartbeat or status-only update: nothing we read changed
        self._rows[name] = row
        self.static_version += 1
        if i is not None and old is not None and old[1:5] != row[1:5]:
            # Capacity or GPU model changed: per-snapshot caches only diff the used columns,
            # so a new snapshot object must reset them.
            self.nodeset_version += 1
        if i is None:
            if len(self.names) == self._cap:
                self._alloc(self._cap * 2)
            i = len(self.names)
            self.names.append(name)
            self.index[name] = i
            self.nodeset_version += 1
            self.tele_pos[i] = 0
            self.tele_time[i] = -math.inf
            self.tele[i] = 0.0
        _, cpu, mem, gpus, model, topo, cost = row
        self.cpu_cap[i], self.mem_cap[i], self.gpu_count[i] = cpu, mem, gpus
        self.gpu_model[i] = self._model_id(model) if gpus > 0 else -1
        self.zone[i] = self._topo_id(0, topo.zone)
        self.rack[i] = self._topo_id(1, topo.rack)
        self.nvlink[i] = self._topo_id(2, topo.nvlink_domain)
        self.cost[i] = cost
        self.cpu_used[i] = self.mem_used[i] = 0.0
        self.pod_count[i] = self.ls_pods[i] = 0
        self.gpu_free[i] = np.where(np.arange(MAX_GPUS) < gpus, 1000, 0)
        return i

    def remove(self, name: str) -> bool:
        """Drop a node's row (the last row moves into it); False if there was none."""
        i = self.index.pop(name, None)
        if i is None:
            return False
        last = len(self.names) - 1
        if i != last:  # swap-remove keeps the columns dense
            moved = self.names[last]
            for col in (*_COLUMNS, "tele"):
                arr = getattr(self, col)
                arr[i] = arr[last]
            self.names[i] = moved
            self.index[moved] = i
        self.names.pop()
        self._rows.pop(name, None)
        self.nodeset_version += 1
        self.tele_version += 1
        return True

    def append_telemetry(self, i: int, tel: tele_api.GPUTelemetry, power_ref_w: float) -> bool:
        """Append the windows of ``tel`` newer than what row ``i``'s ring holds; False if
        none. Each window is averaged over the node's GPUs, in the channel order of
        :data:`dsan.core.snapshot.TELEMETRY_CHANNELS`; the CPU and memory channels are the
        node's requested share (the CR carries GPU series only)."""
        if not tel.available or not tel.statuses:
            return False
        try:
            util = np.array([s.series("util") for s in tel.statuses], dtype=np.float64)
            mem = np.array([s.series("memoryUsedMiB") for s in tel.statuses], dtype=np.float64)
            power = np.array([s.series("powerW") for s in tel.statuses], dtype=np.float64)
        except ValueError as exc:  # GPUs with series of different lengths
            raise BadTelemetry(f"{tel.node_name}: ragged GPU series: {exc}") from None
        length = util.shape[1] if util.ndim == 2 else 0
        if length == 0:
            return False
        end = tel.sampled_at.timestamp()
        last_end = float(self.tele_time[i])
        k = length if not math.isfinite(last_end) else round((end - last_end) / tel.window_seconds)
        k = min(max(k, 0), length, self.window)
        if k == 0:
            return False
        total = {g.uuid: g.memory_total_mib for g in tel.gpus}
        mem_total = np.array([[max(1, total.get(s.uuid, 0))] for s in tel.statuses], np.float64)
        windows = np.empty((k, CHANNELS), dtype=np.float32)
        windows[:, 0] = self.cpu_used[i] / self.cpu_cap[i] if self.cpu_cap[i] > 0 else 0.0
        windows[:, 1] = self.mem_used[i] / self.mem_cap[i] if self.mem_cap[i] > 0 else 0.0
        windows[:, 2] = util[:, -k:].mean(axis=0) / 100.0
        windows[:, 3] = (mem / mem_total)[:, -k:].mean(axis=0) if mem.shape == util.shape else 0.0
        windows[:, 4] = (power[:, -k:].mean(axis=0) / power_ref_w if power.shape == util.shape
                         else 0.0)
        np.clip(windows, 0.0, 1.0, out=windows)
        slots = (self.tele_pos[i] + np.arange(k)) % self.window
        self.tele[i, slots] = windows
        self.tele_pos[i] = (self.tele_pos[i] + k) % self.window
        self.tele_time[i] = end
        self.tele_version += 1
        return True

    def forget_telemetry(self, i: int) -> None:
        """Row ``i``'s telemetry is gone: history kept, but stale from now on."""
        self.tele_time[i] = -math.inf
        self.tele_version += 1

    def ordered_telemetry(self, n: int) -> npt.NDArray[np.float32]:
        """The first ``n`` rings unrolled oldest window first: shape (n, T, channels)."""
        T = self.window
        order = (self.tele_pos[:n, None] + np.arange(T)[None, :]) % T
        return np.take_along_axis(self.tele[:n], order[:, :, None], axis=1)
