"""The residual head's logit when the MLP's last layer is zero and the skip weights sit on a
few features: ``FGD's integer score + w_S . f_S``, from FGD's cached scorer and those columns
(featurize's formulas, pinned by a test), ~3x faster than the featurizer: what makes the
tie-break search affordable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cached_property

import numpy as np
import numpy.typing as npt

from dsan.core.snapshot import ClusterSnapshot, PodSpec
from dsan.features import (
    CPU_SCALE,
    FEATURE_NAMES,
    GPU_SCALE,
    NODE_FEATURES,
    TOP_SHAPES,
    TargetWorkload,
    default_workload,
    node_block,
)
from dsan.features.featurizer import cpu_bound_factor, room_factor, takes_cpu_only
from dsan.features.whatif import Placement, PlacementCache, free_after
from dsan.policies.base import Scorer
from dsan.policies.dsan import quantize_logits
from dsan.policies.fgd import FGDScorer

F64 = npt.NDArray[np.float64]


class _Ctx:
    """Per (pod, candidates) quantities shared by several columns, computed on first use."""

    def __init__(self, pod: PodSpec, snap: ClusterSnapshot, nodes: npt.NDArray[np.int64],
                 target: TargetWorkload, access: npt.NDArray[np.bool_] | None,
                 shapes: Sequence[int], shares: Sequence[int], cache: PlacementCache) -> None:
        self.pod, self.snap, self.nodes, self.target = pod, snap, nodes, target
        self._access, self._cache = access, cache
        # GPU shares whose per-slot counts after placement the columns read
        top = [k for k in shapes if k < min(TOP_SHAPES, len(target.freq))]
        self.shares = [*(int(target.gpu_milli[k]) for k in top), *shares]
        self.free = snap.gpu_free[nodes].astype(np.int64)
        self.present = snap.gpu_present[nodes]
        self.cnt = snap.gpu_count[nodes].astype(np.float64)
        self.gpu_cap = self.cnt * 1000.0
        self.gfree = self.free.sum(1).astype(np.float64)
        self.cpu_cap = snap.cpu_cap[nodes].astype(np.float64)
        self.cpu_free = self.cpu_cap - snap.cpu_used[nodes]
        self.k = pod.num_gpu if pod.gpu_milli > 0 else 0
        self.gtot = float(self.k * pod.gpu_milli)

    @cached_property
    def access(self) -> npt.NDArray[np.bool_]:
        return self.target.access(self.snap) if self._access is None else self._access

    @cached_property
    def after(self) -> npt.NDArray[np.int64]:
        """The placement's free shares, exact for the shares of the requested shapes."""
        return free_after(self.pod, self.snap, self.nodes, self.target, self.access, self.shares)

    @cached_property
    def placement(self) -> Placement:
        """featurize's placement (fragmentation before and after, its GPU choice)."""
        return self._cache.get(self.pod, self.snap, self.nodes)


