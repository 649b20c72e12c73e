"""The one scoring interface shared by the simulator, the sidecar and DSAN.

A :class:`Scorer` ranks the feasible nodes for one pod. It never filters (the caller passes
only feasible node indices) and never mutates the snapshot. Higher is better; the scale is
the scorer's own, and :func:`normalize` maps it onto 0..100 (kube-scheduler's
MaxNodeScore) for the sidecar.

Every member of the protocol is part of the contract, so callers never probe for one:
:class:`BaseScorer` gives the defaults (best-fit GPUs, no telemetry, stateless with respect
to bindings, nothing to prepare) and every policy derives from it.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from dsan.core.filtering import best_fit_gpus
from dsan.core.snapshot import ClusterSnapshot, PodSpec

__all__ = ["MAX_NODE_SCORE", "TINY_SPAN", "BaseScorer", "Scorer", "best_fit_gpus", "normalize"]

MAX_NODE_SCORE = 100


@runtime_checkable
class Scorer(Protocol):
    """Scores candidate nodes for one pod."""

    #: Registry name, e.g. ``"fgd"``.
    name: str
    @property
    def version(self) -> str:
        """What exactly scores (a model's version; a heuristic's name): shown in metrics."""
        ...

    #: Whether scores read GPU telemetry: the sidecar scores nodes whose telemetry is stale
    #: by its fallback instead.
    reads_telemetry: bool

    def score(
        self, pod: PodSpec, snap: ClusterSnapshot, nodes: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.float64]:
        """One score per entry of ``nodes`` (indices into ``snap``), higher is better."""
        ...

    def select_gpus(self, pod: PodSpec, snap: ClusterSnapshot, node: int) -> tuple[int, ...]:
        """GPU slots of ``node`` that ``pod`` gets; ``()`` for CPU-only pods."""
        ...

    def on_bind(self, pod: PodSpec, snap: ClusterSnapshot, node: int,
                gpus: tuple[int, ...]) -> None:
        """The simulator bound ``pod`` to ``node`` (for scorers that count per node what the
        snapshot does not hold)."""
        ...

    def on_release(self, pod: PodSpec, snap: ClusterSnapshot, node: int,
                   gpus: tuple[int, ...]) -> None:
        """The simulator released ``pod`` from ``node``."""
        ...

    def prepare(self, pod: PodSpec, snap: ClusterSnapshot) -> None:
        """Off the request path (the sidecar calls it after a reply, once the winner is
        charged): bring what the scorer keeps for pods like ``pod`` up to ``snap`` so the
        next such request finds it done. Never changes a score."""
        ...


class BaseScorer:
    """The defaults of :class:`Scorer`'s members; policies override what they need."""

    name = "base"
    reads_telemetry = False

    @property
    def version(self) -> str:
        return self.name

    def select_gpus(self, pod: PodSpec, snap: ClusterSnapshot, node: int) -> tuple[int, ...]:
        return best_fit_gpus(pod, snap, node)

    def on_bind(self, pod: PodSpec, snap: ClusterSnapshot, node: int,
                gpus: tuple[int, ...]) -> None:
        return None

    def on_release(self, pod: PodSpec, snap: ClusterSnapshot, node: int,
                   gpus: tuple[int, ...]) -> None:
        return None

    def prepare(self, pod: PodSpec, snap: ClusterSnapshot) -> None:
        return None


#: Spans at most ``max_score`` times this are so small (subnormal) that ``max_score / span``
#: would overflow float64: those are scaled by division instead (2x margin for rounding).
TINY_SPAN = 2.0 / np.finfo(np.float64).max


def normalize(
    scores: npt.ArrayLike, max_score: int = MAX_NODE_SCORE
) -> npt.NDArray[np.int64]:
    """Min-max scale onto 0..max_score as integers; all-equal scores map to max_score.

    Non-finite scores (a scorer's bug or a missing feature) rank lowest (0) instead of
    poisoning the scale. All-finite input, the usual case, costs three reductions.
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.size == 0:
        return np.zeros(0, dtype=np.int64)
    lo, hi = s.min(), s.max()
    if -np.inf < lo and hi < np.inf:
        # All finite (a NaN would have made lo or hi NaN): two reductions, then one pass.
        if not hi > lo:
            return np.full(s.shape, max_score, dtype=np.int64)
        span = hi - lo
        if np.inf > span > max_score * TINY_SPAN:
            out = s - lo
            out *= max_score / span
            return np.rint(out, out=out).astype(np.int64)
    finite = np.isfinite(s)
    all_finite = bool(finite.all())
    if not all_finite and not finite.any():
        return np.zeros(s.shape, dtype=np.int64)
    lo, hi = (s.min(), s.max()) if all_finite else (s[finite].min(), s[finite].max())
    if not hi > lo:
        out = np.full(s.shape, float(max_score))
    else:
        with np.errstate(invalid="ignore", over="ignore"):
            span = hi - lo
            if np.inf > span > max_score * TINY_SPAN:
                out = np.rint((s - lo) * (max_score / span))
            elif np.isfinite(span):  # so small (subnormal) that max_score / span overflows
                out = np.rint((s - lo) / span * max_score)
            else:  # the span overflows float64: scale both ends down first
                out = np.rint((s / 2 - lo / 2) * (max_score / (hi / 2 - lo / 2)))
    if not all_finite:
        out = np.where(finite, out, 0.0)
    return out.astype(np.int64)
