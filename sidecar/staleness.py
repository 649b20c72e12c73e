"""Which candidates' telemetry is too old for a policy that reads it.

Only GPU nodes carry a telemetry agent: a CPU node without telemetry is normal, a GPU node
whose last report is older than ``telemetry_stale_s`` is what the fallback scorer is for
(:class:`~sidecar.scoring.ScoringEngine` scores those with it). Usually no node is stale, so
a request first compares the cutoff with the oldest report of any GPU node, one comparison
instead of five O(m) calls; that oldest time is kept per publish, since a publish copies
``telemetry_time`` and ``gpu_count`` only changes in a publish (an assumption's patch leaves
both alone).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from sidecar.published import Published

__all__ = ["Staleness"]


class Staleness:
    """Stale GPU-node telemetry among a request's candidates, against a wall clock."""

    def __init__(self, telemetry_stale_s: float, wall: Callable[[], float]) -> None:
        self._stale_s = telemetry_stale_s
        self._wall = wall
        #: (a published telemetry_time array, the oldest time in it of any GPU node).
        self._oldest: tuple[object, float] = (None, math.inf)

    def mask(self, pub: Published, rows: npt.NDArray[np.int64],
             ok: npt.NDArray[np.bool_]) -> tuple[npt.NDArray[np.bool_] | None, int]:
        """``(stale, n_stale)`` over the candidates at ``rows`` of ``pub``: feasible (``ok``;
        an unknown candidate stands in as any row with ``ok`` False) GPU nodes whose
        telemetry is older than the cutoff. None and 0 when no GPU node of ``pub`` is."""
        cutoff = self._wall() - self._stale_s
        if cutoff > self._oldest_gpu_telemetry(pub):
            stale = ok & (pub.snap.gpu_count[rows] > 0) & (pub.telemetry_time[rows] < cutoff)
            return stale, int(np.count_nonzero(stale))
        return None, 0

    def none(self, pub: Published) -> bool:
        """No GPU node of ``pub`` has telemetry past the cutoff (the usual case: then
        :meth:`mask` is None for every request on ``pub`` until the clock moves)."""
        return not self._wall() - self._stale_s > self._oldest_gpu_telemetry(pub)

    def _oldest_gpu_telemetry(self, pub: Published) -> float:
        """The oldest telemetry time of any GPU node in ``pub`` (-inf: one never reported,
        inf: no GPU node), cached per publish (see the module docstring)."""
        tt = pub.telemetry_time
        if self._oldest[0] is not tt:  # held, so a freed array's id cannot come back
            gpu = pub.snap.gpu_count[: len(tt)] > 0
            self._oldest = (tt, float(tt[gpu].min()) if gpu.any() else math.inf)
        return self._oldest[1]
