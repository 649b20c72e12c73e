"""Every decision can be explained: why the chosen node won over the runner-up.

DSAN decisions get SHAP values of the served logit over the 128 named features
(:mod:`dsan.explain.dsan_shap`, estimator in :mod:`dsan.explain.shapley`); heuristics get
their closed-form per-term breakdown (:mod:`dsan.explain.terms`). A report is Markdown plus a
PNG bar chart (:mod:`dsan.explain.report`); ``dsan explain`` replays a simulator run up to
decision N (:mod:`dsan.explain.replay`). See docs/explain.md.
"""

from dsan.explain.decision import Decision, ExplainError, decide
from dsan.explain.explainer import EXPLAINABLE, explain
from dsan.explain.explanation import Explanation
from dsan.explain.report import write_report
from dsan.explain.terms import explain_terms

__all__ = [
    "EXPLAINABLE",
    "Decision",
    "ExplainError",
    "Explanation",
    "decide",
    "explain",
    "explain_terms",
    "write_report",
]
