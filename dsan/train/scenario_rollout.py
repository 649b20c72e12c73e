"""Experience on the seed scenario: telemetry changes inside the episode.

Unlike openb episodes (:mod:`dsan.train.rollout`, one telemetry block per episode), the
scenario writes a telemetry sample every 10 s, so the node embeddings (LSTM + GNN) are
recomputed whenever the snapshot's ``telemetry_version`` moved since the last decision, the
same rule as :class:`~dsan.model.serving.ServingModel`. The scenario stage trains the
per-pod part of the network (attention fusion and the head's MLP and value) on top of
frozen node encoders, so a step stores its candidates' embeddings as plain arrays and PPO
never backpropagates through the LSTM/GNN of thousands of telemetry versions.

Per step: ``x`` (m, 128) features, ``emb`` (m, 2, H) candidate embeddings, the action, the
teacher's best nodes (imitation targets), log-prob, value and reward.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import torch

from dsan.core.snapshot import ClusterSnapshot
from dsan.features import (
    AGE_COLUMNS,
    PlacementCache,
    TargetWorkload,
    age_columns,
    featurize,
    node_block,
    telemetry_of,
)
from dsan.model.graph import build_graph
from dsan.model.net import DSANNet
from dsan.policies.base import Scorer
from dsan.train.scenario_env import ScenarioEpisode

#: ``dagger``: the model acts greedily, the teacher labels (DAgger, Ross et al. 2011).
MODES = ("sample", "greedy", "teacher", "dagger")


@dataclass
class ScenarioRollout:
    x: list[npt.NDArray[np.float32]] = field(default_factory=list)
    emb: list[npt.NDArray[np.float32]] = field(default_factory=list)
    action: list[int] = field(default_factory=list)
    teacher: list[npt.NDArray[np.bool_]] = field(default_factory=list)
    logp: list[float] = field(default_factory=list)
    value: list[float] = field(default_factory=list)
    reward: list[float] = field(default_factory=list)
    #: Reward of every in-window step, kept or not (what evaluation compares).
    total: float = 0.0
    summary: dict[str, float] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.action)


class EmbeddingCache:
    """All nodes' embeddings and static columns, recomputed when telemetry changes."""

    def __init__(self, model: DSANNet) -> None:
        self.model = model
        self.version = -1
        self.emb = torch.zeros(0)
        self.cols = np.zeros((0, 0), dtype=np.float32)
        self.recomputed = 0

    def get(self, snap: ClusterSnapshot) -> tuple[torch.Tensor, npt.NDArray[np.float32]]:
        if snap.telemetry_version != self.version or self.emb.shape[0] != len(snap):
            nodes = np.arange(len(snap), dtype=np.int64)
            self.cols = node_block(snap, nodes)
            ei, ew = (torch.from_numpy(a) for a in build_graph(snap))
            with torch.inference_mode():
                self.emb = self.model.embed_nodes(
                    torch.from_numpy(self.cols), torch.from_numpy(telemetry_of(snap, nodes)), ei, ew
                )
            self.version = snap.telemetry_version
            self.recomputed += 1
        return self.emb, self.cols


def run_window(
    ep: ScenarioEpisode,
    target: TargetWorkload,
    model: DSANNet | None = None,
    mode: str = "sample",
    teacher: Scorer | None = None,
    rng: np.random.Generator | None = None,
    record_every: int = 1,
    label_gpu_pods: bool = True,
) -> ScenarioRollout:
    """Play ``ep``: the teacher up to the window, then ``mode`` inside it.

    ``teacher`` is required (it plays the warm-up and, in ``teacher`` mode, the window);
    ``record_every`` keeps every k-th in-window step for imitation (memory), while every
    step's reward still counts (it is added to the last kept step). ``label_gpu_pods=False``
    keeps no imitation label for GPU pods: the openb stage owns their ranking.
    """
    if mode not in MODES:
        raise ValueError(f"unknown rollout mode {mode!r}; known: {', '.join(MODES)}")
    if teacher is None or (mode != "teacher" and model is None):
        raise ValueError("run_window needs a teacher, and a model unless mode='teacher'")
    rng = rng or np.random.default_rng(0)
    cache = EmbeddingCache(model) if model is not None else None
    pcache = PlacementCache(target)
    ro = ScenarioRollout()
    k = 0
    while ep.obs is not None:
        d = ep.obs
        nodes = np.asarray(d.nodes, dtype=np.int64)
        if not ep.in_window:
            s = np.asarray(teacher.score(d.pod, d.snapshot, nodes), dtype=np.float64)
            ep.step(int(nodes[_pick(s, rng)]))
            continue
        labelled = mode in ("teacher", "dagger")
        keep = cache is not None and (not labelled or k % record_every == 0)
        keep = keep and not (labelled and not label_gpu_pods and d.pod.num_gpu > 0)
        k += 1
        x = e = None
        if cache is not None and (keep or mode != "teacher"):
            emb, cols = cache.get(d.snapshot)
            c = cols[nodes]
            c[:, AGE_COLUMNS] = age_columns(d.snapshot, nodes)
            x = featurize(d.pod, d.snapshot, nodes, target, node_cols=c, cache=pcache)[0]
            e = emb[torch.from_numpy(nodes)]
        best = np.zeros(len(nodes), dtype=bool)
        logp = value = 0.0
        if labelled and (keep or mode == "teacher"):
            s = np.asarray(teacher.score(d.pod, d.snapshot, nodes), dtype=np.float64)
            # Imitation targets: the teacher's top class, not only its exact tie-break.
            best = s >= s.max() - float(getattr(teacher, "tolerance", 0.0))
            a = _pick(s, rng)
        if mode != "teacher":
            assert model is not None and x is not None and e is not None
            with torch.inference_mode():
                logits, v = model.score(
                    torch.from_numpy(x),
                    e,
                    torch.ones(len(nodes), dtype=torch.bool),
                    torch.zeros(len(nodes), dtype=torch.long),
                    1,
                )
            lp = torch.log_softmax(logits.double(), 0)
            a = (
                int(torch.argmax(lp))
                if mode != "sample"
                else int(rng.choice(len(nodes), p=lp.exp().numpy() / float(lp.exp().sum())))
            )
            logp, value = float(lp[a]), float(v[0])
        r = ep.step(int(nodes[a]))
        ro.total += r
        if keep:
            assert x is not None and e is not None
            ro.x.append(x)
            ro.emb.append(e.numpy())
            ro.action.append(a)
            ro.teacher.append(best)
            ro.logp.append(logp)
            ro.value.append(value)
            ro.reward.append(r)
        elif ro.reward:
            ro.reward[-1] += r
    ro.summary = ep.summary()
    return ro


def _pick(scores: npt.NDArray[np.float64], rng: np.random.Generator) -> int:
    """Argmax with random tie-breaking, as kube-scheduler's selectHost does."""
    ties = np.flatnonzero(scores >= scores.max())
    return int(ties[0] if ties.size == 1 else rng.choice(ties))
