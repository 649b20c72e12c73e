"""Closed-form explanations of the heuristics: each score is a sum of named terms.
``k8s-default``: NodeResourcesFit + NodeResourcesBalancedAllocation; ``fgd``: the neutral 50 plus
the fragmentation-delta term. The terms are recomputed from the documented formulas and checked
against the scorer's own score, so a change in a scorer fails the check instead of the report
going silently wrong.
"""

from __future__ import annotations

import numpy as np

from dsan.core.snapshot import F64, I64
from dsan.explain.decision import Decision, ExplainError
from dsan.explain.explanation import Explanation
from dsan.features import default_workload, placement
from dsan.policies.base import MAX_NODE_SCORE
from dsan.policies.fgd import FGDScorer
from dsan.policies.k8s_default import DEFAULT_MEMORY_MIB, DEFAULT_MILLI_CPU

#: Policies with a closed-form breakdown.
TERM_POLICIES = ("k8s-default", "fgd")


def _least(req: F64, cap: F64) -> F64:
    score = np.floor((cap - req) * MAX_NODE_SCORE / np.maximum(cap, 1))
    return np.where((cap == 0) | (req > cap), 0.0, score)


def _k8s_terms(d: Decision, idx: I64) -> tuple[F64, list[tuple[str, str, F64]]]:
    pod, snap = d.pod, d.snap
    cpu_cap, mem_cap = np.floor(snap.cpu_cap[idx]), snap.mem_cap[idx]
    cpu_nz = pod.cpu_milli if pod.cpu_milli > 0 else DEFAULT_MILLI_CPU
    mem_nz = pod.mem_mib if pod.mem_mib > 0 else DEFAULT_MEMORY_MIB
    fit_cpu = _least(np.floor(snap.cpu_used[idx] + cpu_nz), cpu_cap)
    # kube-scheduler counts memory in bytes; MiB -> bytes is exact, so the MiB ratio is the same
    fit_mem = _least(snap.mem_used[idx] + mem_nz, mem_cap)
    fit = np.floor((fit_cpu + fit_mem) / 2)
    f_cpu = np.minimum((snap.cpu_used[idx] + pod.cpu_milli) / snap.cpu_cap[idx], 1.0)
    f_mem = np.minimum((snap.mem_used[idx] + pod.mem_mib) / snap.mem_cap[idx], 1.0)
    balanced = np.trunc((1.0 - np.abs(f_cpu - f_mem) / 2.0) * MAX_NODE_SCORE)
    contrib = np.stack([fit, balanced], axis=1)
    context = [
        ("LeastAllocated cpu term", "score 0..100", fit_cpu),
        ("LeastAllocated memory term", "score 0..100", fit_mem),
        ("cpu used fraction after", "fraction", f_cpu),
        ("memory used fraction after", "fraction", f_mem),
    ]
    return contrib, context


def _fgd_terms(d: Decision, idx: I64) -> tuple[F64, list[tuple[str, str, F64]]]:
    target = d.scorer.target if isinstance(d.scorer, FGDScorer) else default_workload()
    pl = placement(d.pod, d.snap, idx, target)
    delta = pl.frag_before - pl.frag_after
    score = np.floor(1.0 / (1.0 + np.exp(-delta / 1000.0)) * MAX_NODE_SCORE)
    contrib = (score - MAX_NODE_SCORE / 2)[:, None]
    context = [
        ("fragmentation before", "GPU milli", pl.frag_before),
        ("fragmentation after", "GPU milli", pl.frag_after),
        ("fragmentation reduction (before - after)", "GPU milli", delta),
        ("GPU slot chosen (sharing pods)", "slot", pl.slot.astype(np.float64)),
        ("free GPU milli on node", "GPU milli",
         d.snap.gpu_free[idx].sum(axis=1).astype(np.float64)),
    ]
    return contrib, context


def explain_terms(d: Decision, tolerance: float = 1e-9) -> Explanation:
    """The per-term breakdown of a heuristic's decision (see the module docstring)."""
    name = d.scorer.name
    idx = np.array([d.chosen_node, d.runner_up_node], dtype=np.int64)
    names: tuple[str, ...]
    units: tuple[str, ...]
    if name == "k8s-default":
        contrib, context = _k8s_terms(d, idx)
        names = ("NodeResourcesFit (LeastAllocated)", "NodeResourcesBalancedAllocation")
        units = ("score 0..100", "score 0..100")
        values = contrib
        base = 0.0
        method = "closed form: k8s v1.31 default score plugins, weight 1 each"
    elif name == "fgd":
        contrib, context = _fgd_terms(d, idx)
        names = ("fragmentation reduction: floor(100 sigmoid(dF/1000)) - 50",)
        units = ("value: GPU milli (before - after); contribution: score",)
        values = np.array([[context[2][2][0]], [context[2][2][1]]])
        base = MAX_NODE_SCORE / 2
        method = "closed form: FGD score = 50 (no fragmentation change) + delta term"
    else:
        raise ExplainError(
            f"no closed-form breakdown for policy {name!r}: supported {', '.join(TERM_POLICIES)}"
        )
    outputs = (base + float(contrib[0].sum()), base + float(contrib[1].sum()))
    return d.explanation(
        method, names, units, values, contrib, base, outputs, tolerance=tolerance,
        context=tuple((n, u, float(v[0]), float(v[1])) for n, u, v in context))
