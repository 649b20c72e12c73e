"""The gradient updates of both stages on rollouts: :func:`batch` (steps scored with
gradients), imitation (:func:`imitation_update`), GAE, the clipped PPO loss (:func:`ppo_loss`,
which the distributed learner takes per minibatch) and its epochs (:func:`ppo_update`).
The scenario stage passes a class ``balance`` and its openb anchor's ``extra_loss``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

import numpy as np
import torch

from dsan.api.types import TASK_TYPES
from dsan.features import FEATURE_NAMES
from dsan.model.net import DSANNet
from dsan.train.rollout import Rollout

TASK_COLS = [FEATURE_NAMES.index(f"pod_task_{t}") for t in TASK_TYPES]
PRIORITY_COL = FEATURE_NAMES.index("pod_priority")
#: Imitation step weights: every step alike, or each task type or (type, priority) equally.
BALANCE = (None, "task", "task-priority")


def segment_log_softmax(logits: torch.Tensor, seg: torch.Tensor, n: int) -> torch.Tensor:
    """Log-softmax of ``logits`` (rows,) within each step ``seg`` (rows,) in 0..n-1."""
    mx = torch.full((n,), -1e30).scatter_reduce(0, seg, logits.detach(), "amax", include_self=True)
    z = logits - mx[seg]
    tot = torch.zeros(n).index_add(0, seg, z.exp())
    return z - tot.log()[seg]


def log_best_mass(
    logp: torch.Tensor, seg: torch.Tensor, best: torch.Tensor, n: int
) -> torch.Tensor:
    """Per step, ``log sum_{b in best} p_b``: the log-probability mass on the teacher's best
    rows (indices ``best``), computed stably around each step's max. Shape (n,)."""
    sb = seg[best]
    m = torch.full((n,), -1e30).scatter_reduce(0, sb, logp[best], "amax", include_self=True)
    s = torch.zeros(n).index_add(0, sb, (logp[best] - m[sb]).exp())
    return m + s.log()


