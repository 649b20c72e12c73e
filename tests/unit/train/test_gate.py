"""The scenario stage's gate and freeze (dsan.train.gate): what it trains, and a residual
that is one constant per pod without telemetry, through training steps too. That a trained
model keeps every openb decision is test_scenario_train.py's (and the anchor's check)."""

from __future__ import annotations

import torch

from dsan.features import FEATURE_NAMES
from dsan.model.export import DEFAULT_DIR, load
from dsan.model.net import DSANNet, ModelConfig
from dsan.train.gate import (
    GATE_FEATURE,
    OPENB_ONLY,
    QUERY_CUT,
    TRAINED,
    freeze,
    gate,
    gate_margin,
)


def _train_steps(model: DSANNet, opt: torch.optim.Optimizer, set_col: int | None = None,
                 with_value: bool = False) -> None:
    """Three optimiser steps on random rows (column ``set_col`` at 1), against a random
    direction of the logits (and the values' sum, with ``with_value``): what the scenario
    stage's updates do to the parameters it trains."""
    for _ in range(3):
        xx = torch.rand(20, len(FEATURE_NAMES))
        if set_col is not None:
            xx[:, set_col] = 1.0
        out, val = model.score(
            xx,
            torch.randn(20, 2, model.hidden),
            torch.ones(20, dtype=torch.bool),
            torch.zeros(20, dtype=torch.long),
            1,
        )
        loss = (out * torch.randn(20)).sum() + (val.sum() if with_value else 0.0)
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_freeze_keeps_the_openb_stage_parameters() -> None:
    model, _ = load(DEFAULT_DIR)
    trainable = {id(p) for p in freeze(model)}
    for name, p in model.named_parameters():
        assert (id(p) in trainable) == name.startswith(TRAINED), name
    assert not model.head.prior_scale.requires_grad and not model.head.skip.weight.requires_grad


def test_gate_makes_the_residual_constant_without_telemetry() -> None:
    torch.manual_seed(1)
    model = DSANNet(ModelConfig(hidden=32, head="residual"))
    gate(model)
    gate(model)  # idempotent: the bias is shifted once
    torch.manual_seed(0)
    col = FEATURE_NAMES.index(GATE_FEATURE)
    opt = torch.optim.Adam(freeze(model), lr=0.5)  # what the scenario stage trains
    _train_steps(model, opt)  # training steps cannot open the gate (gradient hooks)
    assert bool((model.head.proj.weight[:, col] == 100.0).all())
    first, last = model.head.mlp[0], model.head.mlp[2]
    assert isinstance(first, torch.nn.Linear) and isinstance(last, torch.nn.Linear)
    assert float(first.weight[:, 2 * model.hidden :].abs().max()) == 0.0
    with torch.no_grad():  # a trained-looking residual: the gate's cut weights stay cut
        last.weight.normal_()
    x = torch.rand(50, len(FEATURE_NAMES))
    z = torch.randn(50, 2, model.hidden)
    seg = torch.zeros(50, dtype=torch.long)
    on = torch.ones(50, dtype=torch.bool)
    x[:, col] = 0.0
    base = model.head.skip(x).squeeze(-1)  # + prior: FGD's column, the same in both calls
    logits, _ = model.score(x, z, on, seg, 1)
    resid = (
        logits
        - base
        - torch.nn.functional.softplus(model.head.prior_scale) * 100 * x[:, model.head.prior_col]
    )
    assert float(resid.max() - resid.min()) < 1e-4  # one constant per pod: no re-ranking
    assert gate_margin(model, x) < -50
    x[:, col] = 1.0  # with telemetry the residual is live again
    logits, _ = model.score(x, z, on, seg, 1)
    resid = (
        logits
        - model.head.skip(x).squeeze(-1)
        - torch.nn.functional.softplus(model.head.prior_scale) * 100 * x[:, model.head.prior_col]
    )
    assert float(resid.max() - resid.min()) > 1e-2


def test_the_residual_never_reads_the_openb_only_columns() -> None:
    """shape1_room_gpu_bound is for the openb stage's skip alone: after gate() and training
    steps on rows where it varies, the residual's logits and values do not depend on it,
    with telemetry (where the residual is live) too."""
    torch.manual_seed(2)
    model = DSANNet(ModelConfig(hidden=32, head="residual"))
    cut = [FEATURE_NAMES.index(n) for n in OPENB_ONLY]
    assert float(model.head.proj.weight[:, cut].abs().min()) > 0  # random at start
    gate(model)
    opt = torch.optim.Adam(freeze(model), lr=0.5)
    tel = FEATURE_NAMES.index(GATE_FEATURE)
    _train_steps(model, opt, set_col=tel, with_value=True)
    assert float(model.head.proj.weight[:, cut].abs().max()) == 0.0
    x = torch.rand(30, len(FEATURE_NAMES))
    x[:, tel] = 1.0
    x[:, model.head.cpu_only_col] = 1.0  # the frozen gpu_skip (which may read it) is off
    z = torch.randn(30, 2, model.hidden)
    args = (torch.ones(30, dtype=torch.bool), torch.zeros(30, dtype=torch.long), 1)
    y = x.clone()
    y[:, cut] = torch.rand(30, len(cut)) * 5
    with torch.no_grad():
        model.head.skip.weight[0, cut] = 0.0  # the skip is the openb stage's, not tested here
        a, va = model.score(x, z, *args)
        b, vb = model.score(y, z, *args)
    assert torch.equal(a, b) and torch.equal(va, vb)


def test_the_attention_query_never_reads_the_query_cut_columns() -> None:
    """cpu_bound_cpu_per_gpu is cut from the fusion's query too: after gate()
    and training steps on rows where it varies, the attention's output (what the residual
    reads with telemetry) does not depend on it; the other columns' query weights train."""
    torch.manual_seed(3)
    model = DSANNet(ModelConfig(hidden=32, head="residual"))
    cut = [FEATURE_NAMES.index(n) for n in QUERY_CUT]
    assert set(QUERY_CUT) <= set(OPENB_ONLY)
    assert float(model.fusion.query.weight[:, cut].abs().min()) > 0  # random at start
    gate(model)
    before = model.fusion.query.weight.detach().clone()
    opt = torch.optim.Adam(freeze(model), lr=0.5)
    tel = FEATURE_NAMES.index(GATE_FEATURE)
    for _ in range(3):  # the streams through the fusion, so its query gets gradients
        xx = torch.rand(20, len(FEATURE_NAMES))
        xx[:, tel] = 1.0
        z, _ = model.fusion(xx, torch.randn(20, 2, model.hidden))
        opt.zero_grad()
        (z * torch.randn_like(z)).sum().backward()
        opt.step()
    w = model.fusion.query.weight.detach()
    assert float(w[:, cut].abs().max()) == 0.0
    assert not torch.equal(w, before)  # the rest trained
    x = torch.rand(30, len(FEATURE_NAMES))
    y = x.clone()
    y[:, cut] = torch.rand(30, len(cut)) * 5
    s = torch.randn(30, 2, model.hidden)
    with torch.no_grad():
        assert torch.equal(model.fusion(x, s)[0], model.fusion(y, s)[0])