def _hostable(c: _Ctx, k: int) -> F64:
    """featurize's ``shape{k}_hostable_after``: copies of target shape k that fit after."""
    w = c.target
    if k >= min(TOP_SHAPES, len(w.freq)):
        return np.zeros(len(c.nodes))
    by_cpu = np.floor(np.maximum(c.cpu_free - c.pod.cpu_milli, 0) / max(w.cpu_milli[k], 1.0))
    ng = int(w.num_gpu[k])
    if ng == 0:
        return np.minimum(by_cpu / 8, 1.0)
    per_gpu = np.floor(np.maximum(c.after, 0) / max(int(w.gpu_milli[k]), 1)).sum(1)
    copies = np.minimum(by_cpu, per_gpu // ng) * c.access[k, c.nodes]
    return np.minimum(copies / 8, 1.0)


def _frac(num: F64, den: F64) -> F64:
    return np.divide(num, den, out=np.zeros_like(num, dtype=np.float64), where=den > 0)


def _fitting(c: _Ctx) -> F64:
    return ((c.free >= max(c.pod.gpu_milli, 1)) & c.present).sum(1).astype(np.float64)


#: Allocation-dependent columns this module computes (besides the static node block).
COLUMNS: dict[str, Callable[[_Ctx], F64]] = {
    "cpu_free_before": lambda c: _frac(c.cpu_free, c.cpu_cap),
    "cpu_free_after": lambda c: _frac(c.cpu_free - c.pod.cpu_milli, c.cpu_cap),
    "gpu_free_before": lambda c: _frac(c.gfree, c.gpu_cap),
    "gpu_free_after": lambda c: _frac(c.gfree - c.gtot, c.gpu_cap),
    "bestfit_cpu_left": lambda c: (c.cpu_free - c.pod.cpu_milli) / CPU_SCALE,
    "bestfit_gpu_left": lambda c: (c.gfree - c.gtot) / GPU_SCALE,
    "pod_cpu_of_node": lambda c: _frac(np.full(len(c.nodes), c.pod.cpu_milli), c.cpu_cap),
    "pod_gpu_of_node": lambda c: _frac(np.full(len(c.nodes), c.gtot), c.gpu_cap),
    "full_gpus_before": lambda c: ((c.free == 1000) & c.present).sum(1) / 8.0,
    "full_gpus_after": lambda c: ((c.after == 1000) & c.present).sum(1) / 8.0,
    "partial_gpus_before": lambda c: ((c.free > 0) & (c.free < 1000) & c.present).sum(1) / 8.0,
    "gpu_max_free": lambda c: c.free.max(1) / 1000.0,
    "gpu_min_free": lambda c: np.where(c.present, c.free, 1000).min(1) * (c.cnt > 0) / 1000.0,
    "gpus_fitting": lambda c: _fitting(c) / 8.0,
    "gpus_fitting_spare": lambda c: (_fitting(c) - c.k) / 8.0,
    # the workload-aware fragmentation FGD's integer score truncates (a finer FGD order)
    "frag_before": lambda c: c.placement.frag_before / GPU_SCALE,
    "frag_after": lambda c: c.placement.frag_after / GPU_SCALE,
    "frag_delta": lambda c: (c.placement.frag_after - c.placement.frag_before) / 1000.0,
    "node_idle": lambda c: ((c.snap.cpu_used[c.nodes] == 0) & (c.gfree == c.gpu_cap)).astype(
        np.float64
    ),
    "node_gpu_partly_used": lambda c: ((c.gfree > 0) & (c.gfree < c.gpu_cap)).astype(np.float64),
    # shape 1's room where a 2+ whole-GPU pod meets a cluster that runs out of GPUs first
    "shape1_room_gpu_bound": lambda c: _hostable(c, 1) * room_factor(c.pod, c.snap),
    # node_cpu_per_gpu for a CPU-only pod while the GPU nodes' CPU runs out first
    "cpu_bound_cpu_per_gpu": lambda c: _frac(c.cpu_cap, c.cnt) / CPU_SCALE
    * cpu_bound_factor(c.pod, c.snap),
    **{
        f"shape{k}_hostable_after": (lambda c, k=k: _hostable(c, k))  # type: ignore[misc]
        for k in range(TOP_SHAPES)
    },
}
#: Every feature :class:`LinearFGDScorer` can weight: the static node block and COLUMNS.
SUPPORTED: tuple[str, ...] = tuple(FEATURE_NAMES[i] for i in NODE_FEATURES) + tuple(COLUMNS)


def columns(
    names: Sequence[str],
    pod: PodSpec,
    snap: ClusterSnapshot,
    nodes: npt.NDArray[np.int64],
    static: npt.NDArray[np.float32] | None = None,
    target: TargetWorkload | None = None,
    access: npt.NDArray[np.bool_] | None = None,
    cache: PlacementCache | None = None,
) -> F64:
    """(m, len(names)) columns equal to ``featurize``'s with workload ``target``; ``static``
    (all nodes' node block), ``access`` and ``cache`` may be passed in, kept across calls."""
    nodes = np.asarray(nodes, dtype=np.int64)
    out = np.empty((len(nodes), len(names)))
    target = target or default_workload()
    cache = PlacementCache(target) if cache is None else cache
    ctx: _Ctx | None = None
    shapes = [int(n[5]) for n in names if n.startswith("shape") and n.endswith("_hostable_after")]
    shapes += [1] if "shape1_room_gpu_bound" in names else []
    shares = [1000] if "full_gpus_after" in names else []
    for j, name in enumerate(names):
        i = FEATURE_NAMES.index(name)
        if i < len(NODE_FEATURES):
            blk = static[nodes] if static is not None else node_block(snap, nodes)
            out[:, j] = blk[:, i]
        elif name in COLUMNS:
            ctx = ctx or _Ctx(pod, snap, nodes, target, access, shapes, shares, cache)
            out[:, j] = COLUMNS[name](ctx)
        else:
            raise KeyError(f"{name!r} is not computed by dsan.train.linear (see SUPPORTED)")
    return out


class LinearFGDScorer(Scorer):
    """``FGD integer score + w . f_S``: the zero-MLP residual head, without torch.

    ``weights`` is the head's ``skip`` (every pod), ``gpu_weights`` its ``gpu_skip`` (added
    for GPU pods). GPUs inside the node are FGD's, as DSAN's. ``quantize=False`` returns the
    float64 sum unquantized (diagnostics).
    """

    name = "fgd-linear"

    def __init__(
        self,
        names: Sequence[str],
        weights: npt.ArrayLike,
        gpu_weights: npt.ArrayLike | None = None,
        *,
        target: TargetWorkload | None = None,
        quantize: bool = True,
    ) -> None:
        self.names = list(names)
        self.quantize = quantize
        w = np.asarray(weights, dtype=np.float64)
        g = np.zeros(len(self.names)) if gpu_weights is None else np.asarray(gpu_weights, float)
        for v in (w, g):
            if v.shape != (len(self.names),):
                raise ValueError(f"{len(self.names)} features but weights {v.shape}")
        unknown = [n for n in self.names if n not in SUPPORTED]
        if unknown:
            raise ValueError(f"unsupported features {unknown}; supported: {SUPPORTED}")
        self.fgd = FGDScorer(target or default_workload())
        self._static: npt.NDArray[np.float32] | None = None
        self._static_of: ClusterSnapshot | None = None
        self._access: npt.NDArray[np.bool_] | None = None
        self._cache = PlacementCache(self.fgd.target)
        # per pod class (GPU pod? as the head's 1 - pod_is_cpu_only): non-zero weights, columns
        self._by_class = {
            gpu: ([n for n, x in zip(self.names, v, strict=True) if x != 0.0], v[v != 0.0])
            for gpu, v in ((False, w), (True, w + g))
        }

    def score(
        self, pod: PodSpec, snap: ClusterSnapshot, nodes: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.float64]:
        base = self.fgd.score(pod, snap, nodes)
        active, w = self._by_class[not takes_cpu_only(pod)]
        if not active:
            return base
        if self._static_of is not snap:  # the static block never changes within a run
            self._static = node_block(snap, np.arange(len(snap), dtype=np.int64))
            self._access = self.fgd.target.access(snap)
            self._static_of = snap
        cols = columns(
            active, pod, snap, nodes, self._static, self.fgd.target, self._access, self._cache
        )
        # ties at the DSAN policy's resolution, as in the real model
        out = base + cols @ w
        return quantize_logits(out) if self.quantize else out

    def select_gpus(self, pod: PodSpec, snap: ClusterSnapshot, node: int) -> tuple[int, ...]:
        return self.fgd.select_gpus(pod, snap, node)
