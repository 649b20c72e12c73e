"""Shadow validation: a degraded model version is rejected and the parameter server restored."""

from __future__ import annotations

import json

import pytest

from dsan.train.distributed import DistConfig, run
from dsan.train.ppo import Args


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


def test_dist_config_refuses_no_workers_and_a_negative_threshold() -> None:
    with pytest.raises(ValueError, match="workers"):
        DistConfig(workers=0)
    with pytest.raises(ValueError, match="rollback_threshold"):
        DistConfig(rollback_threshold=-1.0)
