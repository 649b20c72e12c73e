"""Which explanation a decision gets: SHAP for the DSAN model, the closed-form per-term
breakdown for heuristics that have one."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dsan.explain.decision import Decision, ExplainError
from dsan.explain.explanation import Explanation
from dsan.explain.terms import TERM_POLICIES, explain_terms

if TYPE_CHECKING:
    from dsan.explain.dsan_shap import DSANShapConfig

#: Policies ``dsan explain`` can explain.
EXPLAINABLE = ("dsan", *TERM_POLICIES)


def explain(d: Decision, shap: DSANShapConfig | None = None) -> Explanation:
    """SHAP for ``dsan``, the per-term breakdown for the heuristics in TERM_POLICIES."""
    name = d.scorer.name
    if name == "dsan":
        from dsan.explain.dsan_shap import explain_dsan  # the model only when explained

        return explain_dsan(d, shap)
    if name in TERM_POLICIES:
        return explain_terms(d)
    raise ExplainError(f"cannot explain policy {name!r}: "
                       f"explainable policies are {', '.join(EXPLAINABLE)}")
