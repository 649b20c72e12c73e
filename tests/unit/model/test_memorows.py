"""dsan.model.memorows: a few class rows recomputed from the placement memo in one call.

The head cache with the memo path stores the same bits as one without it (the general path:
featurize_rows, the few-row sum, the store) through allocations, releases and prefetches;
its two twins (dsan/_memorows.c and update_py) do the same to the class, the memo's entry
and the memos on every call the world makes, and leave the class unwritten on a miss. Run
with DSAN_PURE_PYTHON=1 for the Python twin alone."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dsan.features import default_workload, fgd_select_gpus
from dsan.filtering import allocate, feasible_nodes, release
from dsan.model import memorows, rowcache
from dsan.model.export import DEFAULT_DIR, load
from dsan.model.net import DSANNet, ModelConfig
from dsan.model.serving import ServingModel
from dsan.snapshot import ClusterSnapshot, PodSpec
from tests.support.headworld import PODS, random_residual, random_snapshot

needs_c = pytest.mark.skipif(memorows._C is None, reason="dsan._memorows not built")
CLASS_ARRAYS = ("pre", "present", "dead", "quant", "at", "qv", "att")


def _model(which: str) -> DSANNet:
    if which == "shipped":
        return load(DEFAULT_DIR)[0]
    if which == "residual":
        return random_residual(8)
    torch.manual_seed(5)
    return DSANNet(ModelConfig(hidden=8))  # uses the attention output: qv and att stored


@contextmanager
def _general_path() -> Iterator[None]:
    """ClassRows.update without the memo path."""
    saved = rowcache.update_few
    rowcache.update_few = lambda *a: False
    try:
        yield
    finally:
        rowcache.update_few = saved


def _run(seed: int, which: str, steps: int, on_call: Callable[..., Any] | None = None
         ) -> tuple[ServingModel, ServingModel, int]:
    """Two serving models, one with the memo path and one without, through the same
    requests, allocations and prefetches; their logits must agree. Returns both and how
    many updates the memo path served."""
    model = _model(which)
    snap = random_snapshot(30, seed)
    rng = np.random.default_rng(seed)
    fast, general = ServingModel(model, default_workload()), ServingModel(model,
                                                                          default_workload())
    served = [0]
    twin = memorows.update

    def spy(*args: Any) -> bool:
        if on_call is not None:
            on_call(*args)
        done = twin(*args)
        served[0] += done
        return done

    memorows.update = spy
    placed: list[tuple[PodSpec, int, tuple[int, ...]]] = []
    try:
        for step in range(steps):
            pod = PODS[step % len(PODS)]
            nodes = feasible_nodes(pod, snap)
            if not len(nodes):
                continue
            got = fast.logits(pod, snap, nodes)
            with _general_path():
                want = general.logits(pod, snap, nodes)
            np.testing.assert_array_equal(got, want)
            best = int(nodes[int(rng.integers(min(3, len(nodes))))])
            gpus = fgd_select_gpus(pod, snap, best, default_workload())
            allocate(snap, pod, best, gpus)
            placed.append((pod, best, gpus))
            if len(placed) > 3:  # an older pod leaves: nodes go back to earlier states
                release(snap, *placed.pop(int(rng.integers(len(placed)))))
            assert _prefetch(fast, pod, snap) == _prefetch_general(general, pod, snap)
    finally:
        memorows.update = twin
    return fast, general, served[0]


def _prefetch(sm: ServingModel, pod: PodSpec, snap: ClusterSnapshot) -> bool:
    return sm.prefetch(pod, snap)


def _prefetch_general(sm: ServingModel, pod: PodSpec, snap: ClusterSnapshot) -> bool:
    with _general_path():
        return _prefetch(sm, pod, snap)


@pytest.mark.parametrize("which", ["shipped", "residual", "attention"])
def test_the_memo_path_stores_what_the_general_path_stores(which: str) -> None:
    fast, general, served = _run(11, which, 60)
    assert fast.head is not None and general.head is not None
    assert served > 20  # the memo path did serve most settles' rows
    assert fast.head._classes.keys() == general.head._classes.keys()
    for key, c in fast.head._classes.items():
        g = general.head._classes[key]
        for name in CLASS_ARRAYS:
            np.testing.assert_array_equal(getattr(c, name), getattr(g, name), err_msg=name)


def _state(args: tuple[Any, ...]) -> list[Any]:
    """Everything a call may write: the memo's arrays and dicts, the class's arrays."""
    memo, cls = args[1], args[4]
    return [*memo[1:9], dict(memo[10]), dict(memo[11]), *cls[7:12], cls[13]]


def _same(a: list[Any], b: list[Any]) -> None:
    for x, y in zip(a, b, strict=True):
        if isinstance(x, dict):  # the memos: floats, or (float, int, int64 array)
            assert x.keys() == y.keys()
            for k, v in x.items():
                if isinstance(v, tuple):
                    assert v[:2] == y[k][:2] and v[2].tobytes() == y[k][2].tobytes()
                else:
                    assert v == y[k]
        else:
            assert x.tobytes() == y.tobytes()


@needs_c
@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 2**16), which=st.sampled_from(["shipped", "attention"]))
def test_the_twins_do_the_same_on_every_call(seed: int, which: str) -> None:
    """Each call the world makes, replayed on two copies of everything it reads and writes:
    the C twin and update_py answer alike and leave the same bits; a miss writes nothing of
    the class."""
    calls = [0, 0]

    def both(*args: Any) -> None:
        py, c = copy.deepcopy(args), copy.deepcopy(args)
        done = memorows.update_py(*py)
        assert bool(memorows._C.update(*c)) == done
        _same(_state(c), _state(py))
        if not done:
            _same(_state(c)[-6:], _state(args)[-6:])
        calls[done] += 1

    _run(seed, which, 60, both)
    assert calls[True] >= 5


@needs_c
def test_arrays_of_another_dtype_take_the_python_twin() -> None:
    """A float32 column (not what the sidecar's snapshots hold): the C twin refuses it and
    the Python twin serves, with the same result as the general path."""
    seen: list[tuple[Any, ...]] = []
    _run(3, "shipped", 12, lambda *a: seen.append(copy.deepcopy(a)))
    rows, memo, cols, feat, cls = seen[-1]
    cols32 = (*cols[:3], cols[3].astype(np.float32), *cols[4:])
    with pytest.raises(TypeError):
        memorows._C.update(rows, memo, cols32, feat, cls)
    a, b = copy.deepcopy((rows, memo, cols32, feat, cls)), copy.deepcopy(
        (rows, memo, cols32, feat, cls))
    assert memorows._update_c(*a) == memorows.update_py(*b)
    _same(_state(a), _state(b))
