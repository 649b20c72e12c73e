"""A request's candidates (sidecar.candidates): node-table rows checked against the table
they name, and the unknown-names message. Scoring with them is test_scoring.py's."""

from __future__ import annotations

import numpy as np
import pytest

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
