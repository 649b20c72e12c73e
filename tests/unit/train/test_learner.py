"""Data-parallel PPO (workers send gradients): the same updates as one process."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from dsan.model.net import DSANNet, ModelConfig
from dsan.train.collector import collect
from dsan.train.learner import Grad, LocalLearner, global_moments, ppo_rounds
from dsan.train.openb import EnvConfig, make_episode
from dsan.train.ppo import Args
from dsan.train.rollout import Rollout
from dsan.train.updates import ppo_update

SMALL = EnvConfig(n_nodes=12)


class _Now:
    def __init__(self, r: Grad) -> None:
        self.r = r

    def wait(self) -> Grad:
        return self.r


def _setup(head: str = "mlp") -> tuple[DSANNet, list]:
    torch.manual_seed(0)
    model = DSANNet(ModelConfig(hidden=8, head=head))
    eps = [make_episode(SMALL, s) for s in (1, 2, 3)]
    return model, collect(eps, model, "sample", rng=np.random.default_rng(0))


def _submit(learners: list[LocalLearner], mu: float, sd: float):
    return lambda j, params, e, k: _Now(learners[j].grad(params, e, k, mu, sd))


@pytest.mark.parametrize("head", ["mlp", "residual"])
def test_one_worker_takes_ppo_updates_steps(head: str) -> None:
    model, ros = _setup(head)
    a = Args(ppo_epochs=2, minibatch=16)
    ref = copy.deepcopy(model)
    start = copy.deepcopy(model.state_dict())
    ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
    want = ppo_update(ref, ref_opt, ros, a, np.random.default_rng(7))

    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    worker = LocalLearner(copy.deepcopy(model), ros, a, a.minibatch, np.random.default_rng(7))
    share = worker.share()
    mu, sd = global_moments([share])
    got = ppo_rounds(model, opt, _submit([worker], mu, sd), [share.minibatches])
    assert sum(share.minibatches) > 4  # several optimiser steps were compared
    moved = False
    for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=f"{name} differs")
        moved |= not torch.equal(p, start[name])
    assert moved
    for k in want:
        assert got[k] == pytest.approx(want[k], rel=1e-4, abs=1e-6)


def test_two_workers_average_to_the_gradient_of_the_union() -> None:
    model, ros = _setup()
    a = Args(ppo_epochs=1, minibatch=10**6)  # one minibatch per episode
    parts = [ros[:1], ros[1:]]
    learners = [
        LocalLearner(copy.deepcopy(model), p, a, a.minibatch, np.random.default_rng(0))
        for p in parts
    ]
    shares = [w.share() for w in learners]
    mu, sd = global_moments(shares)
    allv = np.concatenate([w.gae[i][0] for w in learners for i in range(len(w.ros))])
    assert (mu, sd) == pytest.approx((allv.mean(), allv.std() + 1e-8))
    # Round 0: episode 1 (worker 0) + episode 2 (worker 1); the mean loss over both episodes'
    # steps, by hand in one process, must give the same gradient.
    params = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    g0 = learners[0].grad(params, 0, 0, mu, sd)
    g1 = learners[1].grad(params, 0, 0, mu, sd)
    n0, n1 = g0[1], g1[1]
    assert (n0, n1) == (len(ros[0]), len(ros[1]))
    want = (g0[0] * n0 + g1[0] * n1) / (n0 + n1)
    ref = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    ppo_rounds(model, opt, _submit(learners, mu, sd), [s.minibatches for s in shares], max_norm=1e9)
    # Worker 1 also has a second minibatch (episode 3) alone: two SGD steps in all. Replay
    # the first by hand and the second from worker 1's own gradient at the new point.
    with torch.no_grad():
        for p, g in zip(
            ref.parameters(), torch.split(want, [p.numel() for p in ref.parameters()]), strict=True
        ):
            p.sub_(g.view_as(p))
    mid = torch.nn.utils.parameters_to_vector(ref.parameters()).detach()
    g2 = learners[1].grad(mid, 0, 1, mu, sd)
    final = mid - g2[0]
    got = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    torch.testing.assert_close(got, final, rtol=1e-5, atol=1e-6)
    assert not torch.equal(got, params)


def test_an_episode_without_decisions_adds_no_minibatch() -> None:
    model, ros = _setup()
    empty = Rollout(nodes=ros[0].nodes, summary={"alloc_pct": 0.0, "failed": 0, "pods": 0})
    a = Args(ppo_epochs=1, minibatch=10**6)
    w = LocalLearner(copy.deepcopy(model), [empty, *ros], a, a.minibatch, np.random.default_rng(0))
    share = w.share()
    assert share.minibatches == [len(ros)] and share.decisions == sum(len(r) for r in ros)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()
    ppo_rounds(model, opt, _submit([w], *global_moments([share])), [share.minibatches])
    assert not torch.equal(torch.nn.utils.parameters_to_vector(model.parameters()), before)
