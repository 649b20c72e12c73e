"""The scenario stage's training log (dsan.train.scenario_log): the CSV's header, resume and
columns, and the floats sent to TensorBoard."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from dsan.train.scenario_log import CsvLog


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
    log = CsvLog(path, resume=False)
    log.write(tb, -1, {"phase": "imitation", "loss": 0.5, "eval_extra": 2.0, "note": "x"})
    CsvLog(path, resume=True).write(tb, 0, {"phase": "ppo", "reward": -0.25, "kl": 0.01})
    rows = _rows(path)
    assert [r["iteration"] for r in rows] == ["-1", "0"]
    assert rows[0]["loss"] == "0.5" and rows[1]["reward"] == "-0.25" and rows[1]["loss"] == ""
    assert "eval_extra" not in rows[0] and list(rows[0]) == list(CsvLog.FIELDS)
    assert tb.scalars == [("imitation/loss", 0.5, -1), ("imitation/eval_extra", 2.0, -1),
                          ("ppo/reward", -0.25, 0), ("ppo/kl", 0.01, 0)]
    assert tb.flushes == 2
    CsvLog(path, resume=False)  # a fresh run starts the file again
    assert _rows(path) == []
