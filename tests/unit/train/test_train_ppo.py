"""The openb stage's training plumbing: rewards, imitation, CLI, checkpoints and resume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from dsan.model.net import DSANNet, ModelConfig
from dsan.train.collector import collect
from dsan.train.openb import EnvConfig, RewardWeights, make_episode
from dsan.train.ppo import Args
from dsan.train.teachers import make_teacher
from dsan.train.updates import imitation_update

SMALL = EnvConfig(n_nodes=12)


def test_util_reward_sums_to_the_allocation_ratio() -> None:
    env = EnvConfig(n_nodes=12, reward=RewardWeights(1.0, 0.0, 0.0, 0.0, 0.0))
    ep = make_episode(env, 3)
    (ro,) = collect([ep], None, "teacher", make_teacher("bestfit", ep.target), keep=False)
    # Forced (single-candidate) placements earn no decision reward, so <=.
    assert 0 < sum(ro.reward) <= ro.summary["alloc_pct"] / 100 + 1e-9
    assert len(ro) > 10 and ro.summary["pods"] >= len(ro) + ro.summary["failed"]
    assert ro.total == pytest.approx(sum(ro.reward)) and not ro.x  # keep=False: no features


def test_imitation_moves_the_policy_towards_the_teacher() -> None:
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    model = DSANNet(ModelConfig(hidden=8))
    eps = []
    for s in (1, 2):
        ep = make_episode(SMALL, s)
        eps += collect([ep], None, "teacher", make_teacher("fgd-pack", ep.target), rng)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    first = imitation_update(model, opt, eps, 1, 32, rng)
    for _ in range(4):
        last = imitation_update(model, opt, eps, 1, 32, rng)
    assert last < 0.8 * first


def test_bad_args_are_refused() -> None:
    with pytest.raises(ValueError, match="teacher"):
        Args(teacher="nonsense")
    with pytest.raises(ValueError, match="n_nodes"):
        EnvConfig(n_nodes=1)
    with pytest.raises(ValueError, match="reward weight util"):
        RewardWeights(util=-1)


def test_cli_registers_train(capsys: pytest.CaptureFixture[str]) -> None:
    from dsan.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["train", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "--workers" in out and "--rollback-threshold" in out and "--resume" in out


def test_train_checkpoints_and_resumes(tmp_path: Path) -> None:
    import csv

    from dsan.train.ppo import train

    kw = dict(
        out=str(tmp_path),
        n_nodes=10,
        hidden=8,
        imitation_episodes=1,
        imitation_epochs=1,
        episodes_per_iter=1,
        eval_episodes=1,
        export=False,
        progress=False,
    )
    first = train(Args(iterations=1, **kw))  # type: ignore[arg-type]
    assert (tmp_path / "ckpt.pt").is_file() and (tmp_path / "model" / "manifest.json").is_file()
    second = train(Args(iterations=2, resume=True, **kw))  # type: ignore[arg-type]
    rows = list(csv.DictReader((tmp_path / "metrics.csv").open()))
    # One imitation row, iteration 0 from the first run, iteration 1 appended on resume.
    assert [r["iteration"] for r in rows] == ["-1", "0", "1"]
    assert first["teacher"] == second["teacher"]


def test_a_resumed_run_keeps_the_best_score_to_beat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """best.pt holds a better version than the checkpoint: after a resume, an iteration that
    beats the checkpoint but not best.pt must not replace it."""
    import dsan.train.ppo as ppo

    scores: list[float] = []

    def fake_evaluate(model: Any, env: Any, seeds: Any, policy: str | None = None) -> float:
        return 50.0 if policy is not None else scores.pop(0)

    monkeypatch.setattr(ppo, "evaluate", fake_evaluate)
    kw = dict(out=str(tmp_path), n_nodes=10, hidden=8, imitation_episodes=1,
              imitation_epochs=1, episodes_per_iter=1, eval_episodes=1, export=False,
              progress=False)
    scores[:] = [90.0, 80.0, 0.0]  # imitation (best), iteration 0, the final summary
    ppo.train(Args(iterations=1, **kw))  # type: ignore[arg-type]
    best = torch.load(tmp_path / "best.pt", weights_only=True)
    scores[:] = [85.0] * 3  # every later version: better than iteration 0, worse than best
    ppo.train(Args(iterations=2, resume=True, **kw))  # type: ignore[arg-type]
    after = torch.load(tmp_path / "best.pt", weights_only=True)
    assert all(torch.equal(best[k], after[k]) for k in best)


def test_a_resumed_run_plays_the_episodes_an_uninterrupted_one_plays(tmp_path: Path) -> None:
    """The checkpoint keeps the random stream itself: after a resume, iteration 1 draws the
    same episodes and minibatches as without the interruption."""
    import csv

    from dsan.train.ppo import train

    def rows(out: Path) -> list[dict[str, str]]:
        drop = ("wall_s", "decisions_per_s")
        return [{k: v for k, v in r.items() if k not in drop}
                for r in csv.DictReader((out / "metrics.csv").open())]

    kw = dict(n_nodes=10, hidden=8, imitation_episodes=1, imitation_epochs=1,
              episodes_per_iter=1, eval_episodes=1, export=False, progress=False)
    train(Args(out=str(tmp_path / "whole"), iterations=2, **kw))  # type: ignore[arg-type]
    train(Args(out=str(tmp_path / "cut"), iterations=1, **kw))  # type: ignore[arg-type]
    train(Args(out=str(tmp_path / "cut"), iterations=2, resume=True, **kw))  # type: ignore[arg-type]
    assert rows(tmp_path / "cut") == rows(tmp_path / "whole")


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--scenario", "seed-table1", "--n-nodes", "12"], "--n-nodes"),
        (["--scenario", "seed-table1", "--workers", "2"], "--workers"),
        (["--select-seeds", "1", "2"], "--select-seeds"),
        (["--workers", "2", "--resume"], "--resume"),
        (["--workers", "2", "--model-dir", "m"], "--model-dir"),
        (["--workers", "2", "--imitation-episodes", "3"], "--imitation-episodes"),
        (["--workers", "-1"], "--workers"),
        (["--rank", "1"], "--rank"),
        (["--workers", "2", "--rollback-threshold", "-1"], "rollback_threshold"),
        (["--minibatch", "0"], "minibatch"),
        (["--scenario", "seed-table1", "--eval-episodes", "0"], "eval_episodes"),
    ],
)
def test_cli_refuses_flags_the_chosen_trainer_would_ignore_or_choke_on(
    argv: list[str], says: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dsan.train.cli as cli
    import dsan.train.distributed as dist

    def ran(*_: Any) -> dict[str, Any]:
        raise AssertionError("a trainer ran")

    for mod, name in ((cli, "train"), (cli, "train_scenario"), (cli, "select"), (dist, "run")):
        monkeypatch.setattr(mod, name, ran)
    from dsan.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["train", *argv])
    assert says in str(exc.value.code)
