"""Scoring policies behind one :class:`~dsan.policies.base.Scorer` interface."""

from dsan.policies.base import MAX_NODE_SCORE, Scorer, best_fit_gpus, normalize

__all__ = ["MAX_NODE_SCORE", "Scorer", "best_fit_gpus", "normalize"]
