"""Shapley attributions: efficiency (they sum to the logit gap) and dummy features get 0."""

from __future__ import annotations

import numpy as np
import torch

from dsan.explain.shapley import shapley
from dsan.features import N_FEATURES
from dsan.model.net import DSANNet, ModelConfig


def test_attributions_sum_to_the_logit_gap_and_ignore_unchanged_features() -> None:
    torch.manual_seed(0)
    model = DSANNet(ModelConfig(hidden=8)).eval()
    rng = np.random.default_rng(0)
    x = rng.random(N_FEATURES).astype(np.float32)
    base = x.copy()
    base[:10] = 0.0  # only the first ten features differ from the baseline
    streams = torch.randn(2, 8)
    phi, at_x, at_base = shapley(model, x, base, streams, permutations=16)
    assert np.isclose(phi.sum(), at_x - at_base, atol=1e-4)
    assert np.allclose(phi[10:], 0.0)
    assert np.abs(phi[:10]).sum() > 0
