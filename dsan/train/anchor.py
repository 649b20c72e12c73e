"""The scenario stage's openb anchor: reference log-probabilities on greedy openb episodes of
the entering model. :meth:`OpenbAnchor.check` measures how far the stage moved them;
:meth:`OpenbAnchor.loss` penalises the KL and the squared change over all candidate rows
(the KL alone watches only the nodes the reference likes, and let FGD's ties re-rank).
"""

from __future__ import annotations

import numpy as np
import torch

from dsan.model.net import DSANNet
from dsan.train.collector import collect
from dsan.train.openb import WORKLOADS, EnvConfig, make_episode
from dsan.train.rollout import Rollout
from dsan.train.updates import batch

#: openb episode seeds for the anchor (disjoint from PPO's < 10_000 and eval's 10_000+).
ANCHOR_SEED_BASE = 20_000
MINIBATCH = 64


class OpenbAnchor:
    """Reference log-probabilities on openb states and the penalty against them."""

    def __init__(self, model: DSANNet, episodes: int, coef: float) -> None:
        self.coef = coef
        env = EnvConfig(workloads=WORKLOADS)
        self.rollouts: list[Rollout] = []
        self.ref: list[torch.Tensor] = []
        for i in range(episodes):
            w = WORKLOADS[i % len(WORKLOADS)]
            (ro,) = collect([make_episode(env, ANCHOR_SEED_BASE + i, w)], model, "greedy")
            if len(ro) == 0:
                continue
            with torch.no_grad():
                logp, *_ = batch(model, ro, np.arange(len(ro)))
            self.rollouts.append(ro)
            self.ref.append(logp.detach())

    def check(self, model: DSANNet) -> dict[str, float]:
        """The largest change of an openb log-probability and the steps whose greedy choice
        changed."""
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
        return {"openb_max_logp_change": worst, "openb_changed_steps": changed,
                "openb_steps": steps}

    def loss(self, model: DSANNet, rng: np.random.Generator) -> torch.Tensor:
        """The penalty on a random minibatch of openb steps (0 without ``coef``)."""
        if not self.rollouts or self.coef == 0:
            return torch.zeros(())
        i = int(rng.integers(len(self.rollouts)))
        ro, ref = self.rollouts[i], self.ref[i]
        steps = np.sort(rng.choice(len(ro), size=min(MINIBATCH, len(ro)), replace=False))
        logp, seg, _, _ = batch(model, ro, steps)
        offsets = np.concatenate([[0], np.cumsum([len(c) for c in ro.cand])])
        rows = np.concatenate([np.arange(offsets[s], offsets[s + 1]) for s in steps])
        r = ref[torch.from_numpy(rows)]
        kl = torch.zeros(len(steps)).index_add(0, seg, r.exp() * (r - logp))
        return self.coef * (kl.mean() + (logp - r).pow(2).mean())
