"""The updates both training stages share: the imitation target and loss loop, GAE, the
clipped PPO loss and its epoch loop.

The openb stage (:mod:`dsan.train.ppo`) and the scenario stage
(:mod:`dsan.train.scenario_updates`) differ only in how a rollout's steps become tensors (a
``batch`` function returning per-row log-probabilities, segment ids, each step's first row and
values), in the scenario stage's task-type weighting and in its openb anchor; the distributed
learner (:mod:`dsan.train.learner`) takes the PPO loss per minibatch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np
import torch

from dsan.model.net import DSANNet
from dsan.train.rollout import Rollout


def segment_log_softmax(logits: torch.Tensor, seg: torch.Tensor, n: int) -> torch.Tensor:
    """Log-softmax within each segment: ``logits`` (rows,), ``seg`` (rows,) the step of each
    row in 0..n-1. Shape (rows,)."""
    mx = torch.full((n,), -1e30).scatter_reduce(0, seg, logits.detach(), "amax", include_self=True)
    z = logits - mx[seg]
    tot = torch.zeros(n).index_add(0, seg, z.exp())
    return z - tot.log()[seg]


def log_best_mass(
    logp: torch.Tensor, seg: torch.Tensor, best: torch.Tensor, n: int
) -> torch.Tensor:
    """The imitation target, per step: log sum_{b in best(t)} p_b, the log-probability mass
    the policy puts on the teacher's best nodes. ``logp`` (rows,) holds every candidate row's
    log-probability, ``seg`` (rows,) its step in 0..n-1, ``best`` the indices of the teacher's
    best rows. Computed stably as m_t + log sum_b exp(logp_b - m_t), m_t = max_b logp_b.
    Shape (n,)."""
    sb = seg[best]
    m = torch.full((n,), -1e30).scatter_reduce(0, sb, logp[best], "amax", include_self=True)
    s = torch.zeros(n).index_add(0, sb, (logp[best] - m[sb]).exp())
    return m + s.log()


def imitation_epochs(
    model: DSANNet,
    opt: torch.optim.Optimizer,
    rollouts: Sequence[Any],
    batch: Callable[[DSANNet, Any, np.ndarray], tuple[torch.Tensor, ...]],
    epochs: int,
    minibatch: int,
    rng: np.random.Generator,
    reduce: Callable[[torch.Tensor, Any, np.ndarray], torch.Tensor] | None = None,
    extra_loss: Callable[[], torch.Tensor] | None = None,
) -> float:
    """``epochs`` passes over minibatches of every rollout raising the probability mass on
    the teacher's best nodes (:func:`log_best_mass`; ``batch`` as in :func:`ppo_epochs`).
    The loss is ``-mean`` of the masses, or ``reduce(mass, rollout, steps)`` (the scenario
    stage weighs task types), plus ``extra_loss()``. Returns the mean loss."""
    losses = []
    for _ in range(epochs):
        for ro in rollouts:
            for steps in np.array_split(rng.permutation(len(ro)), max(1, len(ro) // minibatch)):
                logp, seg, _, _ = batch(model, ro, steps)
                best = torch.from_numpy(np.concatenate([ro.teacher[i] for i in steps]))
                mass = log_best_mass(logp, seg, best, len(steps))
                loss = -mass.mean() if reduce is None else reduce(mass, ro, steps)
                if extra_loss is not None:
                    loss = loss + extra_loss()
                _step(model, opt, loss, max_norm=1.0)
                losses.append(float(loss.detach()))
    return float(np.mean(losses)) if losses else 0.0


def advantages(ro: Rollout, gamma: float, lam: float) -> tuple[np.ndarray, np.ndarray]:
    r, v = np.asarray(ro.reward), np.asarray(ro.value)
    adv = np.zeros(len(r))
    last = 0.0
    for t in range(len(r) - 1, -1, -1):  # over time steps, once per update: not a hot path
        nv = v[t + 1] if t + 1 < len(r) else 0.0
        delta = r[t] + gamma * nv - v[t]
        last = delta + gamma * lam * last
        adv[t] = last
    return adv, adv + v


def ppo_loss(
    logp: torch.Tensor,
    seg: torch.Tensor,
    first: torch.Tensor,
    values: torch.Tensor,
    ro: Any,
    steps: np.ndarray,
    adv: np.ndarray,
    ret: np.ndarray,
    mu: float,
    sd: float,
    a: Any,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    r"""Clipped PPO loss of one minibatch ``steps`` of a rollout (openb or scenario: anything
    with ``action`` and ``logp`` lists) and its parts; ``a`` carries clip, vf_coef, ent_coef.

    .. math:: L = -\min(r A, \mathrm{clip}(r, 1-\epsilon, 1+\epsilon) A)
        + c_v (V - R)^2 - c_e H
    """
    new = logp[torch.from_numpy(np.asarray(ro.action)[steps]) + first]
    old = torch.tensor(np.asarray(ro.logp)[steps], dtype=torch.float32)
    ad = torch.tensor((adv[steps] - mu) / sd, dtype=torch.float32)
    ratio = (new - old).exp()
    pg = -torch.min(ratio * ad, ratio.clamp(1 - a.clip, 1 + a.clip) * ad).mean()
    vf = (values - torch.tensor(ret[steps], dtype=torch.float32)).pow(2).mean()
    ent = -torch.zeros(len(steps)).index_add(0, seg, logp.exp() * logp).mean()
    loss = pg + a.vf_coef * vf - a.ent_coef * ent
    return loss, {"pg": pg, "vf": vf, "ent": ent, "kl": (old - new).mean()}


class PPOConfig(Protocol):
    """The PPO hyperparameters :func:`ppo_epochs` reads (both trainers' ``Args`` have them)."""

    gamma: float
    gae_lambda: float
    ppo_epochs: int
    minibatch: int
    clip: float
    ent_coef: float
    vf_coef: float


def ppo_epochs(
    model: DSANNet,
    opt: torch.optim.Optimizer,
    rollouts: Sequence[Any],
    batch: Callable[[DSANNet, Any, np.ndarray], tuple[torch.Tensor, ...]],
    a: PPOConfig,
    rng: np.random.Generator,
    extra_loss: Callable[[], torch.Tensor] | None = None,
) -> dict[str, float]:
    """``a.ppo_epochs`` passes of :func:`ppo_loss` over minibatches of every rollout (openb or
    scenario: ``batch`` gives a rollout's (logp, seg, first, values) for some steps), GAE
    advantages normalised over all of them; ``extra_loss`` (the scenario stage's openb
    anchor) is added to each minibatch's loss. Returns the mean of each loss part."""
    gae = [advantages(ro, a.gamma, a.gae_lambda) for ro in rollouts]
    allv = np.concatenate([g[0] for g in gae]) if gae else np.zeros(1)
    mu, sd = allv.mean(), allv.std() + 1e-8
    stats: dict[str, list[float]] = {"pg": [], "vf": [], "ent": [], "kl": []}
    for _ in range(a.ppo_epochs):
        for ro, (adv, ret) in zip(rollouts, gae, strict=True):
            for steps in np.array_split(rng.permutation(len(ro)), max(1, len(ro) // a.minibatch)):
                logp, seg, first, values = batch(model, ro, steps)
                loss, parts = ppo_loss(logp, seg, first, values, ro, steps, adv, ret, mu, sd, a)
                if extra_loss is not None:
                    loss = loss + extra_loss()
                _step(model, opt, loss, max_norm=0.5)
                for k, val in parts.items():
                    stats[k].append(float(val.detach()))
    return {k: float(np.mean(v)) if v else 0.0 for k, v in stats.items()}


def _step(model: DSANNet, opt: torch.optim.Optimizer, loss: torch.Tensor, max_norm: float) -> None:
    """One optimiser step on ``loss``, the gradient's global norm clipped to ``max_norm``."""
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
