"""Which explanation a decision gets, and the two kinds.

**SHAP for the DSAN scorer.** The explained function is the served runtime's logit of one row,
``Head(f, Fuse(f, e))``, a function of the 128 named features ``f`` and the node's (2, H)
embedding ``e`` alone. The players are the features plus ``e`` as one grouped player (masking
a feature cannot re-run the GNN). The background is the decision's other candidates, one set
for both nodes, so ``sum(phi_A - phi_B) = logit_A - logit_B`` exactly. Details:
docs/explain.md.

**Closed-form breakdowns of the heuristics**: each score is a sum of named terms.
``k8s-default``: NodeResourcesFit + NodeResourcesBalancedAllocation; ``fgd``: the neutral 50
plus the fragmentation-delta term. The terms are recomputed from the documented formulas and
checked against the scorer's own score, so a change in a scorer fails the check instead of the
report going silently wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dsan.core.snapshot import F64, I64
from dsan.explain.decision import Decision, ExplainError, Explanation
from dsan.explain.shapley import permutation_shapley
from dsan.features import FEATURES, N_FEATURES, default_workload, placement
from dsan.model.runtime import Runtime
from dsan.policies.base import MAX_NODE_SCORE
from dsan.policies.baselines import DEFAULT_MEMORY_MIB, DEFAULT_MILLI_CPU
from dsan.policies.dsan import DSANScorer
from dsan.policies.fgd import FGDScorer

#: Policies ``dsan explain`` can explain: SHAP for dsan, a closed-form breakdown for the others.
EXPLAINABLE = ("dsan", "k8s-default", "fgd")
EMBEDDING_PLAYER = "node_embedding (LSTM + GNN streams)"


def explain(d: Decision, shap: DSANShapConfig | None = None) -> Explanation:
    """SHAP for ``dsan``, the per-term breakdown for the heuristics."""
    return explain_dsan(d, shap) if d.scorer.name == "dsan" else explain_terms(d)


# --- DSAN: SHAP of the served logit ------------------------------------------------------------
@dataclass(frozen=True)
class DSANShapConfig:
    """``background``: candidates in the background set; ``permutations``: antithetic pairs."""

    background: int = 32
    permutations: int = 16
    seed: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.background <= 4096:
            raise ValueError(f"background must be within 1..4096, got {self.background}")
        if not 1 <= self.permutations <= 10_000:
            raise ValueError(f"permutations must be within 1..10000, got {self.permutations}")


def explain_dsan(d: Decision, cfg: DSANShapConfig | None = None) -> Explanation:
    """SHAP of ``d`` with the candidates' rows as the serving path computes them."""
    if not isinstance(d.scorer, DSANScorer):
        raise ExplainError(f"scorer {d.scorer.name!r} has no DSAN model to explain")
    serving = d.scorer.serving
    x = serving.features(d.pod, d.snap, d.candidates)
    return explain_rows(d, serving.runtime, x, serving.runtime.streams(d.candidates), cfg)


def explain_rows(d: Decision, runtime: Runtime, x: npt.NDArray[np.float32],
                 streams: npt.NDArray[np.float32], cfg: DSANShapConfig | None = None,
                 stop: Callable[[], bool] | None = None) -> Explanation:
    """SHAP of ``d`` from its candidates' features ``x`` (m, 128) and embedding ``streams``
    (m, 2, H) (:func:`explain_dsan`'s; the sidecar copies them from its state). ``stop``:
    :func:`~dsan.explain.shapley.permutation_shapley`'s."""
    cfg = cfg or DSANShapConfig()
    hidden = runtime.cfg.hidden
    z = np.concatenate([x, streams.reshape(len(x), -1)], axis=1).astype(np.float64)

    def f(rows: F64) -> F64:  # the batched explained function: rows of z -> served logits
        x = np.ascontiguousarray(rows[:, :N_FEATURES], dtype=np.float32)
        e = np.ascontiguousarray(rows[:, N_FEATURES:], dtype=np.float32)
        return runtime.head(x, e.reshape(-1, 2, hidden))

    pair = np.array([d.chosen, d.runner_up])
    others = np.setdiff1d(np.arange(len(d.candidates)), pair)
    if others.size == 0:
        others = pair  # two candidates: they are each other's background
    rng = np.random.default_rng(cfg.seed)
    bg_idx = np.sort(rng.choice(others, size=min(cfg.background, others.size), replace=False))
    groups = np.r_[np.arange(N_FEATURES), np.full(2 * hidden, N_FEATURES)].astype(np.int64)
    sv = permutation_shapley(f, z[pair], z[bg_idx], groups, cfg.permutations, cfg.seed, stop)
    names = (*(s.name for s in FEATURES), EMBEDDING_PLAYER)
    units = (*(f"{s.unit}; {s.norm}" for s in FEATURES), f"{2 * hidden}-d vector")
    emb_norm = np.linalg.norm(z[pair, N_FEATURES:], axis=1)
    values = np.concatenate([z[pair, :N_FEATURES], emb_norm[:, None]], axis=1)
    notes = (
        f"background: {bg_idx.size} of {len(d.candidates) - 2} other candidates (seed {cfg.seed})",
        "embedding player value shown as the vector's L2 norm",
        f"largest standard error of one SHAP value over the antithetic pairs: "
        f"{float(sv.stderr.max()):.3g} (more permutations shrink it)")
    method = f"interventional SHAP, {sv.method}, {sv.evaluations} model rows"
    outputs = (float(sv.outputs[0]), float(sv.outputs[1]))
    return d.explanation(method, names, units, values, sv.values, sv.base_value, outputs, notes)


