"""An explanation for people: Markdown plus a PNG bar chart (why A over B, top-k players) of a
replayed decision, and a terminal table of the sidecar's JSON answer (``dsan explain pod``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dsan.api.types import ANNOTATION_SCORED_BY
from dsan.explain.decision import Explanation


def _f(v: float) -> str:
    return f"{v:.6g}"


def _pod_line(e: Explanation) -> str:
    p = e.pod
    gpu = f"{p.num_gpu} x {p.gpu_milli} GPU milli" if p.num_gpu and p.gpu_milli else "no GPU"
    return f"`{p.name}`: {p.cpu_milli:g} millicores, {p.mem_mib:g} MiB, {gpu}"


def markdown(e: Explanation, top_k: int, chart: str) -> str:
    ea, eb, ed = e.additivity_errors()
    sa, sb = e.score_errors()
    ok = "PASS" if e.consistent else "FAIL"
    where = f"decision {e.decision}" if e.decision is not None else "one decision"
    k = min(top_k, len(e.names))
    out = [
        f"# Why `{e.chosen}` and not `{e.runner_up}` ({e.policy}, {where})",
        "",
        f"- pod {_pod_line(e)}",
        f"- {e.n_candidates} feasible candidates; "
        f"chosen `{e.chosen}` (score {_f(e.score_chosen)}), "
        f"runner-up `{e.runner_up}` (score {_f(e.score_runner_up)})",
        f"- method: {e.method}",
        *(f"- {n}" for n in e.notes),
        "",
        f"## Additivity check: {ok} (tolerance {e.tolerance:g})",
        "",
        "| | chosen | runner-up |",
        "|---|---|---|",
        f"| base value | {_f(e.base_value)} | {_f(e.base_value)} |",
        f"| sum of contributions | {_f(float(e.contrib_chosen.sum()))} "
        f"| {_f(float(e.contrib_runner_up.sum()))} |",
        f"| base + sum | {_f(e.base_value + float(e.contrib_chosen.sum()))} | "
        f"{_f(e.base_value + float(e.contrib_runner_up.sum()))} |",
        f"| model output | {_f(e.output_chosen)} | {_f(e.output_runner_up)} |",
        f"| served score | {_f(e.score_chosen)} | {_f(e.score_runner_up)} |",
        f"| abs(base + sum - output) | {ea:.3g} | {eb:.3g} |",
        f"| abs(output - served score) | {sa:.3g} | {sb:.3g} |",
        "",
        f"Sum of differences {_f(float(e.contrib_diff.sum()))} vs output difference "
        f"{_f(e.output_chosen - e.output_runner_up)} (error {ed:.3g}).",
        "",
        f"## Why `{e.chosen}` over `{e.runner_up}`: top {k} by |difference|",
        "",
        "| # | feature | unit | value chosen | value runner-up | contribution chosen "
        "| contribution runner-up | difference |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r, i in enumerate(e.top(top_k, "diff"), 1):
        out.append(
            f"| {r} | `{e.names[i]}` | {e.units[i]} | {_f(e.value_chosen[i])} "
            f"| {_f(e.value_runner_up[i])} | {_f(e.contrib_chosen[i])} "
            f"| {_f(e.contrib_runner_up[i])} | {_f(e.contrib_diff[i])} |"
        )
    for which, label, vals, contrib in (
        ("chosen", e.chosen, e.value_chosen, e.contrib_chosen),
        ("runner_up", e.runner_up, e.value_runner_up, e.contrib_runner_up),
    ):
        out += [
            "",
            f"## Top {k} for `{label}` ({which.replace('_', '-')})",
            "",
            "| # | feature | unit | value | contribution |",
            "|---|---|---|---|---|",
        ]
        for r, i in enumerate(e.top(top_k, which), 1):
            out.append(
                f"| {r} | `{e.names[i]}` | {e.units[i]} | {_f(vals[i])} | {_f(contrib[i])} |"
            )
    if e.context:
        out += [
            "",
            "## Context",
            "",
            "| quantity | unit | chosen | runner-up |",
            "|---|---|---|---|",
        ]
        out += [f"| {n} | {u} | {_f(a)} | {_f(b)} |" for n, u, a, b in e.context]
    out += ["", f"![why {e.chosen} over {e.runner_up}]({chart})"]
    return "\n".join(out) + "\n"


def bar_chart(e: Explanation, path: Path, top_k: int = 10) -> Path:
    """Horizontal bars of the top-k contributions for both nodes and their difference."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    idx = e.top(top_k, "diff")[::-1]
    y = np.arange(idx.size)
    fig, ax = plt.subplots(figsize=(9, 0.45 * idx.size + 1.6))
    h = 0.27
    ax.barh(y + h, e.contrib_chosen[idx], h, label=f"chosen {e.chosen}", color="#2b7bba")
    ax.barh(y, e.contrib_runner_up[idx], h, label=f"runner-up {e.runner_up}", color="#f39c12")
    ax.barh(y - h, e.contrib_diff[idx], h, label="difference", color="#555555")
    ax.set_yticks(y, [e.names[i] for i in idx], fontsize=8)
    ax.axvline(0, color="black", lw=0.6)
    ax.set_xlabel("contribution to the score" + (" (SHAP, logit)" if "SHAP" in e.method else ""))
    ax.set_title(f"{e.policy}: why {e.chosen} over {e.runner_up}", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_report(e: Explanation, out_dir: Path, top_k: int = 10, stem: str = "explain") -> Path:
    """``<out_dir>/<stem>.md`` and ``<stem>.png``; returns the Markdown path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    png = bar_chart(e, out_dir / f"{stem}.png", top_k)
    md = out_dir / f"{stem}.md"
    md.write_text(markdown(e, top_k, png.name))
    return md


@dataclass(frozen=True)
class PodInfo:
    """Where the pod is bound, by which scheduler, and the sidecar's annotation."""

    node: str
    scheduler: str
    scored_by: str


def table(doc: dict[str, Any], top_k: int = 10, pod: PodInfo | None = None) -> str:
    """The explanation for a terminal: the decision, the check, the top factors."""
    factors = doc["decision_factors"]
    reply = doc.get("reply") or {}
    top = reply.get("max", "?")
    lines = [f"pod {doc['task_id']}"]
    if pod is not None:
        lines[0] += (f": bound to {pod.node or '(not bound)'} by {pod.scheduler or '?'}, "
                     f"{ANNOTATION_SCORED_BY}={pod.scored_by or '(none)'}")
    lines += [
        f"recommended {doc['recommended_node']} ({reply.get('recommended', '?')}/{top}), "
        f"runner-up {doc['runner_up']} ({reply.get('runner_up', '?')}/{top}), "
        f"{doc['candidates']} candidates",
        f"policy {doc['policy']}: {doc['method']}",
        f"score {doc['score']:.6g} = base value {doc['base_value']:.6g} + impacts "
        f"{sum(f['impact'] for f in factors):+.6g}",
        "",
    ]
    rows = [("feature", "value", "impact", "runner-up", "impact", "unit")]
    for f in factors[:top_k]:
        rows.append((f["feature"], f"{f['value']:.4g}", f"{f['impact']:+.4f}",
                     f"{f['runner_up_value']:.4g}", f"{f['runner_up_impact']:+.4f}",
                     f["unit"]))
    rest = factors[top_k:]
    if rest:
        rows.append((f"({len(rest)} more)", "", f"{sum(f['impact'] for f in rest):+.4f}", "",
                     f"{sum(f['runner_up_impact'] for f in rest):+.4f}", ""))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for r in rows:
        cells = [r[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(r[1:5], widths[1:],
                                                                       strict=True)), r[5]]
        lines.append("  ".join(cells).rstrip())
    for c in doc.get("context") or []:
        lines.append(f"  {c['name']}: {c['value']:.4g} vs {c['runner_up_value']:.4g} "
                     f"({c['unit']})")
    lines += ["", *(f"note: {n}" for n in doc.get("notes") or ())]
    return "\n".join(lines)
