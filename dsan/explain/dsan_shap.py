"""SHAP for the DSAN scorer: why the served model ranked node A above node B.

The explained function is the served runtime's logit of one row, ``Head(f, Fuse(f, e))``, a
function of the 128 named features ``f`` and the node's (2, H) embedding ``e`` alone. The
players are the features plus ``e`` as one grouped player (masking a feature cannot re-run the
GNN). The background is the decision's other candidates, one set for both nodes, so
``sum(phi_A - phi_B) = logit_A - logit_B`` exactly. Details: docs/explain.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dsan.core.snapshot import F64
from dsan.explain.decision import Decision, ExplainError
from dsan.explain.explanation import Explanation
from dsan.explain.shapley import Model, ShapConfig, permutation_shapley
from dsan.features import AGE_COLUMNS, FEATURES, N_FEATURES, age_columns, featurize
from dsan.model.runtime import Runtime
from dsan.model.serving import ServingModel
from dsan.policies.dsan import DSANScorer

EMBEDDING_PLAYER = "node_embedding (LSTM + GNN streams)"


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


def logit_fn(runtime: Runtime, hidden: int) -> tuple[Model, int]:
    """The batched explained function: rows ``[f (128), e (2*hidden)]`` -> served logits."""
    width = N_FEATURES + 2 * hidden

    def f(z: F64) -> F64:
        x = np.ascontiguousarray(z[:, :N_FEATURES], dtype=np.float32)
        e = np.ascontiguousarray(z[:, N_FEATURES:], dtype=np.float32).reshape(-1, 2, hidden)
        return runtime.head(x, e)

    return f, width


def rows(d: Decision, serving: ServingModel) -> F64:
    """``[features, embedding]`` of every candidate, as the serving path computes them."""
    snap = d.snap
    serving.refresh(snap)
    cols = serving.embeddings.node_cols[d.candidates]
    cols[:, AGE_COLUMNS] = age_columns(snap, d.candidates)
    x, _ = featurize(d.pod, snap, d.candidates, serving.workload, node_cols=cols)
    e = serving.runtime.streams(d.candidates).reshape(len(d.candidates), -1)
    return np.concatenate([x.astype(np.float64), e.astype(np.float64)], axis=1)


def explain_dsan(d: Decision, cfg: DSANShapConfig | None = None) -> Explanation:
    if not isinstance(d.scorer, DSANScorer):
        raise ExplainError(f"scorer {d.scorer.name!r} has no DSAN model to explain")
    serving = d.scorer.serving
    return explain_rows(d, serving.runtime, rows(d, serving), cfg)


def explain_rows(d: Decision, runtime: Runtime, z: F64, cfg: DSANShapConfig | None = None,
                 stop: Callable[[], bool] | None = None) -> Explanation:
    """SHAP of ``d`` from its candidates' rows ``z`` (:func:`rows`; the sidecar assembles them
    from a copy of its state). ``stop``: :func:`~dsan.explain.shapley.permutation_shapley`'s."""
    cfg = cfg or DSANShapConfig()
    hidden = runtime.cfg.hidden
    f, width = logit_fn(runtime, hidden)
    if z.shape[1] != width:
        raise ExplainError(f"model expects {width} columns, featurizer gave {z.shape[1]}")
    pair = np.array([d.chosen, d.runner_up])
    others = np.setdiff1d(np.arange(len(d.candidates)), pair)
    if others.size == 0:
        others = pair  # two candidates: they are each other's background
    rng = np.random.default_rng(cfg.seed)
    bg_idx = np.sort(rng.choice(others, size=min(cfg.background, others.size), replace=False))
    groups = np.r_[np.arange(N_FEATURES), np.full(2 * hidden, N_FEATURES)].astype(np.int64)
    sv = permutation_shapley(
        f, z[pair], z[bg_idx], groups, ShapConfig(permutations=cfg.permutations, seed=cfg.seed),
        stop=stop,
    )
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
