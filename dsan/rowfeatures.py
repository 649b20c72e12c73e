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
_SIX_ZEROS = (0.0,) * 6
_AGE0 = N_NODE_FEATURES - 2
assert set(REQUEST_COLUMNS) - set(range(N_NODE_FEATURES, N_FEATURES)) == {_AGE0, _AGE0 + 1}


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
    rows_l: list[int] = rows.tolist()
    pls = cache.few(pod, snap, rows_l)
    pv = _pod_floats(pod)
    head = [*pv[:_NT + 13], 0.0, 0.0, 0.0, 0.0, 0.0, *pv[_NT + 13:_NT + 15]]
    rc, rm, rg, k, gm_used, gm_min, sharing = pv[_NT + 15 :]
    rq0, rq1, rq2 = rc / CPU_SCALE, rm / MEM_SCALE, rg / GPU_SCALE
    images, pods, price = snap.images, snap.pod_count, snap.hourly_cost
    allowed = set(pod.gpu_models)
    w = cache.workload
    n_shapes = min(TOP_SHAPES, len(w.freq))
    divs = _shape_divisors(w, n_shapes)
    access = cache.access(snap)[:n_shapes, rows].T.tolist() if n_shapes else [[]] * m
    pad = [0.0] * (TOP_SHAPES - n_shapes)
    out: list[list[float]] = []
    qs: list[tuple[float, ...]] = []
    # Per row: Python floats and ints only (lists of at most 8 GPU slots); the three
    # resources unrolled, counts as list.count / filtered lengths (the same integers).
    for r, j in enumerate(rows_l):
        cnt = int(snap.gpu_count.item(j))
        c0, c1, c2 = snap.cpu_cap.item(j), snap.mem_cap.item(j), cnt * 1000.0
        cpu_used = snap.cpu_used.item(j)
        free = snap.gpu_free[j].tolist()
        gfree = float(sum(free))
        n0, n1, n2 = c0 - cpu_used, c1 - snap.mem_used.item(j), gfree
        a0, a1, a2 = n0 - rc, n1 - rm, n2 - rg
        of0 = rc / c0 if c0 > 0 else 0.0
        of1 = rm / c1 if c1 > 0 else 0.0
        of2 = rg / c2 if c2 > 0 else 0.0
        fn0 = n0 / c0 if c0 > 0 else 0.0
        fn1 = n1 / c1 if c1 > 0 else 0.0
        fn2 = n2 / c2 if c2 > 0 else 0.0
        fa0 = a0 / c0 if c0 > 0 else 0.0
        fa1 = a1 / c1 if c1 > 0 else 0.0
        fa2 = a2 / c2 if c2 > 0 else 0.0
        cu, mu = 1 - fa0, 1 - fa1
        least = 0.5 * (fa0 + fa1)
        dot = rq0 * cu + rq1 * mu + rq2 * (1 - fa2)
        cl, gl = a0 / CPU_SCALE, a2 / GPU_SCALE
        bestfit = 1 - (0.5 * cl + 0.5 * gl)
        before, frag_after, slot, fafter = pls[r]
        delta = frag_after - before
        # numpy's exp, as featurize calls it: libm's may differ in the last bit. The clip
        # is exact, so Python's min/max (NaN stays NaN) replace np.clip's ~3 us per scalar.
        fgd = float(1 / (1 + np.exp(min(max(delta / 1000, -50.0), 50.0))))
        fgd_int = math.floor(fgd * 100) / 100
        live = free[:cnt]  # present GPU slots
        shared = float(free[max(slot, 0)]) if slot >= 0 else 0.0
        chosen = shared if sharing > 0 else (1000.0 if k > 0 else 0.0)
        fitting = float(len([f for f in live if f >= gm_min]))
        cost = (1.0 if price is None else price.item(j)) * max(of0, of2)
        row = head.copy()
        row[_NT + 13] = 0.0 if images is None or pod.image < 0 else float(pod.image in images[j])
        row[_NT + 14] = 0.0 if pods is None else pods.item(j) / 64
        row[_NT + 15 : _NT + 18] = of0, of1, of2
        row += (fn0, fa0, fn1, fa1, fn2, fa2, least, 1 - abs(cu - mu) / 2,
                rq0 * n0 / CPU_SCALE + rq1 * n1 / MEM_SCALE + rq2 * gfree / GPU_SCALE,
                dot, cl, gl, bestfit, before / GPU_SCALE, frag_after / GPU_SCALE, delta / 1000,
                fgd, fgd_int, live.count(1000) / 8, fafter[:cnt].count(1000) / 8,
                len([f for f in live if 0 < f < 1000]) / 8, chosen / 1000,
                max(chosen - gm_used, 0.0) / 1000, max(free) / 1000,
                min(live + [1000] * (MAX_GPUS - len(live))) * (cnt > 0) / 1000,
                fitting / 8, (fitting - k) / 8, float(sharing > 0 and 0 < chosen < 1000),
                float(cpu_used == 0 and gfree == c2), float(0 < gfree < c2),
                1.0 if not allowed else float(snap.gpu_model.item(j) in allowed),
                *_SIX_ZEROS, before / gfree if gfree > 0 else 0.0, cost / 4, 0.0)
        row += _hostable(a0, fafter, access[r], divs)
        row += pad
        out.append(row)
        qs.append((delta, bestfit, least, dot, cost, fgd_int, bestfit))
    q = np.array(qs, dtype=np.float64).reshape(m, 7)
    x = np.empty((m, N_FEATURES), dtype=np.float32)
    x[:, :N_NODE_FEATURES] = node_cols
    x[:, N_NODE_FEATURES:] = out  # float64 values, rounded to float32 as featurize does
    # The rows hold zeros in the relative columns; the node block's age columns (the last
    # two of it, as the assertion below pins) are zeroed with a slice, not a fancy index.
    x[:, _AGE0:N_NODE_FEATURES] = 0.0
    return x, q


