"""The node table published as one consistent view that a request scores on without the lock.

While the node set is unchanged the snapshot is one object refreshed in place, so scorers that
cache per snapshot object (FGD) stay incremental; a reader therefore holds the cache's
``scoring_lock`` until done. :meth:`Publisher.patch` writes an assumption's rows into the
current snapshot so the next request skips the O(n) republish.
"""

from __future__ import annotations

import dataclasses
import math
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from dsan.core.snapshot import ClusterSnapshot
from sidecar.nodetable import NodeTable


@dataclass(frozen=True, slots=True)
class Published:
    """One consistent view: the snapshot plus what requests need to read it fast."""

    snap: ClusterSnapshot
    #: node name -> row of ``snap``; shared between publishes while the node set is unchanged.
    index: Mapping[str, int]
    #: Wall time (epoch s) of each node's newest telemetry window; -inf = never.
    telemetry_time: npt.NDArray[np.float64]
    #: Monotonic time of publication.
    at: float
    version: int
    #: Names ``index`` for gRPC clients that send rows instead of names. Changes with the
    #: node set; random per process, so a table from before a restart never matches.
    table_epoch: int = 0


class Publisher:
    """Makes :class:`Published` views of one :class:`NodeTable`; keeps the latest."""

    def __init__(self, table: NodeTable, age_step_s: float, wall: Callable[[], float]) -> None:
        self._table = table
        self._age_step = age_step_s
        self._wall = wall
        #: The latest view, or None before the first publish.
        self.current: Published | None = None
        self._index_pub: dict[str, int] = {}
        self._index_pub_version = -1
        self._epoch_base = secrets.randbits(30) << 32
        #: (table's telemetry version, its rings unrolled), reused while telemetry is unchanged.
        self._tele_pub: tuple[int, npt.NDArray[np.float32]] | None = None
        self._tele_in_snap = -1  # telemetry version held by the published snapshot

    def is_current(self, version: int) -> bool:
        """The latest view shows cache version ``version`` and the table's node set."""
        pub = self.current
        return (pub is not None and pub.version == version and pub.index is self._index_pub
                and self._index_pub_version == self._table.nodeset_version)

    def publish(self, now: float, version: int) -> Published:
        """A new view as of cache version ``version``, at monotonic time ``now``."""
        t = self._table
        pub = self.current
        n = len(t)
        if self._index_pub_version != t.nodeset_version:
            self._index_pub = dict(t.index)
            self._index_pub_version = t.nodeset_version
        if self._tele_pub is None or self._tele_pub[0] != t.tele_version \
                or self._tele_pub[1].shape[0] != n:
            self._tele_pub = (t.tele_version, t.ordered_telemetry(n))
        tele_time = t.tele_time[:n].copy()
        live = t.live_columns(n)
        snap = pub.snap if pub is not None and pub.index is self._index_pub else None
        if snap is None:
            cols: dict[str, Any] = {k: v.copy() for k, v in live.items()}
            snap = ClusterSnapshot(
                names=list(t.names), gpu_models=list(t.models),
                telemetry=self._tele_pub[1].copy(), telemetry_age_s=self._ages(tele_time),
                **cols)
        else:
            for k, v in live.items():
                np.copyto(getattr(snap, k), v)
            if len(snap.gpu_models) != len(t.models):
                snap.gpu_models[:] = t.models
            assert snap.telemetry is not None and snap.telemetry_age_s is not None
            if self._tele_in_snap != self._tele_pub[0]:
                np.copyto(snap.telemetry, self._tele_pub[1])
            self._ages(tele_time, out=snap.telemetry_age_s)
        snap.version = version
        # Ages alone do not count: stale telemetry is the fallback's business.
        snap.telemetry_version = t.tele_version + t.static_version
        self._tele_in_snap = self._tele_pub[0]
        pub = Published(snap=snap, index=self._index_pub, telemetry_time=tele_time, at=now,
                        version=version, table_epoch=self._epoch_base + self._index_pub_version)
        self.current = pub
        return pub

    def patch(self, rows: Iterable[int], version: int) -> None:
        """Copy the allocation columns of ``rows`` into the current snapshot, as ``version``
        (the caller checked :meth:`is_current` before the writes and holds the scoring lock)."""
        pub = self.current
        assert pub is not None
        snap, t = pub.snap, self._table
        assert snap.pod_count is not None and snap.ls_pods is not None  # publish() fills them
        for dst, src in ((snap.cpu_used, t.cpu_used), (snap.mem_used, t.mem_used),
                         (snap.gpu_free, t.gpu_free), (snap.pod_count, t.pod_count),
                         (snap.ls_pods, t.ls_pods)):
            for r in rows:  # an assumption's one or two rows
                dst[r] = src[r]
        snap.version = version
        self.current = dataclasses.replace(pub, version=version)

    def _ages(self, tele_time: npt.NDArray[np.float64],
              out: npt.NDArray[np.float64] | None = None) -> npt.NDArray[np.float64]:
        """Telemetry ages on a clock rounded down to ``snapshot_max_age_s``, so republishes
        between two steps leave ages (and per-node caches that read them) as they were; at
        most one step young, never negative."""
        step = self._age_step
        grid = math.floor(self._wall() / step) * step
        ages = np.subtract(grid, tele_time, out=out)
        return np.maximum(ages, 0.0, out=ages)