def batch(
    model: DSANNet, ro: Rollout, steps: np.ndarray
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Steps ``steps`` of ``ro`` in one head call, with gradients: each candidate row's
    log-probability and step, each step's first row, and the steps' values. Embeddings are
    recomputed from ``ro.nodes`` (encoders training) or read from ``ro.emb`` (frozen)."""
    n = ro.nodes
    if n is not None:
        emb = model.embed_nodes(
            torch.from_numpy(n.x), torch.from_numpy(n.telemetry), n.edge_index, n.edge_weight
        )
        e = emb.index_select(0, torch.from_numpy(np.concatenate([ro.cand[i] for i in steps])))
    else:
        e = torch.from_numpy(np.concatenate([ro.emb[i] for i in steps]))
    x = torch.from_numpy(np.concatenate([ro.x[i] for i in steps]))
    sizes = np.array([len(ro.x[i]) for i in steps])
    seg = torch.from_numpy(np.repeat(np.arange(len(steps)), sizes))
    logits, values = model.score(x, e, torch.ones(len(x), dtype=torch.bool), seg, len(steps))
    logp = segment_log_softmax(logits, seg, len(steps))
    first = torch.from_numpy(np.concatenate([[0], np.cumsum(sizes)[:-1]]))
    return logp, seg, first, values


def class_weights(ro: Rollout, steps: np.ndarray, by_priority: bool = False) -> torch.Tensor:
    """Per-step weights summing to 1, each task type (or (type, priority)) an equal share."""
    kind = np.array([int(np.argmax(ro.x[i][0, TASK_COLS])) for i in steps])
    if by_priority:
        prio = np.array([float(ro.x[i][0, PRIORITY_COL]) for i in steps])
        pairs = np.stack([kind.astype(np.float64), prio], 1)
        kind = np.unique(pairs, axis=0, return_inverse=True)[1].reshape(-1)
    _, inv, cnt = np.unique(kind, return_inverse=True, return_counts=True)
    w = 1.0 / (cnt[inv] * len(cnt))
    return torch.tensor(w, dtype=torch.float32)


def minibatches(
    ros: Sequence[Rollout], epochs: int, minibatch: int, rng: np.random.Generator
) -> Iterator[tuple[int, np.ndarray]]:
    """(rollout index, steps): every epoch, each rollout's steps shuffled into minibatches."""
    for _ in range(epochs):
        for i, ro in enumerate(ros):
            for steps in np.array_split(rng.permutation(len(ro)), max(1, len(ro) // minibatch)):
                yield i, steps


def imitation_update(
    model: DSANNet,
    opt: torch.optim.Optimizer,
    rollouts: Sequence[Rollout],
    epochs: int,
    minibatch: int,
    rng: np.random.Generator,
    balance: str | None = None,
    extra_loss: Callable[[], torch.Tensor] | None = None,
) -> float:
    """``epochs`` passes minimising ``-log_best_mass`` (its mean over steps, or with
    ``balance`` its class-weighted sum: a few web placements would otherwise drown among
    thousands of batch ones), plus ``extra_loss()``. Returns the mean loss."""
    if balance not in BALANCE:
        raise ValueError(f"imitation balance {balance!r} is not one of {BALANCE}")
    losses = []
    ros = [r for r in rollouts if len(r)]  # a quiet episode may hold no decision
    for r, steps in minibatches(ros, epochs, minibatch, rng):
        ro = ros[r]
        logp, seg, _, _ = batch(model, ro, steps)
        best = torch.from_numpy(np.concatenate([ro.teacher[i] for i in steps]))
        mass = log_best_mass(logp, seg, best, len(steps))
        if balance is None:
            loss = -mass.mean()
        else:
            loss = -(mass * class_weights(ro, steps, balance == "task-priority")).sum()
        if extra_loss is not None:
            loss = loss + extra_loss()
        _step(model, opt, loss, max_norm=1.0)
        losses.append(float(loss.detach()))
    return float(np.mean(losses)) if losses else 0.0


def advantages(ro: Rollout, gamma: float, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """GAE advantages and returns of one rollout."""
    r, v = np.asarray(ro.reward), np.asarray(ro.value)
    adv = np.zeros(len(r))
    last = 0.0
    for t in range(len(r) - 1, -1, -1):
        nv = v[t + 1] if t + 1 < len(r) else 0.0
        delta = r[t] + gamma * nv - v[t]
        last = delta + gamma * lam * last
        adv[t] = last
    return adv, adv + v


class PPOConfig(Protocol):
    """The PPO hyperparameters the updates read (both trainers' ``Args`` have them)."""

    gamma: float
    gae_lambda: float
    ppo_epochs: int
    minibatch: int
    clip: float
    ent_coef: float
    vf_coef: float


def ppo_loss(
    model: DSANNet,
    ro: Rollout,
    steps: np.ndarray,
    adv: np.ndarray,
    ret: np.ndarray,
    mu: float,
    sd: float,
    a: PPOConfig,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped PPO loss of minibatch ``steps`` of ``ro``,
    ``-min(r A, clip(r) A) + c_v (V - R)^2 - c_e H``, and its parts."""
    logp, seg, first, values = batch(model, ro, steps)
    new = logp[torch.from_numpy(np.asarray(ro.action)[steps]) + first]
    old = torch.tensor(np.asarray(ro.logp)[steps], dtype=torch.float32)
    ad = torch.tensor((adv[steps] - mu) / sd, dtype=torch.float32)
    ratio = (new - old).exp()
    pg = -torch.min(ratio * ad, ratio.clamp(1 - a.clip, 1 + a.clip) * ad).mean()
    vf = (values - torch.tensor(ret[steps], dtype=torch.float32)).pow(2).mean()
    ent = -torch.zeros(len(steps)).index_add(0, seg, logp.exp() * logp).mean()
    loss = pg + a.vf_coef * vf - a.ent_coef * ent
    return loss, {"pg": pg, "vf": vf, "ent": ent, "kl": (old - new).mean()}


def ppo_update(
    model: DSANNet,
    opt: torch.optim.Optimizer,
    rollouts: Sequence[Rollout],
    a: PPOConfig,
    rng: np.random.Generator,
    extra_loss: Callable[[], torch.Tensor] | None = None,
) -> dict[str, float]:
    """``a.ppo_epochs`` passes of :func:`ppo_loss` (plus ``extra_loss()``) over minibatches of
    every rollout, advantages normalised over all of them. Returns each part's mean ({} when
    no rollout holds a step)."""
    ros = [r for r in rollouts if len(r)]
    if not ros:
        return {}
    gae = [advantages(ro, a.gamma, a.gae_lambda) for ro in ros]
    allv = np.concatenate([g[0] for g in gae])
    mu, sd = allv.mean(), allv.std() + 1e-8
    stats: dict[str, list[float]] = {"pg": [], "vf": [], "ent": [], "kl": []}
    for i, steps in minibatches(ros, a.ppo_epochs, a.minibatch, rng):
        loss, parts = ppo_loss(model, ros[i], steps, *gae[i], mu, sd, a)
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
