"""DSAN chooses at a resolution of LOGIT_STEP: float32 noise between rows the model scores
equal leaves the choice to the caller's tie-break (FGD's node order on openb), in the
simulator's argmax and in the sidecar's normalised scores alike."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from dsan.policies.base import MAX_NODE_SCORE
from dsan.policies.dsan import LOGIT_STEP, DSANScorer, quantize_logits
from dsan.sim.scheduler import select_node
from sidecar.scoring import normalize

#: The two logits of a recorded near-tie (cpu250 seed 7, decision 699): nodes
#: with identical weighted features, one float32 ulp apart.
LOW = float(np.float32(50.114372253))
HIGH = float(np.nextafter(np.float32(LOW), np.float32(np.inf)))


class _FixedLogits:
    """A ServingModel stand-in that returns given logits."""

    def __init__(self, logits: list[float]) -> None:
        self.manifest: dict[str, Any] = {}
        self.workload = None
        self.values = np.asarray(logits, dtype=np.float64)

    def logits(self, pod: Any, snap: Any, nodes: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        return self.values[: len(nodes)].copy()


def _scorer(logits: list[float]) -> DSANScorer:
    return DSANScorer(_FixedLogits(logits))  # type: ignore[arg-type]


def _pick(logits: list[float], tie_rank: list[int]) -> int | None:
    nodes = np.arange(len(logits), dtype=np.int64)
    rng = np.random.default_rng(0)
    rank = np.asarray(tie_rank, dtype=np.int64)
    return select_node(None, None, _scorer(logits), rng, nodes, rank)  # type: ignore[arg-type]


def test_one_ulp_apart_on_tied_nodes_goes_to_the_first_node() -> None:
    assert np.float32(HIGH) > np.float32(LOW)  # really one float32 ulp apart
    # node 1 is one ulp higher; node 0 comes first in the tie order and wins
    assert _pick([LOW, HIGH], [0, 1]) == 0
    assert _pick([HIGH, LOW], [0, 1]) == 0
    # the tie order decides, not the position
    assert _pick([LOW, HIGH], [1, 0]) == 1
    assert _pick([LOW, HIGH, 40.0], [2, 1, 0]) == 1


def test_smallest_shipped_tie_break_still_decides() -> None:
    # gpu_max_free -0.5 per 1/1000 GPU: 0.0005, the shipped weights' smallest step
    assert _pick([LOW, LOW + 0.0005], [0, 1]) == 1
    assert _pick([LOW + 0.0005, LOW], [1, 0]) == 0
    # the resolution: past half a step apart the higher logit wins, within it the tie order
    assert _pick([LOW, LOW + 0.6 * LOGIT_STEP], [0, 1]) == 1
    assert _pick([LOW, LOW + 0.4 * LOGIT_STEP], [0, 1]) == 0


@pytest.mark.parametrize("exact", [50.00625, 50.01875, 50.08875, 51.0])
def test_ties_on_a_fixed_grid_boundary_stay_ties(exact: float) -> None:
    """0.05 x k/8 with odd k sits exactly on a 1e-4 rounding boundary: rounding to 4 decimals
    can split float32 neighbours there; a grid anchored at the best cannot."""
    a = float(np.float32(exact))
    near = [float(np.nextafter(np.float32(a), np.float32(d))) for d in (np.inf, -np.inf)]
    q = quantize_logits([a, *near])
    assert q[0] == q[1] == q[2]


def test_only_the_best_and_its_near_ties_move() -> None:
    raw = np.array([1.0, 2.99996, -np.inf, 3.0, 2.99994, np.nan, 2.0])
    q = quantize_logits(raw)
    assert q[1] == q[3] == 3.0  # within half a step of the best: tied with it
    assert q[4] == raw[4] and q[0] == 1.0 and q[6] == 2.0  # the rest stay the model's
    assert q[2] == -np.inf and np.isnan(q[5])
    finite = np.isfinite(raw)
    order = np.argsort(raw[finite], kind="stable")
    assert np.all(np.diff(q[finite][order]) >= 0)  # order kept
    assert quantize_logits([]).shape == (0,)
    assert np.isnan(quantize_logits([np.nan, np.nan])).all()
    assert quantize_logits([np.inf, 1.0, 0.99996]).tolist() == [np.inf, 1.0, 1.0]


def test_sidecar_scores_of_nodes_tied_up_to_noise() -> None:
    """The sidecar min-max normalises the scores of the candidates it is asked about: on raw
    logits two noise-apart nodes would get 0 and 100, on DSAN's they both get the maximum
    and the winner (first maximum) is the first of them."""
    assert normalize([LOW, HIGH]).tolist() == [0, MAX_NODE_SCORE]
    nodes = np.arange(3, dtype=np.int64)
    got = normalize(_scorer([LOW, HIGH, LOW - 1]).score(None, None, nodes))  # type: ignore[arg-type]
    assert got.tolist() == [MAX_NODE_SCORE, MAX_NODE_SCORE, 0]
    assert int(np.argmax(got)) == 0
