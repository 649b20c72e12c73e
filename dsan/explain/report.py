"""Play an episode with DSAN and build the markdown Shapley report."""

from __future__ import annotations

import numpy as np
import torch

from dsan.explain.shapley import shapley
from dsan.features import FEATURES, PlacementCache, featurize, node_block, telemetry_of
from dsan.model.export import DEFAULT_DIR, load
from dsan.model.graph import build_graph
from dsan.train.env import EnvConfig, make_episode


def explain_episode(
    pods: str,
    n_nodes: int,
    decisions: int,
    permutations: int,
    top: int,
    model_dir: str | None,
    seed: int,
) -> str:
    torch.set_num_threads(1)
    model, manifest = load(model_dir or DEFAULT_DIR)
    ep = make_episode(EnvConfig(workloads=(pods,), n_nodes=n_nodes), seed)
    idx = np.arange(len(ep.snap), dtype=np.int64)
    node_x = node_block(ep.snap, idx)
    ei, ew = build_graph(ep.snap)
    with torch.inference_mode():
        emb = model.embed_nodes(
            torch.from_numpy(node_x), torch.from_numpy(telemetry_of(ep.snap, idx)), ei, ew
        )
    cache = PlacementCache(ep.target)
    rng = np.random.default_rng(seed)
    total = np.zeros(len(FEATURES))
    explained = 0
    rows: list[str] = []
    while explained < decisions:
        nxt = ep.next_decision()
        if nxt is None:
            break
        pod, cand, _ = nxt
        x, _ = featurize(pod, ep.snap, cand, ep.target, node_cols=node_x[cand], cache=cache)
        with torch.inference_mode():
            logits, _ = model.score(
                torch.from_numpy(x),
                emb.index_select(0, torch.from_numpy(cand)),
                torch.ones(len(cand), dtype=torch.bool),
                torch.zeros(len(cand), dtype=torch.long),
                1,
            )
        a = int(torch.argmax(logits))
        if rng.random() < 0.5:  # explain a spread of decisions, not only the first ones
            phi, at_x, at_base = shapley(
                model, x[a], x.mean(axis=0), emb[int(cand[a])], permutations, seed + explained
            )
            total += np.abs(phi)
            explained += 1
            best = np.argsort(-np.abs(phi))[:3]
            why = ", ".join(f"`{FEATURES[i].name}` {phi[i]:+.2f}" for i in best)
            rows.append(
                f"| {pod.name} | {pod.num_gpu}x{pod.gpu_milli} | {ep.snap.names[int(cand[a])]} "
                f"| {len(cand)} | {at_x - at_base:+.2f} | {why} |"
            )
        ep.place(pod, int(cand[a]))
    mean = total / max(1, explained)
    order = np.argsort(-mean)[:top]
    out = [
        "# DSAN decision explanations (Shapley values)",
        "",
        f"Model `{manifest['version']}` (schema `{manifest['feature_schema']}`), workload "
        f"`{pods}`, {n_nodes} nodes, seed {seed}, {explained} decisions, {permutations} "
        "permutations each. Baseline = the candidates' mean feature row; attributions sum to "
        "logit(chosen) - logit(baseline).",
        "",
        "## Mean |Shapley value| per feature",
        "",
        "| feature | tier | unit | mean abs attribution |",
        "|---|---|---|---|",
        *[
            f"| `{FEATURES[i].name}` | {FEATURES[i].tier} | {FEATURES[i].unit} | {mean[i]:.3f} |"
            for i in order
        ],
        "",
        "## Decisions",
        "",
        "| pod | GPUs x milli | chosen node | candidates | logit - baseline | top features |",
        "|---|---|---|---|---|---|",
        *rows,
    ]
    return "\n".join(out) + "\n"
