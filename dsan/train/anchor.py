"""Keep the openb policy while training on the scenario: a KL anchor on openb states.

The shipped model is trained in two stages: the openb stage (engineer O: the head's FGD prior
scale and linear skip, which break FGD's ties on openb) and the scenario stage (the attention
fusion and the head's MLP). The MLP adds to every logit, so a scenario-trained MLP could
re-rank openb's FGD ties and undo the first stage. The anchor records greedy openb episodes
with the model as it enters the scenario stage and, in every update, adds

    anchor_coef * mean_steps KL(p_ref || p_new)

over a random minibatch of those openb steps, so the scenario stage may change openb
decisions only where it pays in the scenario more than it costs in KL. Whether it did is
then measured on openb (bench/dsan_openb_eval.py, docs/model.md), not assumed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from dsan.model.net import DSANNet
from dsan.train.env import EnvConfig, make_episode
from dsan.train.ppo import _batch
from dsan.train.rollout import Rollout, run_episode

#: openb episode seeds for the anchor (disjoint from PPO's < 10_000 and eval's 10_000+).
ANCHOR_SEED_BASE = 20_000


@dataclass(frozen=True)
class AnchorConfig:
    episodes: int = 2
    workloads: tuple[str, ...] = (
        "openb_pod_list_default.csv",
        "openb_pod_list_gpushare40.csv",
        "openb_pod_list_multigpu20.csv",
        "openb_pod_list_cpu050.csv",
    )
    n_nodes: int = 96
    coef: float = 10.0
    minibatch: int = 64


class OpenbAnchor:
    """Reference log-probabilities on openb states and the KL penalty against them."""

    def __init__(self, model: DSANNet, cfg: AnchorConfig) -> None:
        self.cfg = cfg
        env = EnvConfig(workloads=cfg.workloads, n_nodes=cfg.n_nodes)
        self.rollouts: list[Rollout] = []
        self.ref: list[torch.Tensor] = []
        for i in range(cfg.episodes):
            ro = run_episode(make_episode(env, ANCHOR_SEED_BASE + i), model, "greedy")
            if len(ro) == 0:
                continue
            with torch.no_grad():
                logp, *_ = _batch(model, ro, np.arange(len(ro)))
            self.rollouts.append(ro)
            self.ref.append(logp.detach())

    def __len__(self) -> int:
        return sum(len(r) for r in self.rollouts)

    def loss(self, model: DSANNet, rng: np.random.Generator) -> torch.Tensor:
        """``coef`` x mean KL(ref || new) over a random minibatch of openb steps."""
        if not self.rollouts or self.cfg.coef == 0:
            return torch.zeros(())
        i = int(rng.integers(len(self.rollouts)))
        ro, ref = self.rollouts[i], self.ref[i]
        steps = np.sort(rng.choice(len(ro), size=min(self.cfg.minibatch, len(ro)), replace=False))
        logp, seg, _, _ = _batch(model, ro, steps)
        sizes = np.array([len(ro.cand[s]) for s in steps])
        offsets = np.concatenate([[0], np.cumsum([len(c) for c in ro.cand])])
        rows = torch.from_numpy(
            np.concatenate(
                [np.arange(offsets[s], offsets[s] + n) for s, n in zip(steps, sizes, strict=True)]
            )
        )
        r = ref[rows]
        kl = torch.zeros(len(steps)).index_add(0, seg, r.exp() * (r - logp))
        return self.cfg.coef * kl.mean()
