"""Data-parallel PPO (DD-PPO style): workers keep their rollouts and send gradients, the
parameter server averages them weighted by steps and steps (shipping rollouts costs about as
much as collecting them; a gradient is one flat vector). Every loss term is a mean over
steps, so with one worker the updates are :func:`dsan.train.updates.ppo_update`'s (tested).
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
from dsan.train.updates import PPOConfig, advantages, minibatches, ppo_loss

STATS = ("pg", "vf", "ent", "kl")
# flat gradient, steps it averages over, per-parameter "got a gradient", loss parts
Grad = tuple[torch.Tensor, int, torch.Tensor, dict[str, float]]


@dataclass
class Share:
    """What a worker reports after collecting: no rollouts, only what the PS needs."""

    decisions: int
    episode_rewards: list[float]
    adv_n: int
    adv_mean: float
    adv_m2: float  # sum of squared deviations from adv_mean (Chan et al.'s parallel variance)
    minibatches: list[int]  # per PPO epoch
    cpu_s: float = 0.0
    sys_s: float = 0.0  # of cpu_s, in the kernel (mostly page faults of new memory)
    minflt: int = 0  # minor page faults while collecting


class LocalLearner:
    """A worker's rollouts, their advantages and minibatch plan; gradients on request."""

    def __init__(self, model: DSANNet, rollouts: list[Rollout], a: PPOConfig, minibatch: int,
                 rng: np.random.Generator) -> None:
        """``minibatch``: this worker's steps per minibatch."""
        self.model, self.ros, self.a = model, rollouts, a
        self.gae = [advantages(ro, a.gamma, a.gae_lambda) for ro in rollouts]
        # Drawn in ppo_update's order (epoch, rollout, permutation): one worker = ppo_update.
        # An episode without decisions has nothing to learn from.
        self.plan = [[(i, s) for i, s in minibatches(rollouts, 1, minibatch, rng) if len(s)]
                     for _ in range(a.ppo_epochs)]

    def share(self, cpu_s: float = 0.0, sys_s: float = 0.0, minflt: int = 0) -> Share:
        adv = np.concatenate([g[0] for g in self.gae]) if self.gae else np.zeros(0)
        mean = float(adv.mean()) if len(adv) else 0.0
        return Share(sum(len(r) for r in self.ros), [float(sum(r.reward)) for r in self.ros],
                     len(adv), mean, float(((adv - mean) ** 2).sum()),
                     [len(p) for p in self.plan], cpu_s, sys_s, minflt)

    def grad(self, params: torch.Tensor, epoch: int, k: int, mu: float, sd: float) -> Grad:
        """The flat PPO-loss gradient on minibatch ``k`` of ``epoch`` at ``params``, its steps (0
        if there is no such minibatch), which parameters got a gradient (Adam must leave the
        others alone, as in ppo_update) and the loss parts."""
        plan = self.plan[epoch]
        if k >= len(plan):
            return torch.zeros(0), 0, torch.zeros(0, dtype=torch.bool), {}
        ps = list(self.model.parameters())
        with torch.no_grad():  # in place: views into ``params`` would change the kernels'
            # memory alignment and with it the float rounding of the gradient
            for p, v in zip(ps, torch.split(params, [p.numel() for p in ps]), strict=True):
                p.copy_(v.view_as(p))
        i, steps = plan[k]
        self.model.zero_grad(set_to_none=True)
        loss, parts = ppo_loss(self.model, self.ros[i], steps, *self.gae[i], mu, sd, self.a)
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
    """The PS side: per epoch and minibatch index, average the gradients of the workers that
    have that minibatch (``minibatches[j][e]``: worker j's count in epoch e) weighted by
    steps, clip, step. Returns the mean loss parts, as ppo_update."""
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
