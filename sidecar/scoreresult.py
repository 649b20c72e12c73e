"""What the scoring engine answers for one request (:class:`ScoreResult`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["ScoreResult", "scores_past"]


# Not frozen: a frozen dataclass's __init__ sets each of the ten fields through
# object.__setattr__, ~1 us more per request than plain slot stores; nothing mutates one.
@dataclass(slots=True)
class ScoreResult:
    #: One score per requested name, in request order, 0..max_score.
    scores: npt.NDArray[np.int64]
    #: Position (in the request) of the best node, -1 if none is scorable.
    best: int
    unknown: int
    infeasible: int
    fallback: int
    version: int
    featurize_s: float
    model_s: float
    total_s: float
    #: ``Published.table_epoch`` of the snapshot scored on (the client's table is current
    #: when it matches).
    table_epoch: int = 0
    #: The candidates' rows in that snapshot, request order (an unknown name's entry is not
    #: a row; such a candidate scores 0). None where a path did not resolve them.
    rows: npt.NDArray[np.int64] | None = None


def scores_past(scores: npt.NDArray[np.integer], hi: int) -> bool:
    """Whether any score is outside 0..hi (what a reply encoder must refuse). For int64, the
    engine's dtype, one reduction covers both bounds: viewed as uint64 a negative score
    wraps past ``hi``."""
    if not scores.size:
        return False
    if scores.dtype == np.int64:
        return int(scores.view(np.uint64).max()) > hi
    return bool(scores.min() < 0 or scores.max() > hi)

