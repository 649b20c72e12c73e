"""GPUTelemetry custom resource -> the windows a node's telemetry ring has not seen yet.

Each window is averaged over the node's GPUs, in the channel order of
:data:`dsan.core.snapshot.TELEMETRY_CHANNELS`; the CPU and memory channels are the node's
requested share (the CR carries GPU series only).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from dsan.api.telemetry import GPUTelemetry
from dsan.core.snapshot import TELEMETRY_CHANNELS

CHANNELS = len(TELEMETRY_CHANNELS)


class BadTelemetry(ValueError):
    """Series that cannot be combined (ragged across GPUs); the object is skipped."""


def new_windows(
    tel: GPUTelemetry,
    last_end: float,
    max_new: int,
    cpu_frac: float,
    mem_frac: float,
    power_ref_w: float,
) -> tuple[npt.NDArray[np.float32], float] | None:
    """(windows newer than ``last_end`` (-inf: none held), shape (k, CHANNELS), oldest first;
    their end time), or None when the object holds nothing new."""
    if not tel.available or not tel.statuses:
        return None
    try:
        util = np.array([s.series("util") for s in tel.statuses], dtype=np.float64)
        mem = np.array([s.series("memoryUsedMiB") for s in tel.statuses], dtype=np.float64)
        power = np.array([s.series("powerW") for s in tel.statuses], dtype=np.float64)
    except ValueError as exc:  # GPUs with series of different lengths
        raise BadTelemetry(f"{tel.node_name}: ragged GPU series: {exc}") from None
    length = util.shape[1] if util.ndim == 2 else 0
    if length == 0:
        return None
    end = tel.sampled_at.timestamp()
    k = length if not math.isfinite(last_end) else round((end - last_end) / tel.window_seconds)
    k = min(max(k, 0), length, max_new)
    if k == 0:
        return None
    total = {g.uuid: g.memory_total_mib for g in tel.gpus}
    mem_total = np.array([[max(1, total.get(s.uuid, 0))] for s in tel.statuses], np.float64)
    out = np.empty((k, CHANNELS), dtype=np.float32)
    out[:, 0] = cpu_frac
    out[:, 1] = mem_frac
    out[:, 2] = util[:, -k:].mean(axis=0) / 100.0
    out[:, 3] = (mem / mem_total)[:, -k:].mean(axis=0) if mem.shape == util.shape else 0.0
    out[:, 4] = power[:, -k:].mean(axis=0) / power_ref_w if power.shape == util.shape else 0.0
    np.clip(out, 0.0, 1.0, out=out)
    return out, end
