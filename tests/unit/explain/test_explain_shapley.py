"""The numpy Shapley estimator: exact values where they are known in closed form, exact
additivity, agreement with full enumeration (:func:`exact_shapley`, brute force here), clear
errors."""

from __future__ import annotations

import itertools
import math
from functools import partial
from types import SimpleNamespace

import numpy as np
import pytest

from dsan.explain.shapley import permutation_shapley


def exact_shapley(f, x, bg, groups=None) -> SimpleNamespace:
    """The textbook definition, coalition by coalition: the oracle of the estimator."""
    x, bg = np.atleast_2d(x), np.atleast_2d(bg)
    g = np.arange(x.shape[1]) if groups is None else np.asarray(groups)
    d = int(g.max()) + 1

    def v(s: tuple[int, ...]) -> np.ndarray:  # (k,) mean output with the players in s from x
        held = np.isin(g, s)
        return np.array([f(np.where(held, xi, bg)).mean() for xi in x])

    phi = np.zeros((len(x), d))
    for i in range(d):
        rest = [j for j in range(d) if j != i]
        for size in range(d):
            w = math.factorial(size) * math.factorial(d - size - 1) / math.factorial(d)
            for s in itertools.combinations(rest, size):
                phi[:, i] += w * (v((*s, i)) - v(s))
    full = v(tuple(range(d)))
    return SimpleNamespace(values=phi, base_value=float(v(())[0]), outputs=full,
                           stderr=np.zeros_like(phi))


def additivity_error(sv) -> np.ndarray:
    return np.abs(sv.base_value + sv.values.sum(axis=1) - sv.outputs)


def _data(d: int = 6, b: int = 9, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=d), rng.normal(size=(2, d)), rng.normal(size=(b, d))


@pytest.mark.parametrize(
    "estimator", [exact_shapley, partial(permutation_shapley, permutations=2)])
def test_linear_model_gets_weight_times_distance_to_the_background_mean(estimator) -> None:
    w, x, bg = _data()
    sv = estimator(lambda z: z @ w + 3.0, x, bg)
    np.testing.assert_allclose(sv.values, w * (x - bg.mean(axis=0)), atol=1e-12)
    assert sv.base_value == pytest.approx(float((bg @ w).mean() + 3.0))
    np.testing.assert_allclose(sv.outputs, x @ w + 3.0)


def test_a_column_equal_everywhere_is_a_null_player_worth_exactly_zero() -> None:
    estimator = partial(permutation_shapley, permutations=2)
    w, x, bg = _data()
    x[:, 2] = bg[:, 2] = 0.1  # e.g. the pod's own request: the same on every candidate
    seen: list[int] = []

    def f(z: np.ndarray) -> np.ndarray:
        # rounding that depends on a row's place in the batch, as a BLAS kernel's blocking
        # gives: equal inputs need not give bit-equal outputs
        seen.append(len(z))
        return z @ w + z[:, 2] * 1e-12 * (np.arange(len(z)) % 3)

    sv = estimator(f, x, bg)
    assert np.all(sv.values[:, 2] == 0.0) and np.all(sv.stderr[:, 2] == 0.0)
    assert np.all(sv.values[:, [0, 1, 3, 4, 5]] != 0.0)
    assert additivity_error(sv).max() < 1e-9
    assert sum(seen) == sv.evaluations
    x[:, 2] += 1.0
    assert estimator(f, x, bg).evaluations > sv.evaluations  # five players enumerated, not six


def _nonlinear(z: np.ndarray) -> np.ndarray:
    # a three-way interaction: permutation sampling is only an estimate for it
    return np.tanh(z[:, 0] * z[:, 1] * z[:, 2]) + z[:, 3] ** 2 - z[:, 4] * z[:, 5] + 0.5 * z[:, 1]


def test_permutation_estimate_is_exactly_additive_and_close_to_enumeration() -> None:
    _, x, bg = _data()
    ex = exact_shapley(_nonlinear, x, bg)
    few = permutation_shapley(_nonlinear, x, bg, permutations=1, seed=3)
    many = permutation_shapley(_nonlinear, x, bg, permutations=1000, seed=3)
    for sv in (ex, few, many):
        assert additivity_error(sv).max() < 1e-12
        np.testing.assert_allclose(sv.outputs, _nonlinear(x))
    # within 4 standard errors of the truth, and the standard error shrinks like 1/sqrt(n)
    assert many.stderr is not None and few.stderr is not None
    assert np.all(np.abs(many.values - ex.values) <= 4 * many.stderr + 1e-12)
    assert many.stderr.max() < 0.03
    # the estimate does depend on the orderings: one pair is not the exact answer
    assert np.abs(few.values - ex.values).max() > 1e-6


def test_dummy_player_gets_zero_and_groups_add_up() -> None:
    w, x, bg = _data(d=5)
    w[4] = 0.0
    sv = exact_shapley(lambda z: z @ w + z[:, 0] * z[:, 1], x, bg)
    np.testing.assert_allclose(sv.values[:, 4], 0.0, atol=1e-12)
    groups = np.array([0, 0, 1, 1, 2])
    lin = exact_shapley(lambda z: z @ w, x, bg, groups)
    want = w * (x - bg.mean(axis=0))
    np.testing.assert_allclose(
        lin.values, np.stack([want[:, :2].sum(1), want[:, 2:4].sum(1), want[:, 4]], 1)
    )


def test_permutation_estimate_is_seeded() -> None:
    _, x, bg = _data(d=14)
    f = lambda z: np.sin(z).sum(1) * z[:, 0]  # noqa: E731
    a = permutation_shapley(f, x, bg, permutations=3, seed=7)
    b = permutation_shapley(f, x, bg, permutations=3, seed=7)
    assert a.method.startswith("permutation") and np.array_equal(a.values, b.values)


@pytest.mark.parametrize(
    ("x", "bg", "groups", "match"),
    [
        (np.zeros((1, 3)), np.zeros((0, 3)), None, "background"),
        (np.zeros((1, 3)), np.zeros((2, 4)), None, "columns"),
        (np.zeros((1, 3)), np.zeros((2, 3)), np.array([0, 2, 2]), "0..d-1"),
        (np.zeros((1, 3)), np.zeros((2, 3)), np.array([0, 1]), "player per column"),
    ],
)
def test_bad_input_is_a_clear_error(x, bg, groups, match) -> None:
    with pytest.raises(ValueError, match=match):
        permutation_shapley(lambda z: z.sum(1), x, bg, groups)


def test_bad_config_and_model_shape() -> None:
    with pytest.raises(ValueError, match="permutations"):
        permutation_shapley(lambda z: z.sum(1), np.zeros((1, 2)), np.ones((2, 2)), permutations=0)
    with pytest.raises(ValueError, match="outputs"):
        permutation_shapley(lambda z: z, np.zeros((1, 2)), np.ones((2, 2)))


def test_stop_ends_the_sampling_early_and_the_values_stay_additive() -> None:
    _, x, bg = _data(d=8)

    def f(z: np.ndarray) -> np.ndarray:
        return np.sin(z).prod(axis=1) + z[:, 0] * z[:, 1]

    asked = []
    sv = permutation_shapley(f, x, bg, permutations=20,
                             stop=lambda: asked.append(1) or len(asked) >= 3)
    assert len(asked) == 3 and "(6 orderings" in sv.method  # 3 pairs of the 20
    assert additivity_error(sv).max() < 1e-12
    full = permutation_shapley(f, x, bg, permutations=20)
    assert "(40 orderings" in full.method
