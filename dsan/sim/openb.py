"""Loader for the Alibaba GPU trace v2023 ("openb") node and pod CSVs (columns in
``../shared/traces/README.md`` §1). A bad value raises :class:`TraceError` naming the file,
line and column, which the CLI prints as one line.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from dsan.core.snapshot import MAX_GPUS, ClusterSnapshot, PodSpec, empty_snapshot
from dsan.sim.inputfile import InputFileError, read_text

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")


class TraceError(InputFileError):
    """A trace file that cannot be used; the message names file, line and column."""


@dataclass(frozen=True)
class NodeTrace:
    names: list[str]
    cpu_milli: npt.NDArray[np.float64]
    memory_mib: npt.NDArray[np.float64]
    gpu: npt.NDArray[np.int32]
    model: list[str]

    def __len__(self) -> int:
        return len(self.names)

    @property
    def gpu_models(self) -> list[str]:
        """Distinct GPU model names, sorted (index order of ``ClusterSnapshot.gpu_model``)."""
        return sorted({m for m in self.model if m})

    def snapshot(self, order: Sequence[int] | npt.NDArray[np.int64] | None = None
                 ) -> ClusterSnapshot:
        """Idle cluster; ``order`` permutes the nodes (the FGD protocol shuffles per seed)."""
        idx = np.arange(len(self)) if order is None else np.asarray(order, dtype=np.int64)
        models = self.gpu_models
        pos = {m: i for i, m in enumerate(models)}
        model_idx = np.array([pos.get(self.model[i], -1) for i in idx], dtype=np.int32)
        return empty_snapshot([self.names[i] for i in idx], self.cpu_milli[idx],
                              self.memory_mib[idx], self.gpu[idx], model_idx, models)


@dataclass(frozen=True)
class PodTrace:
    path: Path
    names: list[str]
    cpu_milli: npt.NDArray[np.float64]
    memory_mib: npt.NDArray[np.float64]
    num_gpu: npt.NDArray[np.int32]
    gpu_milli: npt.NDArray[np.int32]
    gpu_spec: list[tuple[str, ...]]

    def __len__(self) -> int:
        return len(self.names)

    @property
    def workload(self) -> str:
        """Workload name as the published CSVs spell it, e.g. ``openb_pod_list_default``."""
        return self.path.stem

    def gpu_request_milli(self) -> npt.NDArray[np.int64]:
        return self.num_gpu.astype(np.int64) * self.gpu_milli.astype(np.int64)

    def pod_specs(self, gpu_models: Sequence[str]) -> list[PodSpec]:
        """One :class:`PodSpec` per row; ``gpu_spec`` names map to indices of ``gpu_models``
        (the node list's, which :func:`load_pods` checked them against)."""
        pos = {m: i for i, m in enumerate(gpu_models)}
        return [PodSpec(name=name, cpu_milli=float(self.cpu_milli[i]),
                        mem_mib=float(self.memory_mib[i]), num_gpu=int(self.num_gpu[i]),
                        gpu_milli=int(self.gpu_milli[i]),
                        gpu_models=tuple(sorted(pos[m] for m in self.gpu_spec[i])))
                for i, name in enumerate(self.names)]


def _rows(path: Path, required: Sequence[str]) -> Iterator[tuple[int, dict[str, str]]]:
    reader = csv.reader(io.StringIO(read_text(path, TraceError), newline=""))
    try:
        header = next(reader)
    except StopIteration:
        raise TraceError(path, "empty file (no header row)") from None
    except csv.Error as exc:
        raise TraceError(path, f"unreadable header: {exc}", 1) from None
    _one_line(path, header, 1, reader.line_num)
    header = [h.strip() for h in header]
    missing = [c for c in required if c not in header]
    if missing:
        raise TraceError(path, f"missing column(s) {', '.join(missing)}; header is "
                         f"{','.join(header)}", 1)
    n_rows = 0
    while True:
        start = reader.line_num + 1  # the line this record starts on
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            raise TraceError(path, f"malformed CSV: {exc}", start) from None
        line = reader.line_num
        _one_line(path, row, start, line)
        if not row or all(not v.strip() for v in row):
            continue
        if len(row) < len(header):
            col = header[len(row)]
            raise TraceError(path, f"truncated row: {len(row)} of {len(header)} fields", line, col)
        n_rows += 1
        yield line, dict(zip(header, row, strict=False))
    if n_rows == 0:
        raise TraceError(path, "no data rows after the header")


def _one_line(path: Path, row: list[str], start: int, end: int) -> None:
    """No trace field holds a line break: a record over several lines is a quote opened on
    its first line and never closed there (the reader then runs on to the next quote)."""
    if end > start or any("\n" in v or "\r" in v for v in row):
        raise TraceError(path, f"unbalanced quote: the quoted field opened here runs on to "
                         f"line {end}", start)


def _int(path: Path, line: int, col: str, value: str, lo: int, hi: int | None = None) -> int:
    try:
        num = float(value)
    except ValueError:
        raise TraceError(path, f"{value!r} is not a number", line, col) from None
    if not np.isfinite(num) or num != int(num):
        raise TraceError(path, f"{value!r} is not an integer", line, col)
    if num < lo:
        neg = " (negative request)" if num < 0 else ""
        raise TraceError(path, f"{value} is below {lo}{neg}", line, col)
    if hi is not None and num > hi:
        raise TraceError(path, f"{value} is above {hi}", line, col)
    return int(num)


def load_nodes(path: Path | str) -> NodeTrace:
    path = Path(path)
    names: list[str] = []
    cpu, mem, gpu, model = [], [], [], []
    for line, r in _rows(path, NODE_COLUMNS):
        name = r["sn"].strip()
        if not name:
            raise TraceError(path, "empty node name", line, "sn")
        names.append(name)
        cpu.append(_int(path, line, "cpu_milli", r["cpu_milli"], 1))
        mem.append(_int(path, line, "memory_mib", r["memory_mib"], 1))
        g = _int(path, line, "gpu", r["gpu"], 0, MAX_GPUS)
        m = r["model"].strip()
        if g > 0 and not m:
            raise TraceError(path, f"node has {g} GPUs but no GPU model", line, "model")
        gpu.append(g)
        model.append(m if g > 0 else "")
    if len(set(names)) != len(names):
        raise TraceError(path, "duplicate node names")
    return NodeTrace(names, np.array(cpu, float), np.array(mem, float), np.array(gpu, np.int32),
                     model)


def load_pods(path: Path | str, known_models: Sequence[str] | None = None) -> PodTrace:
    """Pods of one workload file; ``known_models`` (the node list's) rejects unknown models."""
    path = Path(path)
    known = set(known_models) if known_models is not None else None
    names: list[str] = []
    cpu, mem, num, milli = [], [], [], []
    spec: list[tuple[str, ...]] = []
    for line, r in _rows(path, POD_COLUMNS):
        names.append(r["name"].strip())
        cpu.append(_int(path, line, "cpu_milli", r["cpu_milli"], 0))
        mem.append(_int(path, line, "memory_mib", r["memory_mib"], 0))
        n = _int(path, line, "num_gpu", r["num_gpu"], 0, MAX_GPUS)
        g = _int(path, line, "gpu_milli", r["gpu_milli"], 0, 1000)
        if n > 1 and g != 1000:
            raise TraceError(path, f"a {n}-GPU pod must ask for whole GPUs (gpu_milli 1000), "
                             f"got {g}", line, "gpu_milli")
        if n > 0 and g == 0:
            raise TraceError(path, f"pod asks for {n} GPU(s) with gpu_milli 0", line, "gpu_milli")
        num.append(n)
        milli.append(g if n > 0 else 0)
        models = tuple(sorted({m.strip() for m in (r.get("gpu_spec") or "").split("|")
                               if m.strip()}))
        bad = [m for m in models if known is not None and m not in known]
        if bad:
            raise TraceError(path, f"unknown GPU model {bad[0]!r} (node list has "
                             f"{', '.join(sorted(known or ()))})", line, "gpu_spec")
        spec.append(models)
    return PodTrace(path, names, np.array(cpu, float), np.array(mem, float),
                    np.array(num, np.int32), np.array(milli, np.int32), spec)
