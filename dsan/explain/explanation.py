"""What an explanation of one decision holds, whatever produced it (SHAP or closed form): per
*player* (a feature, a heuristic's term) its value and contribution on the chosen node (A) and
the runner-up (B). ``base + sum(contrib) = output`` for both (checked), so the rows with the
largest difference are *why A won over B*.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dsan.core.snapshot import F64, I64, PodSpec


@dataclass(frozen=True)
class Explanation:
    policy: str
    pod: PodSpec
    n_candidates: int
    chosen: str
    runner_up: str
    #: The served scorer's own scores of A and B (what the scheduler compared).
    score_chosen: float
    score_runner_up: float
    method: str
    names: tuple[str, ...]
    units: tuple[str, ...]
    value_chosen: F64
    value_runner_up: F64
    contrib_chosen: F64
    contrib_runner_up: F64
    #: Output the contributions add up to, from ``base``: the model's logit for DSAN, the
    #: score for a heuristic. Equals the score up to ``tolerance`` (checked by the report).
    base_value: float
    output_chosen: float
    output_runner_up: float
    tolerance: float = 1e-4
    decision: int | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: Informational rows (name, unit, value A, value B) that are not players.
    context: tuple[tuple[str, str, float, float], ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        d = len(self.names)
        for col in ("value_chosen", "value_runner_up", "contrib_chosen", "contrib_runner_up"):
            if np.shape(getattr(self, col)) != (d,):
                raise ValueError(f"Explanation.{col} has shape {np.shape(getattr(self, col))}, "
                                 f"want ({d},)")
        if len(self.units) != d:
            raise ValueError(f"Explanation.units has {len(self.units)} entries, want {d}")

    @property
    def contrib_diff(self) -> F64:
        return np.asarray(self.contrib_chosen - self.contrib_runner_up)

    def additivity_errors(self) -> tuple[float, float, float]:
        """|base + sum - output| for A and B, and |sum(diff) - (output_A - output_B)|."""
        ea = abs(self.base_value + float(self.contrib_chosen.sum()) - self.output_chosen)
        eb = abs(self.base_value + float(self.contrib_runner_up.sum()) - self.output_runner_up)
        ed = abs(float(self.contrib_diff.sum()) - (self.output_chosen - self.output_runner_up))
        return ea, eb, ed

    def score_errors(self) -> tuple[float, float]:
        """|output - served score| for A and B: the explained function is the served one."""
        return (abs(self.output_chosen - self.score_chosen),
                abs(self.output_runner_up - self.score_runner_up))

    @property
    def consistent(self) -> bool:
        return max(*self.additivity_errors(), *self.score_errors()) <= self.tolerance

    def top(self, k: int, by: str = "diff") -> I64:
        """Indices of the k players with the largest |contribution| (``diff``, ``chosen``,
        ``runner_up``), largest first, ties by column order."""
        col = {"diff": self.contrib_diff, "chosen": self.contrib_chosen,
               "runner_up": self.contrib_runner_up}.get(by)
        if col is None:
            raise ValueError(f"unknown ranking {by!r}: diff, chosen or runner_up")
        return np.argsort(-np.abs(col), kind="stable")[: max(0, k)].astype(np.int64)
