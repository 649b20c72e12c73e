"""Experience collection: run one episode with a model (sampled or greedy) or a teacher
heuristic, and keep what PPO and imitation need, as flat arrays.

Per decision the hot path is: featurize the feasible nodes (numpy, vectorised), index the
episode's cached node embeddings, run the small head. Node embeddings are computed once per
episode: telemetry and topology do not change inside an openb episode.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import torch

from dsan.features import PlacementCache, featurize, node_block, telemetry_of
from dsan.model.graph import build_graph
from dsan.model.net import DSANNet
from dsan.policies.base import Scorer
from dsan.train.env import Episode


@dataclass
class Rollout:
    """Decisions of one episode. ``x`` is (sum m_i, 128); ``offsets`` (k+1,) delimit steps."""

    node_x: npt.NDArray[np.float32]
    telemetry: npt.NDArray[np.float32]
    edge_index: torch.Tensor
    edge_weight: torch.Tensor
    x: list[npt.NDArray[np.float32]] = field(default_factory=list)
    cand: list[npt.NDArray[np.int64]] = field(default_factory=list)
    action: list[int] = field(default_factory=list)
    teacher: list[npt.NDArray[np.bool_]] = field(default_factory=list)
    logp: list[float] = field(default_factory=list)
    value: list[float] = field(default_factory=list)
    reward: list[float] = field(default_factory=list)
    alloc_pct: float = 0.0
    failed: int = 0
    pods: int = 0

    def __len__(self) -> int:
        return len(self.action)

    def flat(self) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Stacked features, candidate node ids and per-step offsets."""
        sizes = np.array([len(c) for c in self.cand], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        return np.concatenate(self.x), np.concatenate(self.cand), offsets


def run_episode(
    ep: Episode,
    model: DSANNet | None = None,
    mode: str = "sample",
    teacher: Scorer | None = None,
    rng: np.random.Generator | None = None,
    keep: bool = True,
) -> Rollout:
    """Play ``ep`` to the end. ``mode``: ``sample`` or ``greedy`` (model acts) or ``teacher``
    (``teacher`` acts; its best-scored nodes are recorded as imitation targets)."""
    if mode not in ("sample", "greedy", "teacher"):
        raise ValueError(f"unknown rollout mode {mode!r}")
    rng = rng or np.random.default_rng(0)
    nodes = np.arange(len(ep.snap), dtype=np.int64)
    node_x = node_block(ep.snap, nodes)
    tel = telemetry_of(ep.snap, nodes)
    ei, ew = build_graph(ep.snap)
    ro = Rollout(node_x, tel, ei, ew)
    emb = torch.zeros(0)
    if model is not None:
        with torch.inference_mode():
            emb = model.embed_nodes(torch.from_numpy(node_x), torch.from_numpy(tel), ei, ew)
    pending_sla = 0.0
    cache = PlacementCache(ep.target)
    while True:
        nxt = ep.next_decision()
        if nxt is None:
            break
        pod, cand, sla = nxt
        if ro.reward:  # pods that failed since the last decision are that decision's fault
            ro.reward[-1] += ep.weights.sla * sla
        else:
            pending_sla += sla
        need_x = keep or mode != "teacher"
        x = (
            featurize(pod, ep.snap, cand, ep.target, node_cols=node_x[cand], cache=cache)[0]
            if need_x
            else None
        )
        logp = value = 0.0
        best = np.zeros(len(cand), dtype=bool)
        if mode == "teacher":
            assert teacher is not None
            s = np.asarray(teacher.score(pod, ep.snap, cand), dtype=np.float64)
            best = s >= s.max()
            # Ties go to the lowest node name, as in the FGD simulator (and `dsan sim openb`):
            # a fixed order consolidates, a random one spreads pods and fragments more.
            ties = np.flatnonzero(best)
            a = int(ties[np.argmin(np.asarray(ep.snap.names, dtype=object)[cand[ties]])])
            best = np.zeros(len(cand), dtype=bool)  # imitate the exact choice, tie-break too
            best[a] = True
        else:
            assert model is not None and x is not None
            with torch.inference_mode():
                logits, v = model.score(
                    torch.from_numpy(x),
                    emb.index_select(0, torch.from_numpy(cand)),
                    torch.ones(len(cand), dtype=torch.bool),
                    torch.zeros(len(cand), dtype=torch.long),
                    1,
                )
            lp = torch.log_softmax(logits, 0)
            if mode == "greedy":
                a = int(torch.argmax(logits))
            else:
                a = int(torch.multinomial(lp.exp(), 1, generator=None))
            logp, value = float(lp[a]), float(v[0])
        parts = ep.place(pod, int(cand[a]))
        r = ep.reward(parts, 0.0) + (ep.weights.sla * pending_sla if not ro.reward else 0.0)
        pending_sla = 0.0
        if keep:
            assert x is not None
            ro.x.append(x)
            ro.cand.append(cand)
            ro.teacher.append(best)
        ro.action.append(a)
        ro.logp.append(logp)
        ro.value.append(value)
        ro.reward.append(r)
    if ro.reward:
        ro.reward[-1] += ep.weights.sla * pending_sla
    ro.alloc_pct, ro.failed, ro.pods = ep.alloc_pct, ep.failed, len(ep.order)
    return ro
