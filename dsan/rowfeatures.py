"""A few nodes' rows of :func:`dsan.features.featurize` at a time, without its fixed cost.

DSAN's serving cache (:mod:`dsan.model.rowcache`) re-featurizes only the nodes whose
allocation changed since a pod class last saw them: after each assumption, one or two rows.
:func:`dsan.features.featurize_batch` spends ~150 numpy calls on any number of rows (about
0.15-0.2 ms of fixed overhead for one row), so for up to :data:`SMALL_ROWS` rows this module
computes the same float64 expressions on Python floats instead (IEEE double either way, same
operation order, the same numpy ``exp`` for the FGD score, the shape columns with the batch's
own numpy expression), then casts to float32 as ``featurize`` does. The result is
bit-identical to ``featurize``'s rows on every column except :data:`REQUEST_COLUMNS` (left
zero here: they depend on the candidate set or the clock), which
``tests/unit/test_features_rows.py`` pins on random snapshots and pods.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from dsan.api.types import TASK_TYPES
from dsan.features import (
    CPU_SCALE,
    FEATURE_NAMES,
    GPU_SCALE,
    MEM_SCALE,
    N_FEATURES,
    N_NODE_FEATURES,
    TOP_SHAPES,
    PlacementCache,
    featurize,
    pod_values,
)
from dsan.policies.target import TargetWorkload
from dsan.snapshot import MAX_GPUS, ClusterSnapshot, PodSpec

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

#: Columns that depend on the request, not on (pod class, node state), in this order: the 7
#: candidate-relative ones (min-max ranks, "ties with the winner" flags), then the 2 age
#: columns (``tel_present`` moves with the age: infinite age means absent).
REQUEST_COLUMNS = [
    FEATURE_NAMES.index(c)
    for c in (
        "rel_frag_delta",
        "rel_bestfit",
        "rel_least_allocated",
        "rel_dotprod",
        "is_best_fgd",
        "is_best_bestfit",
        "rel_placement_cost",
        "tel_age",
        "tel_present",
    )
]
#: Up to this many rows go through the per-row path; more through the vectorised featurizer.
SMALL_ROWS = 8
_NT = len(TASK_TYPES)
_SLOTS = range(MAX_GPUS)


def featurize_rows(
    pod: PodSpec, snap: ClusterSnapshot, rows: I64, node_cols: F32, cache: PlacementCache
) -> tuple[F32, F64]:
    """``pod``'s features on ``rows`` ((m, 128) float32, :data:`REQUEST_COLUMNS` zero) and the
    (m, 7) float64 quantities behind the relative columns: frag delta, bestfit, least
    allocated, dotprod, placement cost, FGD's integer score, bestfit (:func:`quantities`).
    ``node_cols`` is :func:`dsan.features.node_block` of ``rows``."""
    m = len(rows)
    if m > SMALL_ROWS:
        x, _ = featurize(pod, snap, rows, cache.workload, node_cols=node_cols, cache=cache)
        x[:, REQUEST_COLUMNS] = 0.0
        return x, quantities(pod, snap, rows, cache)
    pl = cache.get(pod, snap, rows)
    pv = [float(v) for v in pod_values(pod)]
    head = [*pv[:_NT + 13], 0.0, 0.0, 0.0, 0.0, 0.0, *pv[_NT + 13:_NT + 15]]
    rc, rm, rg, k, gm_used, gm_min, sharing = pv[_NT + 15 :]
    req = (rc, rm, rg)
    rq0, rq1, rq2 = rc / CPU_SCALE, rm / MEM_SCALE, rg / GPU_SCALE
    images, pods, price = snap.images, snap.pod_count, snap.hourly_cost
    allowed = set(pod.gpu_models)
    out: list[list[float]] = []
    q = np.empty((m, 7))
    cpu_after = np.empty(m)
    for r, j in enumerate(rows.tolist()):
        cnt = int(snap.gpu_count.item(j))
        caps = (snap.cpu_cap.item(j), snap.mem_cap.item(j), cnt * 1000.0)
        cpu_used = snap.cpu_used.item(j)
        free = snap.gpu_free[j].tolist()
        gfree = float(sum(free))
        now = (caps[0] - cpu_used, caps[1] - snap.mem_used.item(j), gfree)
        after = (now[0] - rc, now[1] - rm, now[2] - rg)
        cpu_after[r] = after[0]
        of = [req[d] / caps[d] if caps[d] > 0 else 0.0 for d in range(3)]
        fn = [now[d] / caps[d] if caps[d] > 0 else 0.0 for d in range(3)]
        fa = [after[d] / caps[d] if caps[d] > 0 else 0.0 for d in range(3)]
        cu, mu = 1 - fa[0], 1 - fa[1]
        least = 0.5 * (fa[0] + fa[1])
        dot = rq0 * cu + rq1 * mu + rq2 * (1 - fa[2])
        cl, gl = after[0] / CPU_SCALE, after[2] / GPU_SCALE
        bestfit = 1 - (0.5 * cl + 0.5 * gl)
        before, frag_after = pl.frag_before.item(r), pl.frag_after.item(r)
        delta = frag_after - before
        # numpy's exp, as featurize calls it: libm's may differ in the last bit. The clip
        # is exact, so Python's min/max (NaN stays NaN) replace np.clip's ~3 us per scalar.
        fgd = float(1 / (1 + np.exp(min(max(delta / 1000, -50.0), 50.0))))
        fgd_int = math.floor(fgd * 100) / 100
        live = [free[s] for s in _SLOTS if s < cnt]  # present GPU slots
        fafter = pl.free_after[r].tolist()
        slot = pl.slot.item(r)
        shared = float(free[max(slot, 0)]) if slot >= 0 else 0.0
        chosen = shared if sharing > 0 else (1000.0 if k > 0 else 0.0)
        fitting = float(sum(f >= gm_min for f in live))
        cost = (1.0 if price is None else price.item(j)) * max(of[0], of[2])
        row = head.copy()
        row[_NT + 13] = 0.0 if images is None or pod.image < 0 else float(pod.image in images[j])
        row[_NT + 14] = 0.0 if pods is None else pods.item(j) / 64
        row[_NT + 15 : _NT + 18] = of
        row += [fn[0], fa[0], fn[1], fa[1], fn[2], fa[2], least, 1 - abs(cu - mu) / 2]
        row += [rq0 * now[0] / CPU_SCALE + rq1 * now[1] / MEM_SCALE + rq2 * gfree / GPU_SCALE]
        row += [dot, cl, gl, bestfit, before / GPU_SCALE, frag_after / GPU_SCALE, delta / 1000]
        row += [fgd, fgd_int, sum(f == 1000 for f in live) / 8]
        row += [sum(fafter[s] == 1000 for s in _SLOTS if s < cnt) / 8]
        row += [sum(0 < f < 1000 for f in live) / 8, chosen / 1000]
        row += [max(chosen - gm_used, 0.0) / 1000, max(free) / 1000]
        row += [min(live + [1000] * (MAX_GPUS - len(live))) * (cnt > 0) / 1000]
        row += [fitting / 8, (fitting - k) / 8, sharing > 0 and 0 < chosen < 1000]
        row += [cpu_used == 0 and gfree == caps[2], 0 < gfree < caps[2]]
        row += [1.0 if not allowed else float(snap.gpu_model.item(j) in allowed)]
        row += [0.0] * 6 + [before / gfree if gfree > 0 else 0.0, cost / 4, 0.0]
        row += [0.0] * TOP_SHAPES
        out.append(row)
        q[r] = (delta, bestfit, least, dot, cost, fgd_int, bestfit)
    r64 = np.array(out, dtype=np.float64)
    _shapes(r64[:, -TOP_SHAPES:], cache, snap, rows, cpu_after, pl.free_after)
    x = np.empty((m, N_FEATURES), dtype=np.float32)
    x[:, :N_NODE_FEATURES] = node_cols
    x[:, N_NODE_FEATURES:] = r64
    x[:, REQUEST_COLUMNS] = 0.0
    return x, q


def _shapes(
    out: F64, cache: PlacementCache, snap: ClusterSnapshot, rows: I64, cpu_after: F64,
    free_after: npt.NDArray[np.int64],
) -> None:
    """The ``shape{k}_hostable_after`` columns into ``out`` (m, TOP_SHAPES): the batch
    featurizer's expression over these rows (integer-valued: exact in any order)."""
    w = cache.workload
    s = min(TOP_SHAPES, len(w.freq))
    if not s:
        return
    acc = cache.access(snap)[:s, rows]
    cpu_div, gpu_div, ng_div, cpu_only = _shape_divisors(w, s)
    by_cpu = np.floor(np.maximum(cpu_after, 0)[None, :] / cpu_div)
    per_gpu = np.floor(np.maximum(free_after, 0)[None] / gpu_div).sum(2)
    hostable = np.minimum(by_cpu, per_gpu // ng_div) * acc
    copies = np.where(cpu_only, by_cpu, hostable)
    out[:, :s] = np.minimum(copies / 8, 1.0).T


#: The last workload's shape divisors: (workload, s, divisors); the workload object is held,
#: so a new one can never be mistaken for it.
_Divisors = tuple[F64, npt.NDArray[np.int32], npt.NDArray[np.int32], npt.NDArray[np.bool_]]
_DIVISORS: list[tuple[TargetWorkload, int, _Divisors]] = []


def _shape_divisors(w: TargetWorkload, s: int) -> _Divisors:
    """The workload-only operands of :func:`_shapes` (the batch featurizer's expressions),
    computed once per workload instead of once per call: a settle featurizes 1-2 rows."""
    if _DIVISORS and _DIVISORS[0][0] is w and _DIVISORS[0][1] == s:
        return _DIVISORS[0][2]
    ng = w.num_gpu[:s]
    got = (np.maximum(w.cpu_milli[:s], 1.0)[:, None],
           np.maximum(w.gpu_milli[:s], 1)[:, None, None],
           np.maximum(ng, 1)[:, None], (ng == 0)[:, None])
    _DIVISORS[:] = [(w, s, got)]
    return got


def quantities(pod: PodSpec, snap: ClusterSnapshot, rows: I64, cache: PlacementCache) -> F64:
    """(m, 7) float64 quantities behind the relative columns, vectorised: the same
    expressions (and so the same bits) as :func:`dsan.features.featurize_batch`."""
    k = pod.num_gpu if pod.gpu_milli > 0 else 0
    req = np.array([pod.cpu_milli, pod.mem_mib, float(k * pod.gpu_milli)], dtype=np.float64)
    req = req[:, None]
    m = len(rows)
    caps = np.empty((3, m))
    caps[0], caps[1] = snap.cpu_cap[rows], snap.mem_cap[rows]
    caps[2] = snap.gpu_count[rows] * 1000.0
    pos = caps > 0
    now = np.empty((3, m))
    np.subtract(caps[0], snap.cpu_used[rows], out=now[0])
    np.subtract(caps[1], snap.mem_used[rows], out=now[1])
    now[2] = snap.gpu_free[rows].astype(np.int64).sum(1).astype(np.float64)
    after = now - req
    fa = np.divide(after, caps, out=np.zeros((3, m)), where=pos)
    of_node = np.divide(req, caps, out=np.zeros((3, m)), where=pos)
    rq = req / np.array([CPU_SCALE, MEM_SCALE, GPU_SCALE])[:, None]
    out = np.empty((m, 7))
    pl = cache.get(pod, snap, rows)
    delta = pl.frag_after - pl.frag_before
    fgd = 1 / (1 + np.exp(np.clip(delta / 1000, -50, 50)))
    bestfit = 1 - (0.5 * (after[0] / CPU_SCALE) + 0.5 * (after[2] / GPU_SCALE))
    price = 1.0 if snap.hourly_cost is None else snap.hourly_cost[rows]
    out[:, 0] = delta
    out[:, 1] = bestfit
    out[:, 2] = 0.5 * (fa[0] + fa[1])
    out[:, 3] = rq[0] * (1 - fa[0]) + rq[1] * (1 - fa[1]) + rq[2] * (1 - fa[2])
    out[:, 4] = price * np.maximum(of_node[0], of_node[2])
    out[:, 5] = np.floor(fgd * 100) / 100
    out[:, 6] = bestfit
    return out
