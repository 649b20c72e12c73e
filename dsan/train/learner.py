"""Data-parallel PPO: workers keep their rollouts and send gradients; the parameter server steps.

Why: a rollout is ~17 kB per decision (the 128 float32 features of ~57 candidate rows), so 16
openb episodes of 96 nodes are ~160 MB; pickling them in the worker (1.3 s), shipping them and
unpickling them in the parameter server (2.3 s) cost almost as much as collecting them (4.3 s
of CPU), serially, on the collection round's critical path. A gradient is 35,844 float32
(143 kB) whatever the rollouts hold.

How (synchronous data-parallel PPO, as DD-PPO, Wijmans et al. 2020): after collecting, a
worker computes its episodes' GAE and a minibatch plan (:class:`LocalLearner`) and reports only
counts and advantage moments (:class:`Share`). The PS combines the moments into the global
advantage mean and std, then runs rounds: it sends the current parameters (one flat vector),
every worker returns the gradient of the clipped PPO loss (:func:`dsan.train.updates.ppo_loss`) on
its k-th minibatch, and :func:`ppo_rounds` averages them weighted by steps, clips and takes the
optimiser step. Every term of the loss is a mean over steps, so the weighted average is the
gradient of the loss over the union of the workers' minibatches: with one worker the updates
are :func:`dsan.train.updates.ppo_update`'s (tested). Each worker splits its episodes into
minibatches of ``minibatch / workers`` steps, so a round sees ``minibatch`` steps and an
iteration takes as many optimiser steps as the PS would over the same rollouts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
from torch.nn.utils import parameters_to_vector

from dsan.model.net import DSANNet
from dsan.train.rollout import Rollout
from dsan.train.updates import PPOConfig, advantages, batch, ppo_loss

STATS = ("pg", "vf", "ent", "kl")
# flat gradient, steps it averages over, per-parameter "got a gradient", loss parts
Grad = tuple[torch.Tensor, int, torch.Tensor, dict[str, float]]


@dataclass
class Share:
    """What a worker reports after collecting: no rollouts, only what the PS needs."""

    decisions: int
    episode_rewards: list[float]
    alloc_pct: list[float]
    adv_n: int
    adv_mean: float
    adv_m2: float  # sum of squared deviations from adv_mean (Chan et al.'s parallel variance)
    minibatches: list[int]  # per PPO epoch
    wall_s: float = 0.0
    cpu_s: float = 0.0
    sys_s: float = 0.0  # of cpu_s, in the kernel (mostly page faults of new memory)
    minflt: int = 0  # minor page faults while collecting


class LocalLearner:
    """A worker's rollouts, their advantages and minibatch plan; gradients on request."""

    def __init__(
        self,
        model: DSANNet,
        rollouts: list[Rollout],
        a: PPOConfig,
        minibatch: int,
        rng: np.random.Generator,
    ) -> None:
        """``a``: the PPO hyperparameters (gamma, gae_lambda, ppo_epochs, clip, coefficients);
        ``minibatch``: this worker's steps per minibatch."""
        self.model, self.ros, self.a = model, rollouts, a
        self.gae = [advantages(ro, a.gamma, a.gae_lambda) for ro in rollouts]
        # Drawn in ppo_update's order (epoch, rollout, permutation): one worker = ppo_update.
        self.plan = [
            [
                (i, steps)
                for i, ro in enumerate(rollouts)
                for steps in np.array_split(rng.permutation(len(ro)), max(1, len(ro) // minibatch))
                if len(steps)  # an episode without decisions has nothing to learn from
            ]
            for _ in range(a.ppo_epochs)
        ]

    def share(
        self, wall_s: float = 0.0, cpu_s: float = 0.0, sys_s: float = 0.0, minflt: int = 0
    ) -> Share:
        adv = np.concatenate([g[0] for g in self.gae]) if self.gae else np.zeros(0)
        mean = float(adv.mean()) if len(adv) else 0.0
        return Share(
            decisions=sum(len(r) for r in self.ros),
            episode_rewards=[float(sum(r.reward)) for r in self.ros],
            alloc_pct=[float(r.summary["alloc_pct"]) for r in self.ros],
            adv_n=len(adv),
            adv_mean=mean,
            adv_m2=float(((adv - mean) ** 2).sum()),
            minibatches=[len(p) for p in self.plan],
            wall_s=wall_s,
            cpu_s=cpu_s,
            sys_s=sys_s,
            minflt=minflt,
        )

    def grad(self, params: torch.Tensor, epoch: int, k: int, mu: float, sd: float) -> Grad:
        """Gradient of the PPO loss on minibatch ``k`` of ``epoch`` at ``params`` (flat), its
        number of steps (0 when this worker has no such minibatch), which parameters got a
        gradient (an unused one stays ``None``, so Adam leaves it alone, as in ppo_update)
        and the loss parts."""
        plan = self.plan[epoch]
        if k >= len(plan):
            return torch.zeros(0), 0, torch.zeros(0, dtype=torch.bool), {}
        ps = list(self.model.parameters())
        with torch.no_grad():  # in place: views into ``params`` would change the kernels'
            # memory alignment and with it the float rounding of the gradient
            for p, v in zip(ps, torch.split(params, [p.numel() for p in ps]), strict=True):
                p.copy_(v.view_as(p))
        i, steps = plan[k]
        adv, ret = self.gae[i]
        self.model.zero_grad(set_to_none=True)
        logp, seg, first, values = batch(self.model, self.ros[i], steps)
        loss, parts = ppo_loss(
            logp, seg, first, values, self.ros[i], steps, adv, ret, mu, sd, self.a
        )
        loss.backward()
        g = torch.cat(
            [p.grad.reshape(-1) if p.grad is not None else torch.zeros(p.numel()) for p in ps]
        )
        used = torch.tensor([p.grad is not None for p in ps])
        return g, len(steps), used, {n: float(v.detach()) for n, v in parts.items()}


def global_moments(shares: Sequence[Share]) -> tuple[float, float]:
    """Mean and std (+1e-8, as ppo_update) of all workers' advantages, from their moments."""
    n = sum(s.adv_n for s in shares)
    if n == 0:
        return 0.0, 1.0
    mean = sum(s.adv_n * s.adv_mean for s in shares) / n
    m2 = sum(s.adv_m2 + s.adv_n * (s.adv_mean - mean) ** 2 for s in shares)
    return mean, float(np.sqrt(m2 / n)) + 1e-8


class Waitable(Protocol):
    def wait(self) -> Grad: ...


# submit(worker index, flat parameters, epoch, minibatch index) -> a future of LocalLearner.grad
Submit = Callable[[int, torch.Tensor, int, int], Waitable]


def ppo_rounds(
    model: DSANNet,
    opt: torch.optim.Optimizer,
    submit: Submit,
    minibatches: Sequence[Sequence[int]],
    max_norm: float = 0.5,
) -> dict[str, float]:
    """The PS side: per epoch and minibatch index, gather the workers' gradients (those that
    have that minibatch), average them weighted by steps, clip, step. ``minibatches[j][e]`` is
    worker j's minibatch count in epoch e. Returns the mean loss parts, as ppo_update."""
    ps = list(model.parameters())
    stats: dict[str, list[float]] = {n: [] for n in STATS}
    epochs = len(minibatches[0]) if minibatches else 0
    for e in range(epochs):
        for k in range(max(m[e] for m in minibatches)):
            params = parameters_to_vector(ps).detach()
            futs = [submit(j, params, e, k) for j, m in enumerate(minibatches) if k < m[e]]
            got = [f.wait() for f in futs]
            got = [r for r in got if r[1]]
            n = sum(r[1] for r in got)
            if n == 0:
                continue
            g = got[0][0] * (got[0][1] / n)
            for gj, w, _, _ in got[1:]:
                g = g + gj * (w / n)
            used = torch.stack([r[2] for r in got]).any(0).tolist()
            opt.zero_grad()
            off = 0
            for p, u in zip(ps, used, strict=True):
                p.grad = g[off : off + p.numel()].view_as(p).clone() if u else None
                off += p.numel()
            torch.nn.utils.clip_grad_norm_(ps, max_norm)
            opt.step()
            for name in STATS:
                stats[name].append(sum(s[name] * w for _, w, _, s in got) / n)
    return {k: float(np.mean(v)) if v else 0.0 for k, v in stats.items()}
