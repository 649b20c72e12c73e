"""A trainer's output folder, the same for every trainer: ``metrics.csv`` (:class:`CsvLog`),
``best.pt`` (the best version so far), ``ckpt.pt`` (``--resume``), the exported model and
``summary.json`` (:class:`RunDir`).

``metrics.csv`` is written row by row so a crashed or resumed run keeps what it logged (a
resume appends, any other run starts a new file). A row's keys outside the stage's columns
are left out; with a TensorBoard writer, its floats go there too.
"""

from __future__ import annotations

import csv
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dsan.model.export import save
from dsan.model.net import DSANNet


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


class RunDir:
    """Folder ``out`` of a run seeded by ``seed``: seeds torch and :attr:`rng`, opens
    ``metrics.csv`` with the columns ``fields`` (appending when ``resume`` finds a checkpoint).
    """

    def __init__(self, out: str | Path, fields: Sequence[str], seed: int, resume: bool) -> None:
        torch.set_num_threads(1)  # 2 shared cores: intra-op threads only add contention here
        torch.manual_seed(seed)
        self.rng = np.random.default_rng(seed)
        self.path = Path(out)
        self.path.mkdir(parents=True, exist_ok=True)
        self.ckpt = self.path / "ckpt.pt"
        self.resuming = resume and self.ckpt.is_file()
        self.log = CsvLog(self.path / "metrics.csv", fields, self.resuming)
        #: The first iteration to run: past the checkpoint's when resuming.
        self.start_it = 0
        self.t0 = time.perf_counter()

    def wall_s(self) -> float:
        return time.perf_counter() - self.t0

    def restore(self, model: DSANNet, opt: torch.optim.Optimizer) -> dict[str, Any]:
        """When resuming: model, optimiser, iteration and random streams from ``ckpt.pt``, and
        the checkpoint's other entries (:meth:`checkpoint`'s ``extra``); else ``{}``."""
        if not self.resuming:
            return {}
        state: dict[str, Any] = torch.load(self.ckpt, weights_only=False)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        self.start_it = state["iteration"] + 1
        self.rng = np.random.default_rng(state["rng_seed"])
        if "rng_state" in state:  # the stream itself: the run goes on as if never stopped
            self.rng.bit_generator.state = state["rng_state"]
        torch.manual_seed(state["rng_seed"])
        return state

    def checkpoint(self, model: DSANNet, opt: torch.optim.Optimizer, it: int,
                   **extra: Any) -> None:
        """``ckpt.pt`` after iteration ``it``, with ``extra`` entries for :meth:`restore`."""
        seed = int(self.rng.integers(1 << 31))
        _save({"model": model.state_dict(), "opt": opt.state_dict(), "iteration": it,
               "rng_seed": seed, "rng_state": self.rng.bit_generator.state, **extra},
              self.ckpt)

    def save_best(self, model: DSANNet) -> None:
        _save(model.state_dict(), self.path / "best.pt")

    def load_best(self, model: DSANNet) -> None:
        """The best version saved, if any, into ``model``."""
        if (self.path / "best.pt").is_file():
            model.load_state_dict(torch.load(self.path / "best.pt", weights_only=True))

    def finish(self, model: DSANNet, summary: dict[str, Any], model_dir: str | Path,
               version: str, training: dict[str, Any], exports: bool) -> dict[str, Any]:
        """Export ``model`` (to ``model_dir``, "" = ``<out>/model``) with ``summary`` as its
        evaluation, write ``summary.json`` and return ``summary``."""
        save(model, model_dir or self.path / "model", version=version, training=training,
             evaluation=summary, exports=exports)
        _write_whole(self.path / "summary.json",
                     lambda tmp: tmp.write_text(json.dumps(summary, indent=2) + "\n"))
        return summary


def _save(obj: Any, path: Path) -> None:
    _write_whole(path, lambda tmp: torch.save(obj, tmp))


def _write_whole(path: Path, write: Callable[[Path], object]) -> None:
    """``write`` to ``path`` whole or not at all: a crash while writing leaves the previous
    file (what ``--resume`` loads), never a truncated one."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
