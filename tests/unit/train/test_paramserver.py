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
