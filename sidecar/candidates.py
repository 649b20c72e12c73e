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

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sidecar.published import Published


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
