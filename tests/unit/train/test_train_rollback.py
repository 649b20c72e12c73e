"""Shadow validation: a degraded model version is rejected and the parameter server restored."""

from __future__ import annotations

import json

import pytest
import torch

from dsan.model.net import DSANNet, ModelConfig
from dsan.train.distributed import DistConfig, ParameterServer, run
from dsan.train.ppo import Args


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
    assert ps.rollbacks == [{"from_version": 1, "to_version": 0, "score": 80.0, "good_score": 90.0}]
    ps.bump()
    assert ps.judge(89.5)  # within the threshold: accepted, becomes the last good version
    assert ps.good_version == 2


@pytest.mark.slow
def test_rpc_training_rejects_an_injected_degraded_version(tmp_path) -> None:
    a = Args(
        out=str(tmp_path),
        n_nodes=16,
        iterations=2,
        episodes_per_iter=1,
        eval_episodes=1,
        export=False,
        progress=False,
        hidden=8,
    )
    d = DistConfig(workers=1, master_port=29611, rollback_threshold=0.5, inject_degraded_at=0)
    summary = run(a, d)
    assert summary["rollbacks"] and summary["rollbacks"][0]["from_version"] == 1
    assert summary["final_weights_equal_good"]
    rows = (tmp_path / "metrics.csv").read_text()
    assert "rollback v1->v0" in rows
    json.dumps(summary)


def test_dist_config_refuses_an_unknown_ship_mode() -> None:
    with pytest.raises(ValueError, match="ship"):
        DistConfig(ship="weights")
    assert DistConfig().ship == "gradients"
