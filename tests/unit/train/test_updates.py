"""The updates both training stages share (dsan/train/updates.py): the segment softmax, the
imitation target and its class weights, GAE, a batch of either kind of rollout."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dsan.api.types import TASK_TYPES
from dsan.model.net import DSANNet, ModelConfig
from dsan.train.collector import collect
from dsan.train.openb import EnvConfig, make_episode
from dsan.train.rollout import Rollout
from dsan.train.updates import (
    PRIORITY_COL,
    TASK_COLS,
    advantages,
    batch,
    class_weights,
    imitation_update,
    log_best_mass,
    segment_log_softmax,
)


def test_segment_log_softmax_equals_persegment_log_softmax() -> None:
    logits = torch.tensor([1.0, 2.0, 3.0, -1.0, 0.5])
    seg = torch.tensor([0, 0, 0, 1, 1])
    got = segment_log_softmax(logits, seg, 2)
    want = torch.cat([torch.log_softmax(logits[:3], 0), torch.log_softmax(logits[3:], 0)])
    torch.testing.assert_close(got, want)


def test_gae_by_hand() -> None:
    ro = Rollout()
    ro.reward, ro.value = [1.0, 0.0, 2.0], [0.5, 0.5, 0.5]
    adv, ret = advantages(ro, gamma=1.0, lam=0.5)
    d = [1.0 + 0.5 - 0.5, 0.0 + 0.5 - 0.5, 2.0 - 0.5]
    want = [d[0] + 0.5 * (d[1] + 0.5 * d[2]), d[1] + 0.5 * d[2], d[2]]
    np.testing.assert_allclose(adv, want)
    np.testing.assert_allclose(ret, np.array(want) + 0.5)


def test_log_best_mass_is_the_log_of_the_probability_on_the_teacher_rows() -> None:
    """Against the definition: per step, logsumexp of the best rows' log-probabilities; with
    log-probabilities from 1e-2 to 30 in scale, so the max-shift matters."""
    rng = np.random.default_rng(3)
    for scale in (0.01, 1.0, 30.0):
        sizes = rng.integers(1, 12, size=20)
        seg = torch.from_numpy(np.repeat(np.arange(20), sizes))
        raw = rng.standard_normal(int(sizes.sum())) * scale
        logits = torch.from_numpy(raw.astype(np.float32))
        logp = torch.cat([torch.log_softmax(chunk, 0) for chunk in logits.split(sizes.tolist())])
        best, want, off = [], [], 0
        for k in sizes:
            pick = off + rng.choice(k, int(rng.integers(1, k + 1)), replace=False)
            best += pick.tolist()
            want.append(torch.logsumexp(logp[torch.from_numpy(pick)], 0))
            off += k
        got = log_best_mass(logp, seg, torch.tensor(best), 20)
        assert torch.allclose(got, torch.stack(want), atol=1e-5), (scale, got, want)
        assert bool((got <= 1e-6).all())  # a probability mass is at most 1


def test_class_weights_by_priority_gives_drivers_their_own_share() -> None:
    ro = Rollout()
    batch_, web = TASK_TYPES.index("batch"), TASK_TYPES.index("web")
    for t, prio in [(batch_, 0.4), (batch_, 0.1), (batch_, 0.1), (batch_, 0.1), (web, 0.3)]:
        x = np.zeros((2, 128), dtype=np.float32)
        x[:, TASK_COLS[t]] = 1.0
        x[:, PRIORITY_COL] = prio
        ro.x.append(x)
    steps = np.arange(5)
    by_type = class_weights(ro, steps).numpy()
    np.testing.assert_allclose(by_type, [0.125, 0.125, 0.125, 0.125, 0.5])
    # (type, priority) classes: the lone driver weighs as much as the three executors together
    by_prio = class_weights(ro, steps, by_priority=True).numpy()
    np.testing.assert_allclose(by_prio, [1 / 3, 1 / 9, 1 / 9, 1 / 9, 1 / 3], rtol=1e-6)
    assert by_prio.sum() == pytest.approx(1.0)


def test_batch_of_recorded_embeddings_is_the_batch_of_the_node_inputs() -> None:
    """A rollout that keeps its steps' candidate embeddings (frozen encoders) scores as one
    that keeps the node inputs (encoders that train), and the latter's gradient reaches the
    encoders."""
    torch.manual_seed(2)
    model = DSANNet(ModelConfig(hidden=8))
    (ro,) = collect([make_episode(EnvConfig(n_nodes=12), 4)], model, "sample")
    assert ro.nodes is not None
    emb = ro.nodes.embed(model)
    frozen = Rollout(x=ro.x, cand=ro.cand, action=ro.action, teacher=ro.teacher,
                     emb=[emb[torch.from_numpy(c)].numpy() for c in ro.cand])
    steps = np.array([3, 0, 5])
    got, want = batch(model, frozen, steps), batch(model, ro, steps)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)
    want[0].sum().backward()
    assert any(p.grad is not None for p in model.temporal.parameters())


def test_imitation_update_refuses_an_unknown_balance() -> None:
    with pytest.raises(ValueError, match="balance"):
        imitation_update(DSANNet(ModelConfig(hidden=8)), None, [], 1, 8,  # type: ignore[arg-type]
                         np.random.default_rng(0), balance="pods")
