"""Why the chosen node won over the runner-up: SHAP of DSAN's served logit, the closed-form
per-term breakdown of heuristics, as a Markdown report with a bar chart. See docs/explain.md.
"""

from dsan.explain.decision import Decision, ExplainError, decide
from dsan.explain.explainer import EXPLAINABLE, explain
from dsan.explain.explanation import Explanation
from dsan.explain.report import write_report
from dsan.explain.terms import explain_terms

__all__ = ["EXPLAINABLE", "Decision", "ExplainError", "Explanation", "decide", "explain",
           "explain_terms", "write_report"]
