"""Shapley values of DSAN's node logit over the 128 named features.

For a decision (pod, chosen node) the explained quantity is the chosen node's logit minus
the mean logit over the candidates, attributed to features by Shapley values with the
candidates' mean feature row as the baseline (interventional SHAP). The value is estimated
by Monte-Carlo permutation sampling (Štrumbelj & Kononenko 2014): for each random order,
features are switched from baseline to the node's value one at a time and each switch's
change in logit is credited to that feature. All ``permutations x 129`` hybrid rows go
through the head in one batch. The attributions sum exactly to logit(x) - logit(baseline)
(efficiency), which the tests check.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import torch

from dsan.model.net import DSANNet


def shapley(
    model: DSANNet,
    x: npt.NDArray[np.float32],
    baseline: npt.NDArray[np.float32],
    streams: torch.Tensor,
    permutations: int = 64,
    seed: int = 0,
) -> tuple[npt.NDArray[np.float64], float, float]:
    """Attributions (F,), logit at ``x`` and at ``baseline`` for one node's stream embedding
    ``streams`` (2, H)."""
    f = x.shape[0]
    rng = np.random.default_rng(seed)
    orders = np.stack([rng.permutation(f) for _ in range(permutations)])  # (P, F)
    # Row j of permutation p has the first j features of the order switched to x.
    switched = np.zeros((permutations, f + 1, f), dtype=bool)
    rank = np.argsort(orders, axis=1)  # position of each feature in its order
    switched[:] = rank[:, None, :] < np.arange(f + 1)[None, :, None]
    rows = np.where(switched, x[None, None, :], baseline[None, None, :]).reshape(-1, f)
    n = rows.shape[0]
    with torch.inference_mode():
        logit, _ = model.score(
            torch.from_numpy(rows.astype(np.float32)),
            streams.unsqueeze(0).expand(n, -1, -1),
            torch.ones(n, dtype=torch.bool),
            torch.zeros(n, dtype=torch.long),
            1,
        )
    val = logit.double().numpy().reshape(permutations, f + 1)
    delta = np.diff(val, axis=1)  # (P, F): gain of the j-th switched feature
    phi = np.zeros(f)
    np.add.at(phi, orders.ravel(), delta.ravel())
    return phi / permutations, float(val[0, -1]), float(val[0, 0])
