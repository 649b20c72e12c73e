"""A training run's ``metrics.csv``, written row by row so a crashed or resumed run keeps what
it logged (a resume appends, any other run starts a new file). A row's keys outside the
stage's columns are left out; with a TensorBoard writer, its floats go there too.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


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
