"""The scenario stage's two gradient updates on recorded windows: imitation and PPO.

Both score a minibatch of a window's decisions with one :meth:`DSANNet.score` call (the
candidates' features and stored embeddings concatenated, one segment per decision) and
step the optimiser on the trainable parameters :func:`dsan.train.gate.freeze` left:

* :func:`imitation_update`: ``-log sum p`` over the teacher's best nodes, each task type (or
  (type, priority) class) weighing equally (:func:`_type_weights`);
* :func:`ppo_update`: the clipped surrogate, value loss and entropy of
  :func:`dsan.train.updates.ppo_loss` on GAE advantages normalised over the batch.

Either adds the openb anchor's loss when one is given. :mod:`dsan.train.scenario_train`
decides what to record and when to update.
"""

from __future__ import annotations

import numpy as np
import torch

from dsan.api.types import TASK_TYPES
from dsan.features import FEATURE_NAMES
from dsan.model.net import DSANNet
from dsan.train.anchor import OpenbAnchor
from dsan.train.scenario_rollout import ScenarioRollout
from dsan.train.updates import PPOConfig, imitation_epochs, ppo_epochs, segment_log_softmax

__all__ = ["PRIORITY_COL", "TASK_COLS", "imitation_update", "ppo_update"]

TASK_COLS = [FEATURE_NAMES.index(f"pod_task_{t}") for t in TASK_TYPES]
PRIORITY_COL = FEATURE_NAMES.index("pod_priority")


def _tensors(ro: ScenarioRollout, steps: np.ndarray) -> tuple[torch.Tensor, ...]:
    x = torch.from_numpy(np.concatenate([ro.x[i] for i in steps]))
    e = torch.from_numpy(np.concatenate([ro.emb[i] for i in steps]))
    sizes = np.array([len(ro.x[i]) for i in steps])
    seg = torch.from_numpy(np.repeat(np.arange(len(steps)), sizes))
    first = torch.from_numpy(np.concatenate([[0], np.cumsum(sizes)[:-1]]))
    return x, e, seg, first


def _logp(model: DSANNet, ro: ScenarioRollout, steps: np.ndarray) -> tuple[torch.Tensor, ...]:

    x, e, seg, first = _tensors(ro, steps)
    logits, values = model.score(x, e, torch.ones(len(x), dtype=torch.bool), seg, len(steps))
    return segment_log_softmax(logits, seg, len(steps)), seg, first, values


def imitation_update(
    model: DSANNet,
    opt: torch.optim.Optimizer,
    ros: list[ScenarioRollout],
    epochs: int,
    minibatch: int,
    rng: np.random.Generator,
    anchor: OpenbAnchor | None = None,
    by_priority: bool = False,
) -> float:
    """-log sum_{best} p over the teacher's best nodes; returns the mean loss."""
    ros = [r for r in ros if len(r)]  # a quiet window may hold no decision

    def weighed(mass: torch.Tensor, ro: ScenarioRollout, steps: np.ndarray) -> torch.Tensor:
        # Task types weigh equally: ~120 web placements against thousands of batch ones
        # would otherwise leave the web rule unlearnt.
        return -(mass * _type_weights(ro, steps, by_priority)).sum()

    extra = None if anchor is None else (lambda: anchor.loss(model, rng))
    return imitation_epochs(model, opt, ros, _logp, epochs, minibatch, rng, weighed, extra)


def _type_weights(
    ro: ScenarioRollout, steps: np.ndarray, by_priority: bool = False
) -> torch.Tensor:
    """Per-step weights summing to 1, each task type (or (type, priority)) present getting an
    equal share."""
    kind = np.array([int(np.argmax(ro.x[i][0, TASK_COLS])) for i in steps])
    if by_priority:  # the priority feature is one value per pod: the class is (type, priority)
        prio = np.array([float(ro.x[i][0, PRIORITY_COL]) for i in steps])
        pairs = np.stack([kind.astype(np.float64), prio], 1)
        kind = np.unique(pairs, axis=0, return_inverse=True)[1].reshape(-1)
    _, inv, cnt = np.unique(kind, return_inverse=True, return_counts=True)
    w = 1.0 / (cnt[inv] * len(cnt))
    return torch.tensor(w, dtype=torch.float32)


def ppo_update(
    model: DSANNet,
    opt: torch.optim.Optimizer,
    ros: list[ScenarioRollout],
    a: PPOConfig,
    rng: np.random.Generator,
    anchor: OpenbAnchor | None = None,
) -> dict[str, float]:
    ros = [r for r in ros if len(r)]
    if not ros:
        return {}
    extra = None if anchor is None else (lambda: anchor.loss(model, rng))
    return ppo_epochs(model, opt, ros, _logp, a, rng, extra)
