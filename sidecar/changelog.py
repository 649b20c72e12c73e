"""The row-change log: the row of every column write of the node table, in order.

Readers that keep something per row (the per-pod-class score caches, :mod:`sidecar.scorecache`;
DSAN's row tracker, through the scoring engine's hints) remember a position in the log and
recompute only the rows written since, instead of all n. A row may repeat. Positions are
absolute and never reused; the log is trimmed from the front, and a reader whose position fell
off it is told so (None) and recomputes everything.
"""

from __future__ import annotations


class ChangeLog:
    """Rows written, oldest first; :attr:`end` is the position after the newest."""

    __slots__ = ("base", "rows")

    def __init__(self) -> None:
        #: The log itself; writers append to it. Only :meth:`trim` removes (in place, so a
        #: bound ``rows.append`` held by a writer stays valid).
        self.rows: list[int] = []
        #: Absolute position of ``rows[0]``.
        self.base = 0

    @property
    def end(self) -> int:
        return self.base + len(self.rows)

    def trim(self, n_nodes: int) -> None:
        """Drop the older half once the log is much longer than the table: a reader that has
        not looked since recomputes everything, which is what a long log would cost anyway."""
        rows = self.rows
        if len(rows) > 4 * n_nodes + 4096:
            drop = len(rows) // 2
            del rows[:drop]
            self.base += drop

    def between(self, since: int, upto: int) -> list[int] | None:
        """Rows written between positions ``since`` and ``upto``, with repeats; None if the
        log no longer reaches back to ``since``."""
        base = self.base
        if since < base:
            return None
        return self.rows[since - base: upto - base]
