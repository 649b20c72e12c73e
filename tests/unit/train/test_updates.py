"""The updates both training stages share (dsan/train/updates.py): the segment softmax, the
imitation target, GAE."""

from __future__ import annotations

import numpy as np
import torch

from dsan.train.rollout import Rollout
from dsan.train.updates import advantages, log_best_mass, segment_log_softmax


def test_segment_log_softmax_equals_persegment_log_softmax() -> None:
    logits = torch.tensor([1.0, 2.0, 3.0, -1.0, 0.5])
    seg = torch.tensor([0, 0, 0, 1, 1])
    got = segment_log_softmax(logits, seg, 2)
    want = torch.cat([torch.log_softmax(logits[:3], 0), torch.log_softmax(logits[3:], 0)])
    torch.testing.assert_close(got, want)


def test_gae_by_hand() -> None:
    ro = Rollout(
        np.zeros((1, 1), np.float32),
        np.zeros((1, 1, 1), np.float32),
        torch.zeros(2, 0),
        torch.zeros(0),
    )
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
