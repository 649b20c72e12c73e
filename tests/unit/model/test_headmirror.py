"""The numpy mirror of DSAN's head (dsan.model.headmirror): its few-row path against its
many-row path. That the mirror, behind the head cache, gives the model's logits is
test_serving_headcache.py's (run both with DSAN_PURE_PYTHON=1 for the numpy twins)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dsan.features import default_workload
from dsan.filtering import feasible_nodes
from dsan.model import headmirror
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


@pytest.mark.parametrize("which", ["residual", "mlp", "shipped", "gated"])
def test_few_row_head_matches_the_many_row_head(which: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The settle's path (HeadMirror._few: up to FEW_ROWS rows) against the many-row
    head on the same rows and extremes: the same request columns, dead rows the same value,
    other rows to float32 rounding; ages that push tel_age out of [0, 1] (a skewed clock)
    and absent telemetry included."""
    if which == "shipped":
        model, _ = load(DEFAULT_DIR)
    elif which == "residual":
        model = _random_residual(8)
    else:
        torch.manual_seed(5)
        model = DSANNet(ModelConfig(hidden=8))
        if which == "gated":  # many dead rows
            gate_on_telemetry(model)
    snap = _snap(40, seed=21)
    ages = snap.telemetry_age_s
    assert ages is not None
    ages[::5] = np.inf
    ages[3::7] = -0.5  # tel_age < 0: no row counts as dead
    sm = ServingModel(model, default_workload())
    assert sm.head is not None
    head, mirror = sm.head, sm.head._mirror
    rng = np.random.default_rng(22)
    dead_seen = 0
    for pod in PODS:
        nodes = feasible_nodes(pod, snap)
        sm.logits(pod, snap, nodes)
        c = head._classes[_class_of(pod, snap)]
        q_all = c.quant.take(nodes, axis=1)
        lo, hi = q_all[:5].min(axis=1, keepdims=True), q_all.max(axis=1, keepdims=True)
        for _ in range(12):
            k = int(rng.integers(1, headmirror.FEW_ROWS + 1))
            sub = rng.choice(nodes, size=min(k, len(nodes)), replace=False).astype(np.int64)
            q, age = c.quant.take(sub, axis=1), ages[sub]
            few = mirror.logits(c, snap, sub, q, lo, hi, age)
            monkeypatch.setattr(headmirror, "FEW_ROWS", 0)
            many = mirror.logits(c, snap, sub, q, lo, hi, age)
            monkeypatch.undo()
            np.testing.assert_allclose(few, many, rtol=1e-6, atol=1e-6)
            # dead as logits() decides it: the cached gate state, every column in [0, 1]
            dead = c.dead[sub] & (np.isfinite(age) == c.present[sub]) & bool((age >= 0).all())
            np.testing.assert_array_equal(few[dead], many[dead])
            dead_seen += int(dead.sum())
    if which == "gated":
        assert dead_seen > 0