#: pod_values as floats per pod shape (every field pod_values reads), bounded.
_POD_FLOATS: dict[tuple[object, ...], list[float]] = {}


def _pod_floats(pod: PodSpec) -> list[float]:
    """``pod_values(pod)`` as Python floats, memoised on the fields it reads (a settle's pod
    is usually of a shape seen before; ~4 us of numpy scalars per call otherwise)."""
    key = (pod.task_type, pod.priority, pod.gang_size, pod.cpu_milli, pod.mem_mib,
           pod.num_gpu, pod.gpu_milli, pod.gpu_models)
    got = _POD_FLOATS.get(key)
    if got is None:
        if len(_POD_FLOATS) >= 256:
            _POD_FLOATS.clear()
        got = _POD_FLOATS[key] = [float(v) for v in pod_values(pod)]
    return got


def _hostable(cpu_after: float, free_after: list[int], access: list[bool],
              divs: _Divisors) -> list[float]:
    """One row's ``shape{k}_hostable_after`` columns (the workload's first ``len(access)``
    shapes): the batch featurizer's expression ``min(copies / 8, 1)`` with ``copies`` the
    shape's copies by CPU, or for a GPU shape the fewer of those and of its whole GPU sets
    (summed ``floor(free / gpu_milli)`` per slot over ``num_gpu``) where its model is
    allowed. Every operand is an integer-valued float or an int, so Python's ``//`` on ints
    and ``x // 1.0`` (floor) give exactly numpy's values, in any order. The per-slot sums
    are taken once per distinct GPU share (the default workload's 7 GPU shapes have 3)."""
    cpu_div, shares, share_of, ng_div, cpu_only = divs
    ca = max(cpu_after, 0.0)  # np.maximum(x, 0): NaN stays NaN
    free = [f for f in free_after if f > 0]  # np.maximum(free, 0): the rest add 0
    per_share = [sum([f // g for f in free]) for g in shares] if free else [0] * len(shares)
    out = []
    for i, acc in enumerate(access):
        by_cpu = (ca / cpu_div[i]) // 1.0
        gpus = per_share[share_of[i]] // ng_div[i]
        copies = by_cpu if cpu_only[i] else min(by_cpu, gpus) * acc
        out.append(min(copies / 8, 1.0))
    return out


#: A workload's shape divisors as Python numbers for its first s shapes: CPU (float), the
#: distinct GPU shares (ints) and each shape's index into them, GPU count (int), and which
#: shapes are CPU-only.
_Divisors = tuple[list[float], list[int], list[int], list[int], list[bool]]
#: The last workload's divisors: (workload, s, divisors); the workload object is held, so a
#: new one can never be mistaken for it.
_DIVISORS: list[tuple[TargetWorkload, int, _Divisors]] = []


def _shape_divisors(w: TargetWorkload, s: int) -> _Divisors:
    """The workload-only operands of :func:`_hostable` (the batch featurizer's
    ``maximum(.., 1)`` expressions), computed once per workload instead of once per call: a
    settle featurizes 1-2 rows."""
    if _DIVISORS and _DIVISORS[0][0] is w and _DIVISORS[0][1] == s:
        return _DIVISORS[0][2]
    ng = w.num_gpu[:s]
    gpu_div: list[int] = np.maximum(w.gpu_milli[:s], 1).astype(np.int64).tolist()
    shares = sorted(set(gpu_div))
    got = (np.maximum(w.cpu_milli[:s], 1.0).astype(np.float64).tolist(), shares,
           [shares.index(g) for g in gpu_div], np.maximum(ng, 1).astype(np.int64).tolist(),
           (ng == 0).tolist())
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
