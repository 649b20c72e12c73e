from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsan.snapshot import PodSpec
from sidecar import kubeobjects as ko
from sidecar import tiebreak
from sidecar.cache import GraphCache
from sidecar.candidates import NodeRows
from sidecar.config import SidecarConfig
from sidecar.scoring import ScoringEngine
from sidecar.tiebreak import NameRank, lowest_name_wins, lowest_name_wins_py
from tests.unit.sidecar.test_scoring import CpuFree

TABLE = ["n3", "n0", "n10", "n2", "a"]
RANK = NameRank().of(TABLE)


TWINS = [lowest_name_wins_py, *([tiebreak._lowest_name_wins_c] if tiebreak.compiled else [])]
twins = pytest.mark.parametrize("lowest_name_wins", TWINS, ids=["py", "c"][:len(TWINS)])


@twins
def test_a_single_top_is_returned_as_is(lowest_name_wins: Any) -> None:
    scores = np.array([3, 10, 7], dtype=np.int64)
    out, best = lowest_name_wins(scores, 1, np.array([0, 1, 2]), RANK)
    assert out is scores and best == 1


@twins
def test_tied_tops_keep_it_for_the_lowest_name_only_and_the_input_is_not_written(
        lowest_name_wins: Any) -> None:
    scores = np.array([10, 4, 10, 10], dtype=np.int64)
    out, best = lowest_name_wins(scores, 0, np.array([0, 1, 2, 3]), RANK)
    assert out.tolist() == [9, 4, 10, 9] and best == 2  # "n10" < "n2" < "n3": names, not numbers
    assert scores.tolist() == [10, 4, 10, 10]


@twins
def test_only_tied_rows_are_read(lowest_name_wins: Any) -> None:
    """An unknown name's entry (a sentinel past the table, scored 0) is never looked up."""
    scores = np.array([0, 7, 7], dtype=np.int64)
    out, best = lowest_name_wins(scores, 1, np.array([99, 0, 4]), RANK)
    assert out.tolist() == [0, 6, 7] and best == 2  # "a" < "n3"


@twins
def test_nothing_scorable_or_a_zero_top_is_left_alone(lowest_name_wins: Any) -> None:
    zeros = np.zeros(3, dtype=np.int64)
    rows = np.array([0, 1, 2])
    assert lowest_name_wins(zeros, -1, rows, RANK) == (zeros, -1)
    assert lowest_name_wins(zeros, 0, rows, RANK)[1] == 0


def test_name_rank_is_rebuilt_only_for_a_new_name_list() -> None:
    r = NameRank()
    names = ["c", "a", "b"]
    first = r.of(names)
    assert first.tolist() == [2, 0, 1] and r.of(names) is first
    assert r.of(["b", "a"]).tolist() == [1, 0]


@twins
@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 50)), min_size=1, max_size=30))
def test_one_top_at_the_first_position_of_the_lowest_tied_name(
        lowest_name_wins: Any, cands: list[tuple[int, int]]) -> None:
    table = [f"node-{i}" for i in range(51)][::-1]
    rows = np.array([r for _, r in cands], dtype=np.int64)
    scores = np.array([s for s, _ in cands], dtype=np.int64)
    best = int(np.argmax(scores))
    out, win = lowest_name_wins(scores, best, rows, NameRank().of(table))
    if scores[best] == 0:
        assert win == best and out is scores
        return
    top = int(scores[best])
    tied = [i for i, s in enumerate(scores.tolist()) if s == top]
    names = [table[r] for r in rows.tolist()]
    want = min(tied, key=lambda i: (names[i], i))
    assert win == want and (out == top).sum() == 1
    assert out.tolist() == [s - (s == top) + (i == want) for i, s in enumerate(scores.tolist())]


def test_the_engine_assumes_the_lowest_tied_name_by_name_and_by_row() -> None:
    pod = PodSpec(name="p", cpu_milli=1000, mem_mib=100)
    for by_rows in (False, True):
        cache = GraphCache(SidecarConfig())
        cache.replace_nodes([ko.node(n, cpu="8", gpus=0) for n in ("w2", "w0", "w1")])
        eng = ScoringEngine(cache, CpuFree(), CpuFree("fb"), 60)
        pub = cache.snapshot()
        names = ["w1", "w2", "w0"]
        req = (NodeRows(np.array([pub.index[n] for n in names], dtype=np.int64),
                        pub.table_epoch) if by_rows else names)
        res = eng.score(pod, req, max_score=10, assume="default/p")
        assert res.scores.tolist() == [9, 9, 10] and res.best == 2
        # The assumption charged w0 (the reply's one best node); the next pod now ties w1/w2.
        res = eng.score(pod, req, max_score=10)
        assert res.scores.tolist() == [10, 9, 0] and res.best == 0


@twins
def test_a_tied_row_outside_the_table_is_an_index_error(lowest_name_wins: Any) -> None:
    with pytest.raises(IndexError):
        lowest_name_wins(np.array([5, 5], dtype=np.int64), 0, np.array([0, 7]), RANK)


def test_the_engine_serves_the_compiled_twin_when_built() -> None:
    assert lowest_name_wins is (tiebreak._lowest_name_wins_c if tiebreak.compiled
                                else lowest_name_wins_py)
    if tiebreak.compiled:  # another dtype or a strided view goes to numpy, same answer
        scores = np.array([4, 9, 9, 1, 9, 9], dtype=np.int64)[::2]
        rows = np.array([2, 1, 0], dtype=np.int32)
        assert [a.tolist() if isinstance(a, np.ndarray) else a
                for a in tiebreak._lowest_name_wins_c(scores, 1, rows, RANK)] == \
            [[4, 9, 8], 1]  # rows 1 ("n0") and 0 ("n3") tie: "n0" keeps it
