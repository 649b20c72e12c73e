"""The parameter server's verdicts: accept a version, or restore the last good one."""

from __future__ import annotations

import torch

from dsan.model.net import DSANNet, ModelConfig
from dsan.train.paramserver import ParameterServer


def test_parameter_server_rolls_back_a_degraded_version() -> None:
    torch.manual_seed(0)
    model = DSANNet(ModelConfig(hidden=8))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    ps = ParameterServer(model, opt, threshold=1.0)
    assert ps.judge(90.0)  # v0 accepted
    good = {k: v.clone() for k, v in model.state_dict().items()}
    ps.bump()
    with torch.no_grad():
        model.head.skip.weight.mul_(-50)  # inject a degraded version
    assert not ps.judge(80.0)
    assert all(torch.equal(good[k], v) for k, v in model.state_dict().items())
    assert ps.holds_good_weights()
    assert ps.rollbacks == [{"from_version": 1, "to_version": 0, "score": 80.0, "good_score": 90.0}]
    ps.bump()
    with torch.no_grad():
        model.head.skip.bias.add_(0.01)
    assert not ps.holds_good_weights()
    assert ps.judge(89.5)  # within the threshold: accepted, becomes the last good version
    assert ps.good_version == 2
    assert ps.holds_good_weights()


def _adam_state(opt: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [t.clone() for s in opt.state.values() for t in s.values()]


def _step(model: DSANNet, opt: torch.optim.Optimizer) -> None:
    opt.zero_grad()
    sum(p.sum() for p in model.parameters()).backward()  # type: ignore[union-attr]
    opt.step()


def test_a_second_rollback_restores_the_good_optimiser_state_too() -> None:
    """Steps taken after a rollback must not write into the last good version's optimiser
    state: two rejected versions in a row restore the same Adam moments, not the first
    rejected step's."""
    torch.manual_seed(0)
    model = DSANNet(ModelConfig(hidden=8))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    _step(model, opt)
    ps = ParameterServer(model, opt, threshold=1.0)
    assert ps.judge(90.0)
    good = _adam_state(opt)
    for v in (1, 2):  # two degraded versions in a row
        _step(model, opt)
        ps.bump()
        assert not ps.judge(50.0)
        got = _adam_state(opt)
        assert all(torch.equal(a, b) for a, b in zip(got, good, strict=True)), f"after v{v}"