# --- heuristics: closed-form terms ----------------------------------------------------------
def _least(req: F64, cap: F64) -> F64:
    score = np.floor((cap - req) * MAX_NODE_SCORE / np.maximum(cap, 1))
    return np.where((cap == 0) | (req > cap), 0.0, score)


def _k8s_terms(d: Decision, idx: I64) -> Explanation:
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
    return _terms(
        d, "closed form: k8s v1.31 default score plugins, weight 1 each",
        ("NodeResourcesFit (LeastAllocated)", "NodeResourcesBalancedAllocation"),
        ("score 0..100", "score 0..100"), contrib, contrib, 0.0, [
            ("LeastAllocated cpu term", "score 0..100", fit_cpu),
            ("LeastAllocated memory term", "score 0..100", fit_mem),
            ("cpu used fraction after", "fraction", f_cpu),
            ("memory used fraction after", "fraction", f_mem),
        ])


def _fgd_terms(d: Decision, idx: I64) -> Explanation:
    target = d.scorer.target if isinstance(d.scorer, FGDScorer) else default_workload()
    pl = placement(d.pod, d.snap, idx, target)
    delta = pl.frag_before - pl.frag_after
    score = np.floor(1.0 / (1.0 + np.exp(-delta / 1000.0)) * MAX_NODE_SCORE)
    return _terms(
        d, "closed form: FGD score = 50 (no fragmentation change) + delta term",
        ("fragmentation reduction: floor(100 sigmoid(dF/1000)) - 50",),
        ("value: GPU milli (before - after); contribution: score",), delta[:, None],
        (score - MAX_NODE_SCORE / 2)[:, None], MAX_NODE_SCORE / 2, [
            ("fragmentation before", "GPU milli", pl.frag_before),
            ("fragmentation after", "GPU milli", pl.frag_after),
            ("fragmentation reduction (before - after)", "GPU milli", delta),
            ("GPU slot chosen (sharing pods)", "slot", pl.slot.astype(np.float64)),
            ("free GPU milli on node", "GPU milli",
             d.snap.gpu_free[idx].sum(axis=1).astype(np.float64)),
        ])


def _terms(d: Decision, method: str, names: tuple[str, ...], units: tuple[str, ...],
           values: F64, contrib: F64, base: float,
           context: list[tuple[str, str, F64]]) -> Explanation:
    outputs = (base + float(contrib[0].sum()), base + float(contrib[1].sum()))
    return d.explanation(
        method, names, units, values, contrib, base, outputs, tolerance=1e-9,
        context=tuple((n, u, float(v[0]), float(v[1])) for n, u, v in context))


_TERMS = {"k8s-default": _k8s_terms, "fgd": _fgd_terms}


def explain_terms(d: Decision) -> Explanation:
    """The per-term breakdown of a heuristic's decision (see the module docstring)."""
    terms = _TERMS.get(d.scorer.name)
    if terms is None:
        raise ExplainError(f"no closed-form breakdown for policy {d.scorer.name!r}: "
                           f"explainable policies are {', '.join(EXPLAINABLE)}")
    return terms(d, np.array([d.chosen_node, d.runner_up_node], dtype=np.int64))
