"""Why the chosen node won over the runner-up: SHAP of DSAN's served logit, the closed-form
per-term breakdown of heuristics, as a Markdown report with a bar chart. See docs/explain.md.
"""

from dsan.explain.decision import (
    Decision,
    ExplainError,
    Explanation,
    decide,
    replay_openb,
    replay_scenario,
)
from dsan.explain.explainers import (
    EXPLAINABLE,
    DSANShapConfig,
    explain,
    explain_dsan,
    explain_rows,
    explain_terms,
)
from dsan.explain.report import write_report

__all__ = ["EXPLAINABLE", "DSANShapConfig", "Decision", "ExplainError", "Explanation", "decide",
           "explain", "explain_dsan", "explain_rows", "explain_terms", "replay_openb",
           "replay_scenario", "write_report"]
