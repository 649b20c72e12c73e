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

import numpy as np
import numpy.typing as npt

from dsan import rowkernel
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
from dsan.rowkernel import Divisors
from dsan.snapshot import ClusterSnapshot, PodSpec

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
_SCALES = (CPU_SCALE, MEM_SCALE, GPU_SCALE)
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
    w = cache.workload
    n_shapes = min(TOP_SHAPES, len(w.freq))
    access = _access_rows(cache.access(snap), n_shapes, rows_l)
    # What the per-row tail reads beyond the snapshot's columns, as Python scalars.
    images = snap.images
    extra = [(0.0 if images is None or pod.image < 0 else float(pod.image in images[j]),
              before, frag_after, slot, fafter, _fgd(frag_after, before), access[r])
             for r, (j, (before, frag_after, slot, fafter)) in enumerate(zip(rows_l, pls,
                                                                            strict=True))]
    x = np.empty((m, N_FEATURES), dtype=np.float32)
    q = np.empty((m, 7))
    pv, nt, divs = tail_values(pod, snap, cache, n_shapes)
    # The node block with its age columns (the last two of it, as the assertion below
    # pins) zeroed: the rows hold zeros in the relative columns.
    rowkernel.fill_rows(x, q, pv, nt, _SCALES, divs, n_shapes, N_NODE_FEATURES, _AGE0,
                        node_cols, columns(snap), rows_l, extra)
    return x, q


def tail_values(pod: PodSpec, snap: ClusterSnapshot, cache: PlacementCache,
                n_shapes: int) -> tuple[list[float], int, Divisors]:
    """The call-wide values of the row writer: the pod's values then the cluster-wide
    factors of ``shape1_room_gpu_bound`` and ``cpu_bound_cpu_per_gpu``, the task-type
    count, the shapes' divisors."""
    pv = [*_pod_floats(pod), cache.room_factor(pod, snap), cache.cpu_bound_factor(pod, snap)]
    return pv, _NT, _shape_divisors(cache.workload, n_shapes)


def columns(snap: ClusterSnapshot) -> rowkernel.Columns:
    """The snapshot's columns the row writer reads (:data:`dsan.rowkernel.Columns`)."""
    return (snap.gpu_count, snap.cpu_cap, snap.mem_cap, snap.cpu_used, snap.mem_used,
            snap.gpu_free, snap.pod_count, snap.hourly_cost)


def _fgd(frag_after: float, before: float) -> float:
    """FGD's score of a placement, as featurize computes it (numpy's exp: libm's may
    differ in the last bit), through the memo. The clip is exact, so Python's min/max (NaN
    stays NaN) replace np.clip's ~3 us per scalar."""
    arg = min(max((frag_after - before) / 1000, -50.0), 50.0)
    got = _FGD.get(arg)
    return fgd_of(arg) if got is None else got


def fgd_of(arg: float) -> float:
    """FGD's score of a clipped argument, computed and memoised (:data:`_FGD`)."""
    if len(_FGD) >= _MEMO_SIZE:
        _FGD.clear()
    got = _FGD[arg] = float(1 / (1 + np.exp(arg)))
    return got


#: Bound of each memo below (cleared when full: the values repeat, so it fills again).
_MEMO_SIZE = 4096
#: FGD's score per clipped argument of numpy's exp: nodes go back and forth between a few
#: states, so fragmentation deltas repeat, and a dict read costs less than numpy's scalar
#: call. The same function of the same float, so the same bits (+0.0 and -0.0, one key
#: here, both give exp 1.0; a NaN never matches, so it is computed each time).
_FGD: dict[float, float] = {}
#: The workload shapes' GPU-model access of each node as a list of bools, for one access
#: array (:meth:`PlacementCache.access`, which makes a new array when the nodes' models
#: change and never writes one it returned): (that array, held so that no other array can
#: pass for it, the shape count, row -> list).
_ACCESS: list[tuple[npt.NDArray[np.bool_], int, dict[int, list[bool]]]] = []


def _access_rows(acc: npt.NDArray[np.bool_], n_shapes: int, rows: list[int]) -> list[list[bool]]:
    """``acc[:n_shapes, rows].T.tolist()``, each node's list read once per access array (a
    fancy index, a transpose and a conversion on every settle otherwise)."""
    if not (_ACCESS and _ACCESS[0][0] is acc and _ACCESS[0][1] == n_shapes):
        _ACCESS[:] = [(acc, n_shapes, {})]
    memo = _ACCESS[0][2]
    out = []
    for j in rows:
        got = memo.get(j)
        if got is None:
            got = memo[j] = acc[:n_shapes, j].tolist()
        out.append(got)
    return out


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


#: The last workload's divisors: (workload, s, divisors); the workload object is held, so a
#: new one can never be mistaken for it.
_DIVISORS: list[tuple[TargetWorkload, int, Divisors]] = []


def _shape_divisors(w: TargetWorkload, s: int) -> Divisors:
    """The workload-only operands of :func:`dsan.rowkernel._hostable` (the batch featurizer's
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
