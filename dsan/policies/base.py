"""The one scoring interface shared by the simulator, the sidecar and DSAN.

A :class:`Scorer` ranks the feasible nodes for one pod. It never filters (the caller passes
only feasible node indices) and never mutates the snapshot. Higher is better; the scale is
the scorer's own, and :func:`normalize` maps it onto 0..100 (kube-scheduler's
MaxNodeScore) for the sidecar.

A scorer may also choose *which* GPUs of the chosen node a pod gets
(:meth:`Scorer.select_gpus`); the default is best-fit, as in the FGD simulator: the GPUs
with the least free share that still fit.

Optional hooks for scorers that keep per-node state the snapshot does not hold (e.g.
``gpu-clustering`` counts the GPU kinds of the pods on each node): ``on_bind(pod, snap,
node, gpus)`` and ``on_release(pod, snap, node, gpus)``. The simulators call them when
present (``dsan.sim.scheduler.schedule_one`` / ``unbind``); a scorer without them is
stateless with respect to bindings.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from dsan.snapshot import ClusterSnapshot, PodSpec

MAX_NODE_SCORE = 100


@runtime_checkable
class Scorer(Protocol):
    """Scores candidate nodes for one pod."""

    #: Registry name, e.g. ``"fgd"``; also reported as the policy version in metrics.
    name: str

    def score(
        self, pod: PodSpec, snap: ClusterSnapshot, nodes: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.float64]:
        """One score per entry of ``nodes`` (indices into ``snap``), higher is better."""
        ...

    def select_gpus(self, pod: PodSpec, snap: ClusterSnapshot, node: int) -> tuple[int, ...]:
        """GPU slots of ``node`` that ``pod`` gets; ``()`` for CPU-only pods."""
        ...


def best_fit_gpus(pod: PodSpec, snap: ClusterSnapshot, node: int) -> tuple[int, ...]:
    """The ``pod.num_gpu`` GPUs with the least free share that still fit (stable by slot).

    Raises ``ValueError`` when the node cannot host the pod's GPUs: callers filter first.
    """
    if pod.num_gpu == 0 or pod.gpu_milli == 0:
        return ()
    count = int(snap.gpu_count[node])
    free = snap.gpu_free[node, :count]
    fits = np.flatnonzero(free >= pod.gpu_milli)
    if fits.size < pod.num_gpu:
        raise ValueError(f"node {snap.names[node]} cannot host {pod.name}'s GPUs")
    order = fits[np.argsort(free[fits], kind="stable")]
    return tuple(int(g) for g in sorted(order[: pod.num_gpu]))


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
