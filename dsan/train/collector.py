"""The experience collector of both stages: :func:`collect` plays K episodes in lockstep (one
batched featurization and one head call per step) with the model (``sample``, ``greedy``),
the teacher (``teacher``) or both (``dagger``: the model acts greedily, the teacher labels).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch

from dsan.features import featurize_batch
from dsan.model.net import DSANNet
from dsan.policies.base import Scorer
from dsan.train.env import Decision, Env, NodeInputs
from dsan.train.rollout import Rollout, RowStore

MODES = ("sample", "greedy", "teacher", "dagger")
F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]
Chosen = tuple[I64, npt.NDArray[np.float64]]  # per segment: the row chosen, its log-prob
#: (logits (rows,), segment offsets (k+1,), "sample" | "greedy", rng) -> Chosen
Choose = Callable[[F32, I64, str, np.random.Generator], Chosen]


def segment_choice(logits: F32, offsets: I64, mode: str, rng: np.random.Generator) -> Chosen:
    """Per segment ``offsets[i]:offsets[i+1]`` of ``logits``: the chosen row within it and its
    log-probability. ``greedy``: the first maximum; ``sample``: the softmax's inverse CDF at
    one uniform per segment."""
    lg = logits.astype(np.float64)
    starts, sizes = offsets[:-1], np.diff(offsets)
    seg = np.repeat(np.arange(len(sizes)), sizes)
    z = lg - np.maximum.reduceat(lg, starts)[seg]
    e = np.exp(z)
    tot = np.add.reduceat(e, starts)
    logp = z - np.log(tot)[seg]
    if mode == "greedy":
        rows = np.arange(len(lg))
        pick = np.minimum.reduceat(np.where(z == 0.0, rows, len(lg)), starts)
    else:
        cs = np.cumsum(e)
        base = cs[starts] - e[starts]
        target = base + rng.random(len(sizes)) * tot
        pick = np.clip(np.searchsorted(cs, target, side="right"), starts, offsets[1:] - 1)
    return (pick - starts).astype(np.int64), logp[pick]


def softmax_choice(logits: F32, offsets: I64, mode: str, rng: np.random.Generator) -> Chosen:
    """:func:`segment_choice` one segment at a time with torch's float64 log-softmax and
    ``rng.choice``: the scenario stage's draw, which its shipped model is rebuilt from."""
    picks, logps = [], []
    for lo, hi in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True):
        lp = torch.log_softmax(torch.from_numpy(logits[lo:hi]).double(), 0)
        if mode == "sample":
            a = int(rng.choice(hi - lo, p=lp.exp().numpy() / float(lp.exp().sum())))
        else:
            a = int(torch.argmax(lp))
        picks.append(a)
        logps.append(float(lp[a]))
    return np.array(picks, dtype=np.int64), np.array(logps)


@dataclass
class _Track:
    """One episode being played: its rollout, decision count and node embeddings."""

    env: Env
    ro: Rollout
    k: int = 0
    emb: torch.Tensor | None = None
    emb_of: NodeInputs | None = None

    def embeddings(self, model: DSANNet) -> torch.Tensor:
        """All nodes' embeddings, recomputed when the env hands out new node inputs."""
        inputs = self.env.nodes()
        if self.emb is None or self.emb_of is not inputs:
            self.emb, self.emb_of = inputs.embed(model), inputs
        return self.emb


