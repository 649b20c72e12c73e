"""A score request's candidates: node names, or rows of the published node table.

kube-scheduler's extender sends names; the gRPC client may send rows of the node table it
fetched (:class:`NodeRows`), which skips the name decoding and lookup per node but is only
valid against the table it was read from (``Published.table_epoch``). Resolving either
against a published snapshot can fail three ways, each its own exception, so the service
refuses each with its own reason (``sidecar.service``): no candidate known
(:class:`NoKnownNodes`, with the unknown names in the message), a table the cache no longer
publishes (:class:`StaleNodeTable`), rows that cannot be rows of that table
(:class:`BadNodeRows`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any

import numpy as np
import numpy.typing as npt

from dsan.twins import compiled_twin
from sidecar.published import Published

I64 = npt.NDArray[np.int64]


class NoKnownNodes(LookupError):
    """None of the candidate names is in the cache (or, strict mode, one of them is not)."""


class StaleNodeTable(LookupError):
    """The client's node table is not the one the cache publishes now (:class:`NodeRows`)."""


class BadNodeRows(ValueError):
    """Node-table rows that cannot be rows of the table they name."""


@dataclass(frozen=True, slots=True)
class NodeRows:
    """Candidates as rows of the published node table ``epoch`` (``Published.table_epoch``;
    row i is ``snap.names[i]``), the gRPC client's alternative to sending names: no string
    decoding or dictionary lookup per node."""

    rows: npt.NDArray[np.int64]
    epoch: int

    def __len__(self) -> int:
        return len(self.rows)

    def resolve(self, pub: Published) -> npt.NDArray[np.int64]:
        """The rows, checked against ``pub`` (raises StaleNodeTable or BadNodeRows)."""
        if self.epoch != pub.table_epoch:
            raise StaleNodeTable(
                f"node table epoch {self.epoch} is not the sidecar's ({pub.table_epoch}): "
                "send node names, or fetch the table again (NodeTable)")
        n = len(pub.snap.names)
        r = self.rows
        # One reduction for both bounds: as uint64 (modulo 2**64) a negative row is past n.
        u = r.view(np.uint64) if r.dtype == np.int64 else r.astype(np.uint64)
        if len(r) and int(u.max()) >= n:
            raise BadNodeRows(f"node index out of range: the table has {n} nodes")
        return self.rows


def unknown_message(names: Sequence[str], known: npt.NDArray[np.bool_]) -> str:
    """:class:`NoKnownNodes`'s message: the first five unknown names and how many more."""
    missing = [n for n, k in zip(names, known.tolist(), strict=True) if not k]
    head = ", ".join(repr(n) for n in missing[:5])
    more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
    return f"unknown node names: {head}{more} (the sidecar's cache has no such nodes)"


def name_rows_py(index: Mapping[str, int], names: Sequence[str], missing: int = -1
                 ) -> tuple[I64, int]:
    """(each name's row in ``index``, ``missing`` for a name not in it; how many are not).
    ``missing`` must not be a row of ``index``."""
    m = len(names)
    # Every name known, the usual case, without get's default (a miss raises: redo).
    try:
        return np.fromiter(map(index.__getitem__, names), dtype=np.int64, count=m), 0
    except KeyError:
        rows = np.fromiter(map(index.get, names, repeat(missing)), dtype=np.int64, count=m)
        return rows, int(np.count_nonzero(rows == missing))


def _name_rows_c(index: Mapping[str, int], names: Sequence[str], missing: int = -1
                 ) -> tuple[I64, int]:
    rows = np.empty(len(names), dtype=np.int64)
    try:
        unknown: int = _C.rows(names, index, missing, rows)
    except TypeError:  # another container or row type: the reference
        return name_rows_py(index, names, missing)
    return rows, unknown


_C: Any = compiled_twin("dsan._namerows")
compiled = _C is not None
#: The twin the engine calls: the C one (``dsan/_namerows.c``) when built and
#: ``DSAN_PURE_PYTHON`` is unset; ``tests/unit/sidecar/test_candidates.py`` pins them together.
name_rows = _name_rows_c if compiled else name_rows_py
