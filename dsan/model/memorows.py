"""A few class rows recomputed straight from the placement memo, in one call.

A settle recomputes a pod class's one or two changed rows (:meth:`dsan.model.rowcache.
ClassRows.update`), and their placements are nearly always in
:class:`~dsan.placement.PlacementCache`'s memo: nodes go back and forth between a few
states. The general path spends ~45 us there on interpreter and numpy per-call cost (the
memo walk of :meth:`PlacementCache.few`, each row's inputs as Python objects, the node
block's gather, the first layer, the store) around a few microseconds of arithmetic.

:func:`update_py` (the reference) and ``dsan._memorows.update`` (C, built by ``setup.py``)
are twins with one signature: the memo walk (:func:`dsan.placementmemo.recall_py`), each
row's features as :func:`dsan.rowfeatures.featurize_rows` writes them (:func:`rows_py`: FGD's
score through its memo, the image column, the shapes' GPU-model access, then
:func:`dsan.rowkernel.fill_rows_py`'s row), the first layer
(:func:`dsan.model.classrows.first_py`) and the store (:func:`dsan.model.classrows.store_py`);
the C one reads every value where it lies and shares its row writer, sum and store with
``dsan._rowkernel`` and ``dsan._classrows``. A memo miss answers False before anything of
the class is written, and the caller takes the general path, which gives the same bits
(``tests/unit/model/test_memorows.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from dsan import rowfeatures, rowkernel
from dsan.features import N_NODE_FEATURES, TOP_SHAPES, PlacementCache
from dsan.model import classrows
from dsan.placementmemo import Memo, recall_py
from dsan.snapshot import ClusterSnapshot, PodSpec
from dsan.twins import compiled_twin

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

#: :data:`dsan.rowkernel.Columns`, then the GPU model column (the memo's state key reads it).
Cols = tuple[Any, Any, Any, Any, Any, Any, Any, Any, Any]
#: The rest a row reads: the pod's values, the task-type count, the scales, the shapes'
#: divisors and count, the node block's width and its first age column, the node block of
#: all nodes, the (K, n) GPU-model access, the nodes' images (or None), the pod's image,
#: FGD's memo and the function that fills it.
Feat = tuple[list[float], int, tuple[float, float, float], rowkernel.Divisors, int, int, int,
             F32, npt.NDArray[np.bool_], Any, int, dict[float, float],
             Callable[[float], float]]


def rows_py(x: F32, q: F64, rows: list[int], memo: Memo, cols: Cols, feat: Feat) -> bool:
    """``rows``' features into ``x`` ((m, F) float32, the request columns zero) and their
    quantities into ``q`` ((m, 7) float64), as :func:`dsan.rowfeatures.featurize_rows`
    writes them; False (``x`` and ``q`` unwritten) when the memo lacks a row's placement.
    The C twin does this part of :func:`update_py` in its own loop."""
    count, cpu_cap, _, cpu_used, _, gpu_free, _, _, model = cols
    if not recall_py(memo, (cpu_cap, cpu_used, count, model, gpu_free), rows):
        return False
    e_before, e_after, e_slot, e_free = memo[1:5]
    (pv, nt, scales, divs, n_shapes, start, age0, node_cols, access, images, image,
     fgd_memo, fgd_of) = feat
    extra = []
    for j in rows:
        before, frag_after = e_before.item(j), e_after.item(j)
        arg = min(max((frag_after - before) / 1000, -50.0), 50.0)
        fgd = fgd_memo.get(arg)
        extra.append((0.0 if images is None or image < 0 else float(image in images[j]),
                      before, frag_after, e_slot.item(j), e_free[j].tolist(),
                      fgd_of(arg) if fgd is None else fgd, access[:n_shapes, j].tolist()))
    rowkernel.fill_rows_py(x, q, pv, nt, scales, divs, n_shapes, start, age0,
                           node_cols[rows], cols[:8], rows, extra)
    return True


#: What :func:`update_py` stores into, as :meth:`ClassRows.update` passes it: the class's
#: (F, K) first-layer weights, the first column to sum (``h`` without z: the query columns
#: are read by nothing), ``h``, then :func:`~dsan.model.classrows.store_py`'s bias, req_top,
#: req_age, ages, pre, present, dead, quant, at and tick, then the (m, K) float32 array
#: that receives the first layer (its query columns are what ``qv`` is made from).
Cls = tuple[F32, int, int, F32, F32, F32, F64 | None, F32, F32, npt.NDArray[np.bool_], F64,
            I64, int, F32]


def update_py(rows: list[int], memo: Memo, cols: Cols, feat: Feat, cls: Cls) -> bool:
    """Recompute the class rows ``rows`` (a few, unique) from the memo's placements: False,
    the class unwritten, when the memo lacks one."""
    (w_abs, c0, h, bias, req_top, req_age, ages, pre, present, dead, quant, at, tick,
     first) = cls
    x = np.empty((len(rows), w_abs.shape[0]), dtype=np.float32)
    q = np.empty((len(rows), 7))
    if not rows_py(x, q, rows, memo, cols, feat):
        return False
    classrows.first_py(x, w_abs, c0, first)
    # store_py adds the biases into its first argument: a copy keeps ``first`` the C twin's
    classrows.store_py(first.copy(), h, np.array(rows, dtype=np.int64), bias, req_top,
                       req_age, ages, pre, present, dead, quant, q, at, tick)
    return True


def _update_c(*args: Any) -> bool:
    """``dsan._memorows.update``; on arrays of another dtype or layout (TypeError) the
    Python twin, which redoes the walk (rows already recalled are current) and the rest."""
    try:
        return bool(_C.update(*args))
    except TypeError:
        return update_py(*args)


_C: Any = compiled_twin("dsan._memorows")
#: The twin :func:`update_few` calls.
update: Callable[..., bool] = _update_c if _C is not None else update_py


def update_few(pod: PodSpec, snap: ClusterSnapshot, rows_a: I64, node_cols: F32,
               cache: PlacementCache, cls: Cls, plan: list[Any]) -> bool:
    """:data:`update` of the class rows ``rows_a`` (unique, at most
    :data:`dsan.model.classrows.FEW`), ``node_cols`` the node block of *all* nodes; False
    when the memo cannot serve them (the class is then unwritten). ``plan`` is the class's
    own list of the row writer's call-wide values, filled here on its first call and again
    whenever the placement cache's workload changes: the pod's values and the cluster-wide
    room factor are the class's (its key holds every pod field they read, and the factor's
    bit), the shapes' divisors the workload's."""
    # the access first: a GPU-model relabel empties the memo (its keys hold model indices)
    access = cache.access(snap)
    memo = cache.memo(pod, snap, len(rows_a))
    if memo is None:
        return False
    w = cache.workload
    if not plan or plan[0] is not w:
        n_shapes = min(TOP_SHAPES, len(w.freq))
        plan[:] = [w, *rowfeatures.tail_values(pod, snap, cache, n_shapes), n_shapes]
    _, pv, nt, divs, n_shapes = plan
    return update(rows_a.tolist(), memo, (*rowfeatures.columns(snap), snap.gpu_model),
                  (pv, nt, rowfeatures._SCALES, divs, n_shapes, N_NODE_FEATURES,
                   rowfeatures._AGE0, node_cols, access, snap.images, pod.image,
                   rowfeatures._FGD, rowfeatures.fgd_of), cls)