def collect(
    envs: Sequence[Env],
    model: DSANNet | None = None,
    mode: str = "sample",
    teacher: Scorer | None = None,
    rng: np.random.Generator | None = None,
    keep: bool = True,
    store: RowStore | None = None,
    record_every: int = 1,
    label_gpu_pods: bool = True,
    choose: Choose = segment_choice,
) -> list[Rollout]:
    """Play ``envs`` (all of one class) to the end in lockstep; their rollouts, in order.

    ``keep=False`` records no features (evaluation); with ``store`` the feature rows are
    views into it. In the labelled modes ``record_every`` keeps every k-th step and
    ``label_gpu_pods=False`` none of GPU pods; a step not recorded adds its reward to the
    last recorded one. ``choose`` draws the model's actions."""
    if mode not in MODES:
        raise ValueError(f"unknown rollout mode {mode!r}; known: {', '.join(MODES)}")
    labelled, acts = mode in ("teacher", "dagger"), mode != "teacher"
    if (labelled and teacher is None) or (acts and model is None):
        raise ValueError(f"mode {mode!r} needs {'a teacher' if labelled else 'a model'}")
    if len({type(e) for e in envs}) > 1:
        raise ValueError("collect steps envs of one class together")
    if keep and model is None and any(not e.fixed_nodes for e in envs):
        raise ValueError("keeping steps whose node inputs change needs the model's embeddings")
    rng = rng or np.random.default_rng(0)
    tracks = [_Track(e, Rollout(nodes=e.nodes() if e.fixed_nodes else None)) for e in envs]
    todo = [(t, d) for t in tracks if (d := t.env.decision()) is not None]
    while todo:
        live, ds = [t for t, _ in todo], [d for _, d in todo]
        rec = [
            not labelled or (t.k % record_every == 0 and (label_gpu_pods or d.pod.num_gpu == 0))
            for t, d in zip(live, ds, strict=True)
        ]
        kept = [keep and r for r in rec]
        need = [j for j in range(len(live)) if acts or kept[j]]
        x = np.zeros((0, 0), np.float32)
        xs: dict[int, F32] = {}
        es: dict[int, torch.Tensor] = {}
        if need:
            x = _features([live[j] for j in need], [ds[j] for j in need])
            if store is not None and any(kept):
                x = store.put(x)
            cuts = np.cumsum([len(ds[j].cand) for j in need])[:-1]
            xs = dict(zip(need, np.split(x, cuts), strict=True))
        for j in need:
            if acts or not live[j].env.fixed_nodes:
                assert model is not None
                emb = live[j].embeddings(model)
                es[j] = emb.index_select(0, torch.from_numpy(ds[j].cand))
        n = len(live)
        picked, logps, values = [0] * n, [0.0] * n, [0.0] * n
        if acts:  # every live episode's rows are in x, in order
            assert model is not None
            picked, logps, values = _act(model, ds, x, [es[j] for j in range(n)], mode, rng, choose)
        best = [np.zeros(len(d.cand), dtype=bool) for d in ds]
        for j, (t, d) in enumerate(zip(live, ds, strict=True)):
            if labelled and (rec[j] or mode == "teacher"):
                assert teacher is not None
                s = np.asarray(teacher.score(d.pod, d.snap, d.cand), dtype=np.float64)
                a, best[j] = t.env.label(s, rng)
                if mode == "teacher":
                    picked[j] = a
        chosen = [int(d.cand[a]) for d, a in zip(ds, picked, strict=True)]
        rewards = type(live[0].env).step_all([t.env for t in live], chosen)
        for j, t in enumerate(live):
            t.k += 1
            if not rec[j]:
                t.ro.fold(rewards[j])
                continue
            rows = None
            if kept[j]:
                e = None if t.env.fixed_nodes else es[j].numpy()
                rows = (xs[j], ds[j].cand, e, best[j])
            t.ro.add(rewards[j], picked[j], logps[j], values[j], rows)
        todo = [(t, d) for t in live if (d := t.env.decision()) is not None]
    for t in tracks:
        t.ro.summary = t.env.summary()
    return [t.ro for t in tracks]


def _act(model: DSANNet, ds: list[Decision], x: F32, es: list[torch.Tensor], mode: str,
         rng: np.random.Generator, choose: Choose) -> tuple[list[int], list[float], list[float]]:
    """The model's choice in every live episode: one head call over all their candidates."""
    sizes = np.array([len(d.cand) for d in ds], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    seg = np.repeat(np.arange(len(ds), dtype=np.int64), sizes)
    with torch.inference_mode():
        mask = torch.ones(len(x), dtype=torch.bool)
        logits, v = model.score(torch.from_numpy(x), torch.cat(es), mask, torch.from_numpy(seg),
                                len(ds))
    picks, logps = choose(logits.numpy(), offsets, "greedy" if mode == "dagger" else mode, rng)
    return picks.tolist(), logps.tolist(), v.numpy().tolist()


def _features(live: list[_Track], ds: list[Decision]) -> F32:
    """The decisions featurized in one batch per target workload, rows in ``live`` order."""
    groups: dict[int, list[int]] = {}
    for j, t in enumerate(live):
        groups.setdefault(id(t.env.target), []).append(j)
    parts: list[F32] = [np.zeros((0, 0), np.float32)] * len(live)
    for js in groups.values():
        x = featurize_batch([ds[j].pod for j in js], [ds[j].snap for j in js],
                            [ds[j].cand for j in js], live[js[0]].env.target,
                            [live[j].env.node_cols() for j in js], [live[j].env.cache for j in js])
        if len(groups) == 1:
            return x
        cuts = np.cumsum([len(ds[j].cand) for j in js])[:-1]
        for j, xj in zip(js, np.split(x, cuts), strict=True):
            parts[j] = xj
    return np.concatenate(parts)
