"""A training run's ``metrics.csv``, written row by row as the run goes, so a crashed or
resumed run keeps what it logged.

A run that resumes an existing file appends to it; any other run (a fresh one, or a resume
whose file is gone) starts it with a header. Each stage names its columns
(:data:`dsan.train.ppo.PPO_FIELDS` for the openb PPO stage and its distributed twin,
:data:`dsan.train.scenario_train.SCENARIO_FIELDS` for the scenario stage); a row's other
keys are left out of the CSV. Given a TensorBoard writer, every float of a row goes there
too, tagged ``<phase>/<key>`` at the row's iteration.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["CsvLog"]


class CsvLog:
    """``path`` with the columns ``fields`` (``iteration`` and ``phase`` among them)."""

    def __init__(self, path: Path, fields: Sequence[str], resume: bool) -> None:
        self.path = path
        self.fields = tuple(fields)
        if not (resume and path.is_file()):
            with path.open("w", newline="") as f:
                csv.DictWriter(f, self.fields).writeheader()

    def write(self, row: Mapping[str, Any], tb: Any = None) -> None:
        """Append ``row``; with ``tb`` (a ``SummaryWriter``) send its floats there as well."""
        with self.path.open("a", newline="") as f:
            csv.DictWriter(f, self.fields, extrasaction="ignore").writerow(row)
        if tb is not None:
            it = row["iteration"]
            for k, v in row.items():
                if isinstance(v, float):
                    tb.add_scalar(f"{row['phase']}/{k}", v, it)
            tb.flush()
