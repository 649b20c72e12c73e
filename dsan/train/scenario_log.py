"""The scenario stage's training log: ``metrics.csv`` and the same scalars in TensorBoard.

One row per phase step of :func:`dsan.train.scenario_train.train` (the imitation phase as
iteration -1, then one per PPO iteration), written as it happens so a crashed or resumed run
keeps what it logged: a run resumed from its checkpoint appends to the file, any other run
starts it with a header. Every float of a row goes to TensorBoard; the CSV keeps only
:attr:`CsvLog.FIELDS`.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

__all__ = ["CsvLog"]


class CsvLog:
    """metrics.csv (appended on resume) and the same scalars to TensorBoard."""

    FIELDS = (
        "iteration",
        "phase",
        "loss",
        "reward",
        "eval_reward",
        "eval_utilization_pct",
        "eval_sla_violation_pct",
        "eval_cost",
        "eval_p99_task_latency_s",
        "eval_queueing_events",
        "pg",
        "vf",
        "ent",
        "kl",
        "wall_s",
    )

    def __init__(self, path: Path, resume: bool) -> None:
        self.path = path
        if not resume:
            with path.open("w", newline="") as f:
                csv.DictWriter(f, self.FIELDS).writeheader()

    def write(self, tb: Any, it: int, row: dict[str, Any]) -> None:
        row = {"iteration": it, **row}
        with self.path.open("a", newline="") as f:
            csv.DictWriter(f, self.FIELDS, extrasaction="ignore").writerow(row)
        for k, v in row.items():
            if isinstance(v, float):
                tb.add_scalar(f"{row['phase']}/{k}", v, it)
        tb.flush()
