"""Handing the published snapshot to the served scorer, with the rows written since it last
read it.

:class:`~sidecar.cache.GraphCache` refreshes one snapshot object in place and bumps its
``version`` with every write (a republish or an assumption's patch), logging each written
row. A scorer that offers ``trust_snapshot_versions`` (DSAN) is told so once, and may then
skip re-diffing a snapshot at a version it has seen (DSAN's row tracker: ~10 us of each reply
at 1,000 nodes). If it also offers ``note_changes``, :class:`ScorerFeed` tells it, before it
reads the same object at a new version, which rows the change log says were written in
between, so its row diff reads those rows instead of all n.
"""

from __future__ import annotations

from dsan.policies.base import Scorer
from sidecar.cache import GraphCache
from sidecar.published import Published

__all__ = ["ScorerFeed"]


class ScorerFeed:
    """What the served scorer last read (snapshot object, version, change-log position)."""

    def __init__(self, cache: GraphCache, scorer: Scorer) -> None:
        self.cache = cache
        trust = getattr(scorer, "trust_snapshot_versions", None)
        if trust is not None:
            trust()
        self._note_changes = getattr(scorer, "note_changes", None) if trust else None
        #: (snapshot, version, change-log position) last handed to the served scorer.
        self._fed: tuple[object, int, int] | None = None

    def __call__(self, pub: Published) -> None:
        """Before the served scorer reads ``pub.snap``: if it is the snapshot object the
        scorer read last, at another version, tell the scorer (``note_changes``) which rows
        were written in between, from the cache's change log (every column write logs its
        row; None when the log no longer reaches back: the scorer then diffs everything)."""
        if self._note_changes is None:
            return
        last, self._fed = self._fed, (pub.snap, pub.version, pub.changes)
        if last is not None and last[0] is pub.snap and last[1] != pub.version:
            rows = self.cache.changed_rows(last[2], pub.changes)
            if rows is not None:
                self._note_changes(last[1], pub.version, rows)
