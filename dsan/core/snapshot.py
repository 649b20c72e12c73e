"""The cluster as the scorers see it: one columnar, immutable-by-convention snapshot.

The simulator and the sidecar both build a :class:`ClusterSnapshot`; every scorer, the
featurizer and the model read only this. Columns are numpy arrays indexed by node position,
so scoring N candidates is a handful of vector operations, never a Python loop per node.

Units: CPU in millicores, memory in MiB, GPU share in thousandths of one GPU (openb's
``gpu_milli``). A node has ``gpu_count[i]`` GPUs in slots ``0..gpu_count[i]-1`` of
``gpu_free``; slots past that are absent and hold 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
BOOL = npt.NDArray[np.bool_]

#: Largest number of GPUs on one node that the snapshot can hold.
MAX_GPUS = 8
#: Telemetry channels of a node sample, in this order (see docs/features.md).
TELEMETRY_CHANNELS = ("cpu_util", "mem_util", "gpu_util", "gpu_mem_util", "gpu_power_frac")


@dataclass(frozen=True, slots=True)
class PodSpec:
    """What a pod asks for, in scheduler terms.

    ``gpu_milli`` is the per-GPU share: 1000 for whole-GPU pods, 1..999 for a GPU-sharing pod
    (then ``num_gpu`` is 1), 0 for CPU-only pods. ``gpu_models`` lists allowed model indices
    into :attr:`ClusterSnapshot.gpu_models`; empty means any model.
    """

    name: str
    cpu_milli: float
    mem_mib: float
    num_gpu: int = 0
    gpu_milli: int = 0
    gpu_models: tuple[int, ...] = ()
    priority: int = 0
    task_type: int = 0  # index into dsan.api.types.TASK_TYPES
    toleration_mask: int = 0
    gang_size: int = 1
    image: int = -1  # image id for image-locality; -1 = unknown
    #: Above its workload's minimum (``dsan.io/elastic``): evicting it shrinks the workload.
    elastic: bool = False

    @property
    def gpu_total_milli(self) -> int:
        return self.num_gpu * self.gpu_milli

    @property
    def is_sharing(self) -> bool:
        return 0 < self.gpu_milli < 1000


@dataclass(slots=True)
class ClusterSnapshot:
    """Columnar node state. Arrays have length ``n`` (nodes) unless noted."""

    names: list[str]
    cpu_cap: F64
    cpu_used: F64
    mem_cap: F64
    mem_used: F64
    gpu_count: I32
    #: Model index per node into :attr:`gpu_models`, -1 for CPU-only nodes.
    gpu_model: I32
    #: Free share per GPU slot, shape (n, MAX_GPUS), 0..1000; absent slots hold 0.
    gpu_free: I32
    gpu_models: list[str] = field(default_factory=list)
    #: Topology ids (-1 = unknown): zone, rack and NVLink domain, each unique cluster-wide.
    zone: I32 | None = None
    rack: I32 | None = None
    nvlink: I32 | None = None
    #: Bitmask of NoSchedule taints per node; a pod must tolerate every set bit.
    taint_mask: I64 | None = None
    #: Relative price per node-hour (GPU nodes cost more); 1.0 when unknown.
    hourly_cost: F64 | None = None
    #: Telemetry history, shape (n, T, len(TELEMETRY_CHANNELS)), oldest first, in [0, 1].
    telemetry: npt.NDArray[np.float32] | None = None
    #: Seconds since each node's newest telemetry sample (inf = never seen).
    telemetry_age_s: F64 | None = None
    #: Number of pods running on each node (for business-tier features).
    pod_count: I32 | None = None
    #: Latency-sensitive pods (``dsan.api.types.LATENCY_SENSITIVE_TYPES``) on each node.
    ls_pods: I32 | None = None
    #: Image ids present on each node, for image locality; None = unknown.
    images: list[frozenset[int]] | None = None
    #: Monotonic version: bumped by whoever mutates a snapshot in place (the simulator).
    version: int = 0
    #: Bumped by whoever writes telemetry, static node columns or topology in place (the
    #: sidecar's cache, the scenario simulator): DSAN keys its cached node embeddings on it.
    telemetry_version: int = 0

    def __post_init__(self) -> None:
        n = len(self.names)
        for col in ("cpu_cap", "cpu_used", "mem_cap", "mem_used", "gpu_count", "gpu_model"):
            arr = getattr(self, col)
            if arr.shape != (n,):
                raise ValueError(f"snapshot column {col} has shape {arr.shape}, want ({n},)")
        if self.gpu_free.shape != (n, MAX_GPUS):
            raise ValueError(f"gpu_free has shape {self.gpu_free.shape}, want ({n}, {MAX_GPUS})")

    def __len__(self) -> int:
        return len(self.names)

    @property
    def gpu_present(self) -> BOOL:
        """(n, MAX_GPUS) mask of slots that hold a real GPU."""
        return np.arange(MAX_GPUS)[None, :] < self.gpu_count[:, None]

    def copy(self) -> ClusterSnapshot:
        """A deep copy of the mutable columns (for what-if scoring and tests); the image sets
        are frozen and shared."""
        copies: dict[str, Any] = {f.name: getattr(self, f.name).copy() for f in fields(self)
                                  if isinstance(getattr(self, f.name), np.ndarray | list)}
        return replace(self, **copies)


def empty_snapshot(
    names: list[str],
    cpu_cap: npt.ArrayLike,
    mem_cap: npt.ArrayLike,
    gpu_count: npt.ArrayLike,
    gpu_model: npt.ArrayLike,
    gpu_models: list[str],
) -> ClusterSnapshot:
    """A snapshot of idle nodes: nothing used, every present GPU fully free."""
    n = len(names)
    count = np.asarray(gpu_count, dtype=np.int32)
    if np.any(count < 0) or np.any(count > MAX_GPUS):
        raise ValueError(f"gpu_count must be within 0..{MAX_GPUS}")
    free = np.where(np.arange(MAX_GPUS)[None, :] < count[:, None], 1000, 0).astype(np.int32)
    return ClusterSnapshot(
        names=list(names),
        cpu_cap=np.asarray(cpu_cap, dtype=np.float64).reshape(n),
        cpu_used=np.zeros(n),
        mem_cap=np.asarray(mem_cap, dtype=np.float64).reshape(n),
        mem_used=np.zeros(n),
        gpu_count=count.reshape(n),
        gpu_model=np.asarray(gpu_model, dtype=np.int32).reshape(n),
        gpu_free=free.reshape(n, MAX_GPUS),
        gpu_models=list(gpu_models),
    )


#: The columns a node's placement what-ifs read (FGD's scores, the placement cache): its
#: allocation, and the static columns a relabelled GPU model or a resized node changes (the
#: sidecar rewrites the row and re-charges its pods, so the used columns may come back equal).
PLACEMENT_COLUMNS = ("cpu_used", "gpu_free", "cpu_cap", "gpu_count", "gpu_model")


class AllocationTracker:
    """Which nodes changed since the last :meth:`sync` in any of ``columns``.

    The shared bookkeeping of the incremental caches (FGD's scores, the placement what-ifs,
    DSAN's per-class rows): a cached per-node value remembers the tick at which it was
    computed and is stale once its node's epoch is newer. One placement changes one node, so
    a pod costs O(changed nodes). A column the snapshot does not have (None) is skipped.
    The same snapshot object at the same :attr:`ClusterSnapshot.version` counts as unchanged
    without a look at its columns: whoever writes them in place bumps the version.
    """

    def __init__(self, columns: Sequence[str] = PLACEMENT_COLUMNS) -> None:
        self.columns = tuple(columns)
        self._copies: dict[str, npt.NDArray[np.generic] | None] = {}
        self.epoch = np.zeros(0, dtype=np.int64)
        self.tick = 0
        self._seen: tuple[ClusterSnapshot | None, int] = (None, 0)

    def reset(self, snap: ClusterSnapshot) -> None:
        """Start over on ``snap``: every node counts as computed at tick 1's predecessor."""
        self._copies = {c: _copy(getattr(snap, c)) for c in self.columns}
        self.epoch = np.zeros(len(snap), dtype=np.int64)
        self.tick = 1
        self._seen = (snap, snap.version)

    def sync(self, snap: ClusterSnapshot) -> I64:
        """Record ``snap``'s columns; returns the nodes that changed (their epoch bumped)."""
        seen, version = self._seen
        if seen is snap and version == snap.version:
            return _NO_ROWS
        self._seen = (snap, snap.version)
        if len(snap) != len(self.epoch) or any(
                (getattr(snap, c) is None) != (self._copies.get(c) is None) for c in self.columns):
            self.reset(snap)
            return np.arange(len(snap), dtype=np.int64)
        diff = np.zeros(len(snap), dtype=bool)
        for c in self.columns:
            new, old = getattr(snap, c), self._copies[c]
            if new is not None and old is not None:
                diff |= _rows_differ(new, old) if new.ndim == 2 else new != old
        changed = np.flatnonzero(diff)
        if changed.size:
            self.tick += 1
            self.epoch[changed] = self.tick
            for c in self.columns:
                new, old = getattr(snap, c), self._copies[c]
                if new is not None and old is not None:
                    old[changed] = new[changed]
        return changed

    def stale(self, computed_at: I64, nodes: I64) -> I64:
        """The entries of ``nodes`` whose cached value predates their node's last change."""
        return nodes[computed_at[nodes] < self.epoch[nodes]]


_NO_ROWS = np.zeros(0, dtype=np.int64)
_NO_ROWS.flags.writeable = False


def _copy(a: npt.NDArray[np.generic] | None) -> npt.NDArray[np.generic] | None:
    return None if a is None else a.copy()


def _rows_differ(a: npt.NDArray[np.generic], b: npt.NDArray[np.generic]) -> BOOL:
    """``(a != b).any(axis=1)`` for (n, MAX_GPUS) arrays: a row's 8 bool bytes read as one
    uint64 are non-zero iff any differs, one pass instead of numpy's per-row reduction
    (~10x cheaper at 5,000 nodes, as in :func:`dsan.core.filtering._gpus_that_fit`)."""
    ne = a != b
    if ne.ndim == 2 and ne.shape[1] == 8 and ne.flags.c_contiguous:
        return ne.view(np.uint64)[:, 0] != 0
    return ne.any(axis=1)
