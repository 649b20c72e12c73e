"""The 128 DSAN features per (pod, node), one implementation for the simulator and the sidecar.

Four groups, in this column order (see docs/features.md, generated from :data:`FEATURES`):

* **base** (24): static node capacity, GPU model one-hot, topology, price;
* **monitoring** (32): per telemetry channel the last, mean, max, min, std and slope of the
  node's last T samples, plus sample age;
* **business** (23): the pod's task type, priority, gang (dependencies) and requests, also
  relative to the node;
* **derived** (49): the hand-written heuristics as signals (LeastAllocated,
  BalancedAllocation, Tetris alignment, DotProd, BestFit leftovers, FGD fragmentation delta)
  and how many target-workload shapes the node could still host, so the network can at worst
  copy the best heuristic; shape 1's room once more for pods asking for 2+ whole GPUs when
  the cluster runs out of GPUs before CPU, and the node's CPU per GPU once more for CPU-only
  pods when the GPU nodes run out of CPU first (the two cluster-wide inputs,
  :func:`room_factor` and :func:`cpu_bound_factor`; the second sits at column 71, among the
  business columns, where the column it replaced was).

The schema (names, units, normalisations, hash) is :mod:`dsan.features.schema`; callers
import both from :mod:`dsan.features`.

Everything is vectorised over the candidate nodes: (m, 8) GPU-slot and (m, S, 8)
slot-by-shape arrays, never a Python loop per node. Fragmentation follows the FGD paper
(Weng et al., ATC'23): for each target-workload shape, a node that can host it wastes the
idle share of every GPU too small for it; a node that cannot wastes all its idle GPU share.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from dsan.api.types import TASK_TYPES
from dsan.core.snapshot import MAX_GPUS, TELEMETRY_CHANNELS, ClusterSnapshot, PodSpec
from dsan.features.schema import (
    CPU_SCALE,
    DEFAULT_T,
    GPU_SCALE,
    MEM_SCALE,
    MODEL_SLOTS,
    N_FEATURES,
    N_NODE_FEATURES,
    TOP_SHAPES,
)
from dsan.features.target import TargetWorkload
from dsan.features.whatif import SLOTS, Placement, PlacementCache, cached_placements, placement

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]


# --- the cluster-wide state two columns are conditioned on: which tie-break helps on openb
# depends on what the cluster runs out of first (docs/results/dsan_openb.md). The featurizer,
# the fast linear scorer and the serving cache all call these, so the simulator and the
# sidecar read the same bit from the same snapshot.
#: The GPU nodes are CPU-bound when their used CPU share exceeds this times their used GPU
#: share (between cpu250, which the tie-break helps, and cpu300, which it harms) ...
CPU_BOUND_RATIO = 1.1
#: ... and is at least this: below it the ratio is the first few pods' order.
CPU_BOUND_MIN_SHARE = 0.1
#: The fewest whole GPUs a pod asks for to get :func:`room_factor`.
MIN_GPUS = 2


def cluster_gpu_bound(snap: ClusterSnapshot) -> bool:
    """True when the cluster's free GPU share is below its free CPU share (compared as cross
    products, so no division rounds); False without GPUs or CPU, and for an empty cluster."""
    gpu_cap = int(snap.gpu_count.sum()) * 1000
    cpu_cap = float(snap.cpu_cap.sum())
    if gpu_cap <= 0 or not cpu_cap > 0:
        return False
    gpu_free = int(snap.gpu_free.sum(dtype="int64"))
    cpu_free = cpu_cap - float(snap.cpu_used.sum())
    return gpu_free * cpu_cap < cpu_free * gpu_cap


def cluster_cpu_bound(snap: ClusterSnapshot) -> bool:
    """True when the GPU nodes' used CPU share is at least :data:`CPU_BOUND_MIN_SHARE` and
    above :data:`CPU_BOUND_RATIO` times their used GPU share. Only nodes with GPUs count, or a
    CPU-heavy service tier on CPU-only nodes would set the bit."""
    gpu_cap = int(snap.gpu_count.sum()) * 1000
    # dot products with the mask: faster than summing a masked copy, and the same sums
    on_gpu = snap.gpu_count > 0
    cpu_cap = float(snap.cpu_cap @ on_gpu)
    if gpu_cap <= 0 or not cpu_cap > 0:
        return False
    gpu_used = gpu_cap - int(snap.gpu_free.sum(dtype="int64"))
    cpu_used = float(snap.cpu_used @ on_gpu)
    return (cpu_used >= CPU_BOUND_MIN_SHARE * cpu_cap
            and cpu_used * gpu_cap > CPU_BOUND_RATIO * gpu_used * cpu_cap)


def takes_whole_gpus(pod: PodSpec) -> bool:
    """A GPU pod that does not share a GPU."""
    return pod.num_gpu > 0 and pod.gpu_milli >= 1000


def cpu_bound_factor(pod: PodSpec, snap: ClusterSnapshot) -> float:
    """1.0 for a CPU-only pod (featurize's ``pod_is_cpu_only``: no GPU or no GPU share asked)
    in a :func:`cluster_cpu_bound` cluster, else 0.0: the factor of ``cpu_bound_cpu_per_gpu``.
    The cluster sums are taken only for CPU-only pods."""
    cpu_only = pod.num_gpu == 0 or pod.gpu_milli <= 0
    return 1.0 if cpu_only and cluster_cpu_bound(snap) else 0.0


def room_factor(pod: PodSpec, snap: ClusterSnapshot) -> float:
    """1.0 for a whole-GPU pod asking for :data:`MIN_GPUS` or more GPUs in a
    :func:`cluster_gpu_bound` cluster, else 0.0: the factor of ``shape1_room_gpu_bound``."""
    several = takes_whole_gpus(pod) and pod.num_gpu >= MIN_GPUS
    return 1.0 if several and cluster_gpu_bound(snap) else 0.0


@functools.cache
def default_workload() -> TargetWorkload:
    """openb ``default``'s target workload:
    :meth:`dsan.features.target.TargetWorkload.default` (embedded table), built once."""
    return TargetWorkload.default()


def _frac(num: F64, den: F64) -> F64:
    return np.divide(num, den, out=np.zeros_like(num, dtype=np.float64), where=den > 0)


def _group_size(ids: npt.NDArray[np.int32] | None, nodes: npt.NDArray[np.int64]) -> F64:
    if ids is None:
        return np.zeros(len(nodes))
    _, inv, counts = np.unique(ids, return_inverse=True, return_counts=True)
    return np.where(ids[nodes] >= 0, counts[inv[nodes]], 0).astype(np.float64)


def telemetry_of(snap: ClusterSnapshot, nodes: npt.NDArray[np.int64]) -> F32:
    """(m, T, C) telemetry of ``nodes``; zeros of length DEFAULT_T when the snapshot has none."""
    if snap.telemetry is None:
        return np.zeros((len(nodes), DEFAULT_T, len(TELEMETRY_CHANNELS)), dtype=np.float32)
    return np.ascontiguousarray(snap.telemetry[nodes], dtype=np.float32)


def node_block(snap: ClusterSnapshot, nodes: npt.NDArray[np.int64]) -> F32:
    """The pod-independent base + monitoring columns (m, N_NODE_FEATURES), no allocation state."""
    m = len(nodes)
    c: list[F64] = []
    cnt = snap.gpu_count[nodes].astype(np.float64)
    c += [snap.cpu_cap[nodes] / CPU_SCALE, snap.mem_cap[nodes] / MEM_SCALE, cnt / MAX_GPUS]
    c.append((cnt > 0).astype(np.float64))
    model = snap.gpu_model[nodes]
    onehot = np.zeros((m, MODEL_SLOTS))
    has = model >= 0
    onehot[np.flatnonzero(has), np.minimum(model[has], MODEL_SLOTS - 1)] = 1.0
    c += list(onehot.T)
    for ids in (snap.nvlink, snap.rack, snap.zone):
        c.append(np.zeros(m) if ids is None else (ids[nodes] >= 0).astype(np.float64))
    c.append(_group_size(snap.nvlink, nodes) / 8)
    c.append(_group_size(snap.rack, nodes) / 32)
    c.append(_group_size(snap.zone, nodes) / 1024)
    price = np.ones(m) if snap.hourly_cost is None else snap.hourly_cost[nodes]
    c.append(price / (1.0 + price))
    taints = np.zeros(m, np.int64) if snap.taint_mask is None else snap.taint_mask[nodes]
    c.append(np.bitwise_count(taints) / 8)
    c.append(_frac(snap.cpu_cap[nodes], cnt) / CPU_SCALE)
    c.append(_frac(snap.mem_cap[nodes], cnt) / MEM_SCALE)
    imgs = np.zeros(m) if snap.images is None else np.array([len(snap.images[i]) for i in nodes])
    c.append(imgs / 64.0)
    # The FGD simulator breaks score ties by node name: a fixed order that consolidates.
    # Exposing the order lets the network learn that tie-break instead of guessing.
    rank = np.empty(len(snap), dtype=np.float64)
    rank[np.argsort(np.asarray(snap.names, dtype=object), kind="stable")] = np.arange(len(snap))
    c.append(rank[nodes] / max(1, len(snap)))
    tel = telemetry_of(snap, nodes).astype(np.float64)
    stats = np.stack(
        [tel[:, -1], tel.mean(1), tel.max(1), tel.min(1), tel.std(1), tel[:, -1] - tel[:, 0]],
        axis=-1,
    ).reshape(m, -1)
    c += list(stats.T)
    c += list(age_columns(snap, nodes).T)
    return np.stack(c, axis=1).astype(np.float32)


def age_columns(snap: ClusterSnapshot, nodes: npt.NDArray[np.int64]) -> F64:
    """``tel_age`` and ``tel_present`` of ``nodes`` (m, 2): the only node-block columns that
    change without new telemetry (the sidecar's ages grow with the wall clock)."""
    m = len(nodes)
    age = np.full(m, np.inf) if snap.telemetry_age_s is None else snap.telemetry_age_s[nodes]
    out = np.empty((m, 2))
    # nan_to_num(age, posinf=1e9) as three ufuncs (it costs ~5 us on the serving path): NaN
    # -> 0, inf -> 1e9; finite ages over 1e9 are capped too, and saturate at 1 either way.
    capped = np.where(age == age, np.minimum(age, 1e9), 0.0)
    out[:, 0] = np.minimum(np.log1p(capped) / _LOG1P_HOUR, 1.0)
    out[:, 1] = np.isfinite(age) if snap.telemetry is not None else 0.0
    return out


_LOG1P_HOUR = np.log1p(3600.0)


def featurize(
    pod: PodSpec,
    snap: ClusterSnapshot,
    nodes: npt.NDArray[np.int64],
    workload: TargetWorkload | None = None,
    node_cols: F32 | None = None,
    cache: PlacementCache | None = None,
) -> F32:
    """Features of ``pod`` on candidate ``nodes``: ``(m, 128)`` float32.

    ``node_cols`` may pass :func:`node_block` of ``nodes`` precomputed (it only changes with
    telemetry), and ``cache`` a :class:`PlacementCache` kept across pods: together they
    remove most of the per-pod cost on the hot path.
    """
    return featurize_batch([pod], [snap], [nodes], workload, [node_cols], [cache])


def pod_values(pod: PodSpec) -> list[Any]:
    """The pod's scalars, in :func:`featurize_batch`'s order: its ``len(TASK_TYPES) + 13``
    business columns, then cpu per GPU, log memory, the request (cpu, mem, GPU total), the
    GPU count k, the GPU share used and needed per GPU, and whether it shares a GPU. The
    business slot of ``cpu_bound_cpu_per_gpu`` holds 0.0: the row writers fill it per node."""
    k = pod.num_gpu if pod.gpu_milli > 0 else 0
    gtot = float(k * pod.gpu_milli)
    return (
        [float(pod.task_type == t) for t in range(len(TASK_TYPES))]
        + [np.tanh(pod.priority / 1000), pod.priority > 0, pod.gang_size / 8]
        + [pod.gang_size > 1, pod.cpu_milli / CPU_SCALE, pod.mem_mib / MEM_SCALE]
        + [k / MAX_GPUS, pod.gpu_milli / 1000, gtot / GPU_SCALE]
        + [pod.is_sharing, k == 0, 0.0, len(pod.gpu_models) / 8]  # 0.0: see below
        + [pod.cpu_milli / max(1, k) / CPU_SCALE, np.log1p(pod.mem_mib) / np.log1p(MEM_SCALE)]
        + [pod.cpu_milli, pod.mem_mib, gtot, k, pod.gpu_milli * (k > 0)]
        + [max(pod.gpu_milli, 1), pod.is_sharing]
    )


def featurize_batch(
    pods: Sequence[PodSpec],
    snaps: Sequence[ClusterSnapshot],
    nodes: Sequence[npt.NDArray[np.int64]],
    workload: TargetWorkload | None = None,
    node_cols: Sequence[F32 | None] | None = None,
    caches: Sequence[PlacementCache | None] | None = None,
) -> F32:
    """:func:`featurize` of several decisions at once (each its own pod, snapshot, candidates,
    optional node block and cache): their ``(m_i, 128)`` rows stacked in order.

    Speed: a decision has ~60 candidates, so numpy's per-call overhead, not arithmetic, sets
    the cost. Columns are computed as rows of a (72, M) float64 block over ALL decisions'
    rows (pod scalars become per-row values, candidate-relative columns use per-decision
    segment reductions), with like columns stacked into one operation (the three resources'
    fractions, the five min-max ranks, the eight shapes). Every value is the same float64
    expression as the column-by-column definition, so the float32 output is bit-identical
    to featurizing each decision alone (``tests/unit/features/test_featurizer_batch.py`` pins both).
    """
    if any(len(n) == 0 for n in nodes):
        # a decision without candidates adds no rows; the column kernels assume each has some
        keep = [i for i, n in enumerate(nodes) if len(n)]
        if not keep:
            return np.zeros((0, N_FEATURES), dtype=np.float32)
        return featurize_batch(
            [pods[i] for i in keep], [snaps[i] for i in keep], [nodes[i] for i in keep],
            workload, None if node_cols is None else [node_cols[i] for i in keep],
            None if caches is None else [caches[i] for i in keep])
    blk, r, v, starts, seg = _columns(pods, snaps, nodes, workload, node_cols, caches, True)
    lo, hi = _seg_reduce(np.minimum, v[:5], starts, seg), _seg_reduce(np.maximum, v, starts, seg)
    r[_RELATIVE_ROWS] = relative_columns(v, lo, hi)
    assert blk is not None
    x = np.empty((r.shape[1], N_FEATURES), dtype=np.float32)
    x[:, :N_NODE_FEATURES] = blk
    x[:, N_NODE_FEATURES:] = r.T
    return x


def pod_rows(
    pod: PodSpec,
    snap: ClusterSnapshot,
    nodes: npt.NDArray[np.int64],
    workload: TargetWorkload | None = None,
    cache: PlacementCache | None = None,
    factors: tuple[float, float] | None = None,
) -> tuple[F32, F64]:
    """The pod-dependent columns of ``featurize(pod, snap, nodes)`` (``x[:, N_NODE_FEATURES:]``,
    (m, 72) float32) with the :data:`RELATIVE_COLUMNS` left 0, and the (7, m) float64
    quantities those are computed from: each row depends on its own node alone, so a cache
    may keep rows and fill the relative columns per candidate set
    (:func:`relative_columns` of :func:`extremes`), which gives ``featurize``'s bits.
    ``factors`` may pass ``(room_factor(pod, snap), cpu_bound_factor(pod, snap))`` when the
    caller has them (they are sums over the whole cluster)."""
    _, r, v, _, _ = _columns([pod], [snap], [nodes], workload, None, [cache], False,
                             None if factors is None else [factors])
    return r.T.astype(np.float32), v


def extremes(v: F64) -> tuple[F64, F64]:
    """The candidate set's (lo (5, 1), hi (7, 1)) of :func:`pod_rows`' quantities ``v``
    (7, m): what the relative columns are scaled by."""
    return v[:5].min(axis=1, keepdims=True), v.max(axis=1, keepdims=True)


def relative_columns(v: F64, lo: F64, hi: F64) -> F64:
    """The 7 candidate-relative columns (in :data:`RELATIVE_COLUMNS` order), (7, m) float64,
    from each row's quantities ``v`` (7, m) and the candidate set's extremes: the four
    min-max ranks (fragmentation delta, best fit, least allocated, dot product), ties with
    the best FGD integer score and the best best-fit, and the cost rank."""
    out = np.empty((7, v.shape[1]))
    ranks = _minmax_rows(v[:5], lo, hi[:5], _RANK_HIGHER_IS_BETTER)  # the 4 ranks, then cost
    out[:4] = ranks[:4]
    out[4] = v[5] >= hi[5]
    out[5] = v[6] >= hi[6] - 1e-9
    out[6] = ranks[4]
    return out


def _columns(
    pods: Sequence[PodSpec],
    snaps: Sequence[ClusterSnapshot],
    nodes: Sequence[npt.NDArray[np.int64]],
    workload: TargetWorkload | None,
    node_cols: Sequence[F32 | None] | None,
    caches: Sequence[PlacementCache | None] | None,
    with_nodes: bool,
    known_factors: Sequence[tuple[float, float]] | None = None,
) -> tuple[F32 | None, F64, F64, npt.NDArray[np.int64], npt.NDArray[np.int64] | None]:
    """The node block (``with_nodes``), the (72, M) pod-dependent rows with the relative
    ones 0, their quantities (7, M), and each decision's first row and row -> decision map
    (None for one decision). ``known_factors`` may pass each decision's
    ``(room_factor, cpu_bound_factor)``."""
    w = workload or default_workload()
    nd = [np.asarray(n, dtype=np.int64) for n in nodes]
    sizes = np.array([len(n) for n in nd], dtype=np.int64)
    single = len(nd) == 1
    s = min(TOP_SHAPES, len(w.freq))
    blks, pls, accs, cols, frees = [], [], [], [], []
    ext = np.empty((3, int(sizes.sum())))  # images, pod count, price
    pod_vals = []
    # shape1_room_gpu_bound's and cpu_bound_cpu_per_gpu's per-decision factors: cluster-wide,
    # so one number per decision
    if known_factors is None:
        known_factors = [(room_factor(p, sn), cpu_bound_factor(p, sn))
                         for p, sn in zip(pods, snaps, strict=True)]
    factors = np.array([f[0] for f in known_factors])
    cfactors = np.array([f[1] for f in known_factors])
    at = 0
    with_cache = [i for i in range(len(nd)) if caches is not None and caches[i] is not None]
    pre = dict(
        zip(
            with_cache,
            cached_placements(
                [caches[i] for i in with_cache],  # type: ignore[index, misc]
                [pods[i] for i in with_cache],
                [snaps[i] for i in with_cache],
                [nd[i] for i in with_cache],
            ),
            strict=True,
        )
    )
    for i, (pod, snap, idx) in enumerate(zip(pods, snaps, nd, strict=True)):
        m = len(idx)
        if with_nodes:
            blk = node_cols[i] if node_cols is not None else None
            blk = node_block(snap, idx) if blk is None else blk
            if blk.shape != (m, N_NODE_FEATURES):
                raise ValueError(
                    f"node_cols has shape {blk.shape}, want ({m}, {N_NODE_FEATURES})")
            blks.append(blk)
        cache = caches[i] if caches is not None else None
        pls.append(pre[i] if i in pre else placement(pod, snap, idx, w))
        if s:
            accs.append((cache.access(snap) if cache is not None else w.access(snap))[:s, idx])
        cols.append(
            (
                snap.cpu_cap[idx],
                snap.mem_cap[idx],
                snap.gpu_count[idx],
                snap.cpu_used[idx],
                snap.mem_used[idx],
            )
        )
        frees.append(snap.gpu_free[idx])
        e = ext[:, at : at + m]
        e[0] = (
            0.0
            if snap.images is None or pod.image < 0
            else np.array([pod.image in snap.images[j] for j in idx], dtype=np.float64)
        )
        e[1] = 0.0 if snap.pod_count is None else snap.pod_count[idx] / 64
        e[2] = 1.0 if snap.hourly_cost is None else snap.hourly_cost[idx]
        at += m
        pod_vals.append(pod_values(pod))
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    if single:  # one decision: pod values broadcast, nothing to concatenate
        pv = np.array(pod_vals[0], dtype=np.float64)[:, None]
        blk, pl, free = blks[0] if blks else None, pls[0], frees[0].astype(np.int64)
        cpu_cap, mem_cap, cnt, cpu_used, mem_used = cols[0]
        acc = accs[0] if s else None
        seg = None
        fac, cfac = factors, cfactors
    else:
        seg = np.repeat(np.arange(len(nd)), sizes)
        pv = np.array(pod_vals, dtype=np.float64).T[:, seg]
        blk = np.concatenate(blks) if blks else None
        pl = Placement(
            np.concatenate([p.frag_before for p in pls]),
            np.concatenate([p.frag_after for p in pls]),
            np.concatenate([p.free_after for p in pls]),
            np.concatenate([p.slot for p in pls]),
        )
        free = np.concatenate(frees).astype(np.int64)
        cpu_cap, mem_cap, cnt, cpu_used, mem_used = (
            np.concatenate(c) for c in zip(*cols, strict=True)
        )
        acc = np.concatenate(accs, axis=1) if s else None
        fac, cfac = factors[seg], cfactors[seg]
    m = len(free)
    nt = len(TASK_TYPES)
    k, gm_used, gm_min, sharing = pv[nt + 18 :]
    r = np.empty((N_FEATURES - N_NODE_FEATURES, m))  # business + derived, one row a column
    r[: nt + 13] = pv[: nt + 13]
    # cpu_bound_cpu_per_gpu: node_cpu_per_gpu (in float64, as the row kernels) times the factor
    r[nt + 11] = np.divide(cpu_cap, cnt, out=np.zeros(m), where=cnt > 0) / CPU_SCALE * cfac
    i = nt + 13
    r[i], r[i + 1] = ext[0], ext[1]
    caps = np.empty((3, m))
    caps[0], caps[1], caps[2] = cpu_cap, mem_cap, cnt * 1000.0
    pos = caps > 0
    req = pv[nt + 15 : nt + 18]  # cpu, mem, GPU total: (3, 1) or (3, M)
    of_node = np.divide(req, caps, out=np.zeros((3, m)), where=pos)
    r[i + 2 : i + 5] = of_node
    r[i + 5], r[i + 6] = pv[nt + 13], pv[nt + 14]
    i += 7

    present = cnt[:, None] > SLOTS  # snap.gpu_present of the candidates only
    gfree = free.sum(1).astype(np.float64)
    now = np.empty((3, m))
    np.subtract(caps[0], cpu_used, out=now[0])
    np.subtract(caps[1], mem_used, out=now[1])
    now[2] = gfree
    after = now - req
    fa = np.divide(after, caps, out=np.zeros((3, m)), where=pos)
    r[i : i + 6 : 2] = np.divide(now, caps, out=np.zeros((3, m)), where=pos)
    r[i + 1 : i + 6 : 2] = fa
    cu, mu = 1 - fa[0], 1 - fa[1]
    least = 0.5 * (fa[0] + fa[1])
    r[i + 6], r[i + 7] = least, 1 - np.abs(cu - mu) / 2
    rq = req / _SCALES
    r[i + 8] = rq[0] * now[0] / CPU_SCALE + rq[1] * now[1] / MEM_SCALE + rq[2] * gfree / GPU_SCALE
    dot = rq[0] * cu + rq[1] * mu + rq[2] * (1 - fa[2])
    r[i + 9] = dot
    cl, gl = after[0] / CPU_SCALE, after[2] / GPU_SCALE
    bestfit = 1 - (0.5 * cl + 0.5 * gl)
    r[i + 10], r[i + 11], r[i + 12] = cl, gl, bestfit
    delta = pl.frag_after - pl.frag_before
    r[i + 13], r[i + 14] = pl.frag_before / GPU_SCALE, pl.frag_after / GPU_SCALE
    r[i + 15] = delta / 1000
    fgd = 1 / (1 + np.exp(np.clip(delta / 1000, -50, 50)))
    fgd_int = np.floor(fgd * 100) / 100  # FGD's plugin truncates to an int score: ties
    r[i + 16], r[i + 17] = fgd, fgd_int
    r[i + 18] = ((free == 1000) & present).sum(1) / 8
    r[i + 19] = ((pl.free_after == 1000) & present).sum(1) / 8
    r[i + 20] = ((free > 0) & (free < 1000) & present).sum(1) / 8
    shared = np.where(pl.slot >= 0, free[np.arange(m), np.maximum(pl.slot, 0)], 0)
    chosen = np.where(sharing > 0, shared, np.where(k > 0, 1000.0, 0.0))
    r[i + 21], r[i + 22] = chosen / 1000, np.maximum(chosen - gm_used, 0) / 1000
    r[i + 23] = free.max(1) / 1000
    r[i + 24] = np.where(present, free, 1000).min(1) * (cnt > 0) / 1000
    fitting = ((free >= gm_min[:, None]) & present).sum(1).astype(np.float64)
    r[i + 25], r[i + 26] = fitting / 8, (fitting - k) / 8
    r[i + 27] = (sharing > 0) & (chosen < 1000) & (chosen > 0)
    r[i + 28] = (cpu_used == 0) & (gfree == caps[2])
    r[i + 29] = (gfree > 0) & (gfree < caps[2])
    room_row = i + 30  # shape1_room_gpu_bound, filled once the shape columns are
    share = np.maximum(of_node[0], of_node[2])
    cost = ext[2] * share
    v = np.empty((7, m))
    v[0], v[1], v[2], v[3], v[4], v[5], v[6] = delta, bestfit, least, dot, cost, fgd_int, bestfit
    r[i + 31 : i + 37] = 0.0  # relative: relative_columns (featurize_batch)
    r[i + 37] = np.divide(pl.frag_before, gfree, out=np.zeros(m), where=gfree > 0)
    r[i + 38] = cost / 4
    r[i + 39] = 0.0
    i += 40
    r[i + s : i + TOP_SHAPES] = 0.0
    if s:
        assert acc is not None
        ng = w.num_gpu[:s]
        by_cpu = np.floor(
            np.maximum(after[0], 0)[None, :] / np.maximum(w.cpu_milli[:s], 1.0)[:, None]
        )
        per_gpu = np.floor(
            np.maximum(pl.free_after, 0)[None] / np.maximum(w.gpu_milli[:s], 1)[:, None, None]
        ).sum(2)
        hostable = np.minimum(by_cpu, per_gpu // np.maximum(ng, 1)[:, None]) * acc
        copies = np.where((ng == 0)[:, None], by_cpu, hostable)
        r[i : i + s] = np.minimum(copies / 8, 1.0)
    # shape 1's room times the factor (a product, not a branch: the row kernels multiply
    # too, so NaNs and signed zeros come out alike); 0 when the workload has one shape
    r[room_row] = r[i + 1] * fac if s > 1 else 0.0
    return blk, r, v, starts, seg


_SCALES = np.array([CPU_SCALE, MEM_SCALE, GPU_SCALE])[:, None]
#: Direction of the five min-max rank columns: frag delta, bestfit, least, dotprod, cost.
_RANK_HIGHER_IS_BETTER = np.array([False, True, True, True, False])
_NT = len(TASK_TYPES)
#: Rows of the pod-dependent block (and columns of x past N_NODE_FEATURES) that depend on
#: the candidate set, in :func:`relative_columns`' order.
_RELATIVE_ROWS = np.array([51, 52, 53, 54, 55, 56, 59]) + _NT
#: The candidate-relative columns of the 128, in :func:`relative_columns`' order.
RELATIVE_COLUMNS = _RELATIVE_ROWS + N_NODE_FEATURES


def _seg_reduce(
    op: np.ufunc, v: F64, starts: npt.NDArray[np.int64], seg: npt.NDArray[np.int64] | None
) -> F64:
    """``op`` (np.minimum / np.maximum) over each decision's rows of ``v`` (rows x M),
    broadcast back to every row; ``seg`` None means one decision."""
    if seg is None:
        return op.reduce(v, axis=1, keepdims=True)
    return op.reduceat(v, starts, axis=1)[:, seg]


def _minmax_rows(v: F64, lo: F64, hi: F64, higher_is_better: npt.NDArray[np.bool_]) -> F64:
    """Min-max scale each row of ``v`` to [0, 1] within its decision (``lo`` / ``hi`` its
    decision's min and max; 1 = best; a constant decision is all 1)."""
    spread = hi > lo
    span = np.where(spread, hi - lo, 1.0)
    out = np.where(higher_is_better[:, None], v - lo, hi - v)
    out /= span
    return np.where(spread, out, 1.0)
