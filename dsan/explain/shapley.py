"""Shapley values of one model output, interventional, against a background set; numpy only.

For players :math:`1..d` (a player is one column or a group of columns), an instance
:math:`x` and background rows :math:`b_1..b_B`, the value of a coalition S is

.. math:: v(S) = \\frac{1}{B} \\sum_j f(x_S, b_{j,\\bar S})

as shap's ``Permutation`` explainer computes: :func:`permutation_shapley` samples antithetic
orderings, whose marginal contributions telescope, so its values are exactly additive.
A player whose columns equal every background row's in every instance is a null player: its
value is exactly 0 and it is left out of the coalitions (whatever rounding the model's batched
arithmetic does on inputs that are equal).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dsan.core.snapshot import F64, I64

#: A batched model: (rows, columns) -> (rows,) outputs.
Model = Callable[[F64], F64]
#: Rows per model call, to bound memory on wide inputs.
BATCH_ROWS = 1 << 16


@dataclass(frozen=True)
class ShapValues:
    """Shapley values of ``k`` instances: ``values`` (k, players), one base value for all."""

    values: F64
    base_value: float
    outputs: F64  # (k,) f(x) of each instance
    method: str
    evaluations: int
    #: Standard error of each value over the antithetic pairs, (k, players).
    stderr: F64


def _check(x: F64, background: F64, groups: I64 | None) -> tuple[F64, F64, I64, int]:
    x = np.atleast_2d(np.asarray(x, dtype=np.float64))
    bg = np.atleast_2d(np.asarray(background, dtype=np.float64))
    if bg.shape[0] == 0:
        raise ValueError("SHAP needs at least one background row")
    if x.shape[1] != bg.shape[1]:
        raise ValueError(f"instances have {x.shape[1]} columns, background has {bg.shape[1]}")
    g = np.arange(x.shape[1]) if groups is None else np.asarray(groups)
    g = g.astype(np.int64)
    if g.shape != (x.shape[1],):
        raise ValueError(f"groups must name a player per column: shape {g.shape}, "
                         f"want ({x.shape[1]},)")
    d = int(g.max()) + 1
    if g.min() < 0 or np.unique(g).size != d:
        raise ValueError("groups must number the players 0..d-1, each with at least one column")
    return x, bg, g, d


@dataclass(frozen=True)
class _Players:
    """The live (non-null) players: ``g`` numbers their columns 0..n-1 and the null players'
    columns n, a player every coalition holds (x's value is the background's there)."""

    g: I64
    n: int
    live: I64
    d: int

    @staticmethod
    def of(x: F64, bg: F64, g: I64, d: int) -> _Players:
        varies = ~(x[:, None, :] == bg[None, :, :]).all(axis=(0, 1))
        live = np.flatnonzero(np.bincount(g, weights=varies, minlength=d) > 0)
        remap = np.full(d, live.size, dtype=np.int64)
        remap[live] = np.arange(live.size)
        return _Players(remap[g], int(live.size), live, d)

    def masks(self, member: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
        """Column masks of coalitions given as (coalitions, n) membership of live players."""
        held = np.ones((member.shape[0], 1), dtype=bool)
        return np.hstack([member, held])[:, self.g]

    def full(self, phi: F64) -> F64:
        out = np.zeros((phi.shape[0], self.d))
        out[:, self.live] = phi
        return out


def _coalition_values(f: Model, x: F64, bg: F64, masks: npt.NDArray[np.bool_]) -> F64:
    """v(S) for every instance and every coalition row of ``masks`` (S, columns): (k, S)."""
    k, c = x.shape
    s, b = masks.shape[0], bg.shape[0]
    out = np.empty(k * s * b)
    rows_per = max(1, BATCH_ROWS // b)  # coalitions per call
    flat = 0
    for i in range(k):
        for lo in range(0, s, rows_per):
            m = masks[lo : lo + rows_per]
            z = np.where(m[:, None, :], x[i][None, None, :], bg[None, :, :]).reshape(-1, c)
            y = np.asarray(f(z), dtype=np.float64).reshape(-1)
            if y.shape != (z.shape[0],):
                raise ValueError(f"model returned {y.shape} outputs for {z.shape[0]} rows")
            out[flat : flat + y.size] = y
            flat += y.size
    return out.reshape(k, s, b).mean(axis=2)


def permutation_shapley(
    f: Model, x: F64, background: F64, groups: I64 | None = None, permutations: int = 16,
    seed: int = 0, stop: Callable[[], bool] | None = None,
) -> ShapValues:
    """Antithetic permutation estimate from ``permutations`` pairs of orderings (2x as many
    orderings) drawn with ``seed``. All instances share the orderings, so differences between
    them (why A over B) have less noise. ``stop``, asked after each pair, ends the sampling
    early (a CPU budget): the mean over the pairs done, still exactly additive."""
    if permutations < 1:
        raise ValueError(f"permutations must be >= 1, got {permutations}")
    x, bg, g, d_all = _check(x, background, groups)
    players = _Players.of(x, bg, g, d_all)
    d = players.n
    rng = np.random.default_rng(seed)
    phi = np.zeros((x.shape[0], d))
    sq = np.zeros((x.shape[0], d))
    tri = np.tri(d + 1, d, k=-1, dtype=bool)  # row j: the first j positions of an ordering
    base = 0.0
    outputs = np.zeros(x.shape[0])
    for p in range(1, permutations + 1):
        fwd = rng.permutation(d)
        pair = np.zeros_like(phi)
        for order in (fwd, fwd[::-1]):
            member = np.zeros((d + 1, d), dtype=bool)
            member[:, order] = tri
            v = _coalition_values(f, x, bg, players.masks(member))  # (k, d+1)
            pair[:, order] += np.diff(v, axis=1) / 2
            base, outputs = float(v[0, 0]), v[:, -1]
        phi += pair
        sq += pair**2
        if stop is not None and p < permutations and stop():
            break
    mean = phi / p
    var = np.maximum(sq / p - mean**2, 0.0) / max(p - 1, 1)
    evaluations = int(2 * p * (d + 1) * bg.shape[0] * x.shape[0])
    return ShapValues(players.full(mean), base, outputs.copy(),
                      f"permutation ({2 * p} orderings, antithetic)", evaluations,
                      players.full(np.sqrt(var)))

