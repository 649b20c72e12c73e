"""Keep the openb policy while training on the scenario: a KL anchor on openb states.

The shipped model is trained in two stages: the openb stage (the head's FGD prior
scale and linear skip, which break FGD's ties on openb) and the scenario stage (the attention
fusion and the head's MLP). The MLP adds to every logit, so a scenario-trained MLP could
re-rank openb's FGD ties and undo the first stage. The anchor records greedy openb episodes
with the model as it enters the scenario stage and, in every update, adds

    anchor_coef * mean_steps KL(p_ref || p_new)

over a random minibatch of those openb steps, plus ``coef * mean_rows (log p_new - log
p_ref)^2`` over *all* candidate rows: the KL alone only watches the nodes the reference
already likes, and on openb every FGD tie among the rest is a decision the openb stage's
skip weights made (a KL-only anchor at coef 10 let the scenario stage turn openb `default`
from 4.6 % to 14.6 % unallocated GPUs). Whether the anchor held is then measured on openb
(bench/dsan_openb_eval.py, docs/model.md), not assumed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from dsan.model.net import DSANNet
from dsan.train.collector import collect
from dsan.train.openb import EnvConfig, make_episode
from dsan.train.rollout import Rollout
from dsan.train.updates import batch

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
    coef: float = 0.0
    minibatch: int = 64


class OpenbAnchor:
    """Reference log-probabilities on openb states and the KL penalty against them."""

    def __init__(self, model: DSANNet, cfg: AnchorConfig) -> None:
        self.cfg = cfg
        env = EnvConfig(workloads=cfg.workloads, n_nodes=cfg.n_nodes)
        self.rollouts: list[Rollout] = []
        self.ref: list[torch.Tensor] = []
        for i in range(cfg.episodes):
            w = cfg.workloads[i % len(cfg.workloads)]
            (ro,) = collect([make_episode(env, ANCHOR_SEED_BASE + i, w)], model, "greedy")
            if len(ro) == 0:
                continue
            with torch.no_grad():
                logp, *_ = batch(model, ro, np.arange(len(ro)))
            self.rollouts.append(ro)
            self.ref.append(logp.detach())

    def __len__(self) -> int:
        return sum(len(r) for r in self.rollouts)

    def check(self, model: DSANNet) -> dict[str, float]:
        """Largest change of any openb log-probability since the reference, and the steps
        whose greedy choice changed (0 and 0 when the scenario stage left openb alone)."""
        worst, changed, steps = 0.0, 0, 0
        with torch.no_grad():
            for ro, ref in zip(self.rollouts, self.ref, strict=True):
                logp, seg, _, _ = batch(model, ro, np.arange(len(ro)))
                worst = max(worst, float((logp - ref).abs().max()))
                n = len(ro)
                best_new = torch.full((n,), -1e30).scatter_reduce(0, seg, logp, "amax")
                best_ref = torch.full((n,), -1e30).scatter_reduce(0, seg, ref, "amax")
                is_new = logp >= best_new[seg]
                is_ref = ref >= best_ref[seg]
                same = torch.zeros(n).index_add(0, seg, (is_new & is_ref).float()) > 0
                changed += int((~same).sum())
                steps += n
        return {
            "openb_max_logp_change": worst,
            "openb_changed_steps": changed,
            "openb_steps": steps,
        }

    def loss(self, model: DSANNet, rng: np.random.Generator) -> torch.Tensor:
        """``coef`` x (mean KL(ref || new) + mean squared log-prob change), openb steps."""
        if not self.rollouts or self.cfg.coef == 0:
            return torch.zeros(())
        i = int(rng.integers(len(self.rollouts)))
        ro, ref = self.rollouts[i], self.ref[i]
        steps = np.sort(rng.choice(len(ro), size=min(self.cfg.minibatch, len(ro)), replace=False))
        logp, seg, _, _ = batch(model, ro, steps)
        sizes = np.array([len(ro.cand[s]) for s in steps])
        offsets = np.concatenate([[0], np.cumsum([len(c) for c in ro.cand])])
        rows = torch.from_numpy(
            np.concatenate(
                [np.arange(offsets[s], offsets[s] + n) for s, n in zip(steps, sizes, strict=True)]
            )
        )
        r = ref[rows]
        kl = torch.zeros(len(steps)).index_add(0, seg, r.exp() * (r - logp))
        return self.cfg.coef * (kl.mean() + (logp - r).pow(2).mean())
