"""A request's candidates (sidecar.candidates): node-table rows checked against the table
they name, the names-to-rows lookup (both twins), and the unknown-names message. Scoring
with them is test_scoring.py's."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar import candidates
from sidecar import kubeobjects as ko
from sidecar.candidates import BadNodeRows, NodeRows, StaleNodeTable, unknown_message
from tests.unit.sidecar.test_scoring import setup


def test_rows_resolve_only_against_their_own_table() -> None:
    cache, _ = setup(["2", "8", "4"])
    pub = cache.snapshot()
    rows = np.array([2, 0, 2], dtype=np.int64)  # repeats are the client's business
    got = NodeRows(rows, pub.table_epoch).resolve(pub)
    assert got.tolist() == [2, 0, 2] and len(NodeRows(rows, pub.table_epoch)) == 3
    assert NodeRows(np.zeros(0, dtype=np.int64), pub.table_epoch).resolve(pub).size == 0
    for dtype in (np.int64, np.int32):  # both bounds in one uint64 reduction, any int dtype
        assert NodeRows(rows.astype(dtype), pub.table_epoch).resolve(pub).tolist() == [2, 0, 2]
        for bad in ([3], [-1], [0, 1, 3], [2, -2**31], [2**31 - 1, 0]):
            with pytest.raises(BadNodeRows, match="3 nodes"):
                NodeRows(np.array(bad, dtype=dtype), pub.table_epoch).resolve(pub)
    with pytest.raises(BadNodeRows, match="3 nodes"):
        NodeRows(np.array([0, -2**63], dtype=np.int64), pub.table_epoch).resolve(pub)
    with pytest.raises(StaleNodeTable, match=f"epoch {pub.table_epoch + 1} "):
        NodeRows(rows, pub.table_epoch + 1).resolve(pub)
    cache.replace_nodes([ko.node("n9", cpu="4", gpus=2, model="A100")])  # a new node set
    with pytest.raises(StaleNodeTable):
        NodeRows(np.array([0], dtype=np.int64), pub.table_epoch).resolve(cache.snapshot())


def test_unknown_message_names_the_first_five_unknown_in_order() -> None:
    names = ["n0", "a", "n1", "b", "c", "d", "e", "f", "g"]
    known = np.array([n.startswith("n") for n in names])
    msg = unknown_message(names, known)
    assert msg.startswith("unknown node names: 'a', 'b', 'c', 'd', 'e' and 2 more")
    assert "'f'" not in msg and "'n0'" not in msg
    assert unknown_message(["x"], np.array([False])).startswith("unknown node names: 'x' (")


TWINS = [candidates.name_rows_py, *([candidates._name_rows_c] if candidates.compiled else [])]
twins = pytest.mark.parametrize("name_rows", TWINS, ids=["py", "c"][:len(TWINS)])


@twins
@settings(max_examples=60, deadline=None)
@given(table=st.lists(st.text(max_size=6), unique=True, max_size=12),
       extra=st.lists(st.text(max_size=6), max_size=6), data=st.data())
def test_name_rows_maps_each_name_to_its_row_and_counts_the_unknown(
        name_rows: Any, table: list[str], extra: list[str], data: st.DataObject) -> None:
    """Both twins, any mix of known and unknown names, repeats included, as a list or a
    tuple: each known name's row, ``missing`` for the others, and how many those are."""
    index = {name: row for row, name in enumerate(table)}
    pool = table + extra
    names = data.draw(st.lists(st.sampled_from(pool), max_size=20)) if pool else []
    container = data.draw(st.sampled_from([list, tuple]))
    missing = data.draw(st.sampled_from([-1, len(table)]))
    rows, unknown = name_rows(index, container(names), missing)
    want = [index.get(n, missing) for n in names]
    assert rows.dtype == np.int64 and rows.tolist() == want
    assert unknown == sum(n not in index for n in names)


@twins
def test_name_rows_takes_any_sequence_and_raises_as_a_dict_lookup_does(name_rows: Any) -> None:
    index = {"a": 0, "b": 1}
    rows, unknown = name_rows(index, np.array(["b", "x", "a"], dtype=object), -1)
    assert rows.tolist() == [1, -1, 0] and unknown == 1  # not a list: the reference answers
    with pytest.raises(TypeError):
        name_rows(index, ["a", ["unhashable"]], -1)
