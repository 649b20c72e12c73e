"""A training run's metrics.csv (dsan.train.rundir.CsvLog): the header, resume, the columns kept,
and the floats sent to TensorBoard."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest
import torch

from dsan.train.ppo import PPO_FIELDS
from dsan.train.rundir import CsvLog
from dsan.train.scenario_train import SCENARIO_FIELDS


class FakeBoard:
    def __init__(self) -> None:
        self.scalars: list[tuple[str, float, int]] = []
        self.flushes = 0

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        self.scalars.append((tag, value, step))

    def flush(self) -> None:
        self.flushes += 1


def _rows(path: Path) -> list[dict[str, Any]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def test_rows_append_across_a_resume_and_floats_go_to_the_board(tmp_path: Path) -> None:
    path, tb = tmp_path / "metrics.csv", FakeBoard()
    log = CsvLog(path, SCENARIO_FIELDS, resume=False)
    log.write({"iteration": -1, "phase": "imitation", "loss": 0.5, "eval_extra": 2.0,
               "note": "x"}, tb)
    CsvLog(path, SCENARIO_FIELDS, resume=True).write(
        {"iteration": 0, "phase": "ppo", "reward": -0.25, "kl": 0.01}, tb)
    rows = _rows(path)
    assert [r["iteration"] for r in rows] == ["-1", "0"]
    assert rows[0]["loss"] == "0.5" and rows[1]["reward"] == "-0.25" and rows[1]["loss"] == ""
    assert "eval_extra" not in rows[0] and list(rows[0]) == list(SCENARIO_FIELDS)
    assert tb.scalars == [("imitation/loss", 0.5, -1), ("imitation/eval_extra", 2.0, -1),
                          ("ppo/reward", -0.25, 0), ("ppo/kl", 0.01, 0)]
    assert tb.flushes == 2
    CsvLog(path, SCENARIO_FIELDS, resume=False)  # a fresh run starts the file again
    assert _rows(path) == []


def test_a_resume_without_a_file_starts_one_with_its_header(tmp_path: Path) -> None:
    """A resumed run whose metrics.csv is gone (a new output folder with an old
    checkpoint) still gets a readable file, not headerless rows."""
    path = tmp_path / "metrics.csv"
    CsvLog(path, PPO_FIELDS, resume=True).write(
        {"iteration": 3, "phase": "ppo-dist", "event": "rollback v4->v3", "wall_s": 1.5})
    rows = _rows(path)
    assert list(rows[0]) == list(PPO_FIELDS)
    assert rows[0]["event"] == "rollback v4->v3" and rows[0]["iteration"] == "3"


def test_without_a_board_only_the_csv_is_written(tmp_path: Path) -> None:
    path = tmp_path / "metrics.csv"
    log = CsvLog(path, PPO_FIELDS, resume=False)
    log.write({"iteration": -1, "phase": "imitation", "loss": 0.25, "eval_alloc_pct": 93.5})
    assert _rows(path)[0]["eval_alloc_pct"] == "93.5"


def test_a_crash_while_checkpointing_leaves_the_previous_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ckpt.pt and best.pt are replaced whole: a write cut short (a crash, a full disk)
    leaves the previous file loadable for --resume."""
    from dsan.model.net import DSANNet, ModelConfig
    from dsan.train.rundir import RunDir

    run = RunDir(tmp_path, PPO_FIELDS, seed=1, resume=False)
    model = DSANNet(ModelConfig(hidden=8))
    opt = torch.optim.Adam(model.parameters())
    run.checkpoint(model, opt, 0)
    run.save_best(model)
    real = torch.save

    def cut_short(obj: Any, f: Any) -> None:
        real(obj, f)
        with open(f, "r+b") as fh:
            fh.truncate(100)
        raise OSError("no space left on device")

    monkeypatch.setattr(torch, "save", cut_short)
    with pytest.raises(OSError):
        run.checkpoint(model, opt, 1)
    with pytest.raises(OSError):
        run.save_best(model)
    monkeypatch.undo()
    assert torch.load(tmp_path / "ckpt.pt", weights_only=False)["iteration"] == 0
    torch.load(tmp_path / "best.pt", weights_only=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt", "ckpt.pt", "metrics.csv"]
