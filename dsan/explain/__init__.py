"""Why the chosen node won over the runner-up: SHAP of DSAN's served logit, the closed-form
per-term breakdown of heuristics, as a Markdown report with a bar chart. See docs/explain.md.
"""
