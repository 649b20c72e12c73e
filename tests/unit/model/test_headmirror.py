"""The numpy mirror of DSAN's head (dsan.model.headmirror): its one-call path
(set_logits: headscan.head_logits, C or its numpy twin) against its many-row numpy head,
and the settle's path staying in the C twins. That the mirror, behind the head cache, gives
the model's logits is test_serving_headcache.py's (run both with DSAN_PURE_PYTHON=1 for the
numpy twins)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dsan.features import default_workload, fgd_select_gpus
from dsan.filtering import allocate, feasible_nodes, release
from dsan.model import headmirror, headscan
from dsan.model.export import DEFAULT_DIR, load
from dsan.model.headcache import _class_of
from dsan.model.net import DSANNet, ModelConfig
from dsan.model.serving import ServingModel
from tests.unit.model.test_serving_headcache import (
    PODS,
    _random_residual,
    _snap,
    gate_on_telemetry,
)


@pytest.mark.skipif(not headscan.compiled, reason="dsan._headscan not built")
def test_the_settle_path_stays_in_the_c_twins(monkeypatch: pytest.MonkeyPatch) -> None:
    """A prefetch after an assumption (the settle) and the next request's few changed rows
    reach the C twins with arrays they accept: a Fortran-ordered gather of the class's
    quantities once sent every settle to numpy without any error to show for it."""
    model, _ = load(DEFAULT_DIR)
    snap = _snap(40, seed=8)
    sm = ServingModel(model, default_workload())
    fell_back: list[str] = []
    for name in ("request_rows_py", "few_head_py", "head_logits_py"):
        twin = getattr(headscan, name)

        def spy(*a: object, _twin: object = twin, _name: str = name) -> object:
            fell_back.append(_name)
            return _twin(*a)  # type: ignore[operator]

        monkeypatch.setattr(headscan, name, spy)
    pod = PODS[0]  # many feasible nodes: the assumptions rarely move the extremes
    nodes = feasible_nodes(pod, snap)
    placed: list[tuple[int, tuple[int, ...]]] = []
    few_seen = 0
    for _ in range(8):
        got = sm.logits(pod, snap, nodes)
        best = int(nodes[int(np.argmax(got))])
        gpus = fgd_select_gpus(pod, snap, best, default_workload())
        allocate(snap, pod, best, gpus)
        placed.append((best, gpus))
        if len(placed) > 2:  # an older pod leaves too: two rows of the class change
            release(snap, pod, *placed.pop(0))
        assert sm.head is not None
        before = sm.head.rows_scored
        assert sm.prefetch(pod, snap)
        few_seen += 2 <= sm.head.rows_scored - before <= 4  # a settle of a few rows
    assert few_seen
    assert fell_back == []


@pytest.mark.parametrize("which", ["shipped", "residual", "gated", "mlp"])
def test_set_logits_in_one_call_matches_the_numpy_head(which: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """HeadMirror.set_logits' one-call head (the C twin when built) against the numpy head
    it hands rows to above C_HEAD_MAX, on the same class rows and extremes: the same rows,
    ticks and ages written, logits to float32 rounding; absent telemetry and skewed ages
    included."""
    if which == "shipped":
        model, _ = load(DEFAULT_DIR)
    elif which == "residual":
        model = _random_residual(8)
    else:
        torch.manual_seed(6)
        model = DSANNet(ModelConfig(hidden=8))
        if which == "gated":
            gate_on_telemetry(model)
    rng = np.random.default_rng(23)
    bare = _snap(40, seed=25)
    bare.telemetry = bare.telemetry_age_s = None
    for snap in (_snap(40, seed=24), bare):
        if snap.telemetry_age_s is not None:
            snap.telemetry_age_s[::6] = np.nan
            snap.telemetry_age_s[2::9] = -0.5
        sm = ServingModel(model, default_workload())
        assert sm.head is not None
        head, mirror = sm.head, sm.head._mirror
        for pod in PODS:
            nodes = feasible_nodes(pod, snap)
            sm.logits(pod, snap, nodes)
            c = head._classes[_class_of(pod, snap, sm._placements(snap))]
            lo, hi = headscan.extremes(c.quant, nodes)
            todo = np.flatnonzero(rng.random(len(nodes)) < 0.5).astype(np.int64)
            n = len(snap)
            got = [np.zeros(n), np.full(n, -2, dtype=np.int64), np.full(n, np.nan),
                   np.zeros(len(nodes))]
            ref = [a.copy() for a in got]
            mirror.set_logits(c, snap, nodes, todo, lo, hi, *got)
            monkeypatch.setattr(headmirror, "C_HEAD_MAX", -1)
            mirror.set_logits(c, snap, nodes, todo, lo, hi, *ref)
            monkeypatch.undo()
            np.testing.assert_allclose(got[0], ref[0], rtol=1e-5, atol=1e-5)
            for g, r in zip(got[1:3], ref[1:3], strict=True):
                np.testing.assert_array_equal(g, r)
            np.testing.assert_allclose(got[3], ref[3], rtol=1e-5, atol=1e-5)
