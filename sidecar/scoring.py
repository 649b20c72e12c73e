"""The scoring engine: one path for every policy, read top to bottom in :meth:`ScoringEngine.score`.

snapshot -> candidate rows -> feasibility -> ``scorer.score(pod, snap, rows)`` ->
normalise -> tie-break -> reply, then (after the reply, :meth:`ScoringEngine.settle`) the
winner's assumption and ``scorer.prepare``. docs/sidecar.md, "One serving path", says why each
step is as it is.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import itemgetter

import numpy as np
import numpy.typing as npt

from dsan.core.filtering import feasible
from dsan.core.snapshot import PodSpec
from dsan.policies.base import MAX_NODE_SCORE, Scorer
from sidecar.cache import GraphCache
from sidecar.published import Published

log = logging.getLogger("dsan.sidecar.scoring")
I64 = npt.NDArray[np.int64]
BOOL = npt.NDArray[np.bool_]


class NoKnownNodes(LookupError):
    """None of the candidate names is in the cache (or, strict mode, one of them is not)."""


class StaleNodeTable(LookupError):
    """The client's node table is not the one the cache publishes now (:class:`NodeRows`)."""


class BadNodeRows(ValueError):
    """Node-table rows that cannot be rows of the table they name."""


@dataclass(frozen=True, slots=True)
class NodeRows:
    """Candidates as rows of the published node table ``epoch`` (``Published.table_epoch``;
    row i is ``snap.names[i]``), the gRPC client's alternative to sending names."""

    rows: I64
    epoch: int

    def __len__(self) -> int:
        return len(self.rows)


@dataclass(slots=True)
class ScoreResult:
    #: One score per candidate, in request order, 0..max_score.
    scores: I64
    #: Position (in the request) of the best node, -1 if none is scorable.
    best: int
    #: Its name ("" when none).
    winner: str
    unknown: int
    fallback: int
    featurize_s: float
    model_s: float
    #: ``Published.version`` and ``table_epoch`` of the snapshot scored on.
    version: int
    table_epoch: int
    #: Each candidate's row in ``names`` (-1: an unknown name), and the published names
    #: list they index (replaced, never mutated): a decision as explanations read it later.
    rows: I64
    names: list[str]
    #: Candidates the fallback scored (stale telemetry, or all when the policy raised);
    #: None when the served policy scored every one.
    by_fallback: BOOL | None


#: Spans at most ``max_score`` times this are so small (subnormal) that ``max_score / span``
#: would overflow float64: those are scaled by division instead (2x margin for rounding).
TINY_SPAN = 2.0 / np.finfo(np.float64).max


def normalize(
    scores: npt.ArrayLike, max_score: int = MAX_NODE_SCORE
) -> npt.NDArray[np.int64]:
    """Min-max scale onto 0..max_score as integers; all-equal scores map to max_score.

    Non-finite scores (a scorer's bug or a missing feature) rank lowest (0) instead of
    poisoning the scale. All-finite input, the usual case, costs three reductions.
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.size == 0:
        return np.zeros(0, dtype=np.int64)
    lo, hi = s.min(), s.max()
    if -np.inf < lo and hi < np.inf:
        # All finite (a NaN would have made lo or hi NaN): two reductions, then one pass.
        if not hi > lo:
            return np.full(s.shape, max_score, dtype=np.int64)
        span = hi - lo
        if np.inf > span > max_score * TINY_SPAN:
            out = s - lo
            out *= max_score / span
            return np.rint(out, out=out).astype(np.int64)
    finite = np.isfinite(s)
    all_finite = bool(finite.all())
    if not all_finite and not finite.any():
        return np.zeros(s.shape, dtype=np.int64)
    lo, hi = (s.min(), s.max()) if all_finite else (s[finite].min(), s[finite].max())
    if not hi > lo:
        out = np.full(s.shape, float(max_score))
    else:
        with np.errstate(invalid="ignore", over="ignore"):
            span = hi - lo
            if np.inf > span > max_score * TINY_SPAN:
                out = np.rint((s - lo) * (max_score / span))
            elif np.isfinite(span):  # so small (subnormal) that max_score / span overflows
                out = np.rint((s - lo) / span * max_score)
            else:  # the span overflows float64: scale both ends down first
                out = np.rint((s / 2 - lo / 2) * (max_score / (hi / 2 - lo / 2)))
    if not all_finite:
        out = np.where(finite, out, 0.0)
    return out.astype(np.int64)


def name_rows(index: Mapping[str, int], names: Sequence[str],
              table: list[str] | None = None) -> tuple[I64, int]:
    """(each name's row in ``index``, -1 for an unknown name; how many are unknown).

    ``table`` may pass the names in row order (``index``'s inverse): when the request lists a
    run of the table's rows in order (kube-scheduler walks its node list from a rotating
    start, and lists nodes in the order they were added, as the table rows do), one hash and
    one list comparison (string compares, no hashing) find them all; otherwise each name is
    looked up."""
    m = len(names)
    if table is not None and m > 1 and isinstance(names, list):
        r0 = index.get(names[0])
        n = len(table)
        if r0 is not None and m <= n:
            end = r0 + m
            if end <= n:
                if table[r0:end] == names:
                    return np.arange(r0, end, dtype=np.int64), 0
            elif table[r0:] == names[: n - r0] and table[: end - n] == names[n - r0 :]:
                rows = np.arange(r0, end, dtype=np.int64)
                rows[n - r0 :] -= n
                return rows, 0
    if m > 1:
        try:  # every name known, the usual case: the lookups in one C call
            return np.fromiter(itemgetter(*names)(index), dtype=np.int64, count=m), 0
        except KeyError:
            pass
    rows = np.fromiter(map(index.get, names, repeat(-1)), dtype=np.int64, count=m)
    return rows, int(np.count_nonzero(rows < 0))


class ScoringEngine:
    """Scores candidates on the cache's current snapshot with a primary and a fallback scorer."""

    def __init__(
        self,
        cache: GraphCache,
        scorer: Scorer,
        fallback: Scorer,
        telemetry_stale_s: float,
        strict_node_names: bool = False,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.cache = cache
        self.scorer = scorer
        self.fallback = fallback
        self._strict = strict_node_names
        self._stale_s = telemetry_stale_s
        self._wall = wall
        #: (a published telemetry_time array, the oldest time in it of any GPU node).
        self._oldest: tuple[object, float] = (None, np.inf)
        #: (a published names list, each row's rank in their sorted order).
        self._ranks: tuple[object, I64] = (None, np.zeros(0, dtype=np.int64))
        #: The deferred assumption: (pod key, pod, winner), applied by settle().
        self._pending: tuple[str, PodSpec, str] | None = None
        #: Requests where the served policy raised and the fallback scored instead.
        self.policy_errors = 0
        #: settle() calls whose scorer.prepare raised (the assumption stands).
        self.settle_errors = 0
        #: Called once per assumption made, with its node (the service counts them in its
        #: metrics, per node).
        self.on_assume: Callable[[str], None] | None = None

    def score(
        self, pod: PodSpec, names: Sequence[str] | NodeRows, max_score: int = MAX_NODE_SCORE,
        assume: str = "", defer: bool = False,
    ) -> ScoreResult:
        """Score ``names`` for ``pod``; with ``assume`` (the pod's key), charge the pod to the
        best node, now or (``defer``) in :meth:`settle`."""
        # One request at a time: the snapshot is refreshed in place between requests, and
        # under the GIL parallel scoring would gain nothing anyway.
        with self.cache.scoring_lock:
            if self._pending is not None:  # the previous request's settle() has not run yet
                self._settle_locked()
            t0 = time.perf_counter()
            # --- snapshot
            pub = self.cache.snapshot()
            snap = pub.snap
            # --- candidate rows
            rows, n_unknown = self._rows(pub, names)
            m = len(rows)
            # --- feasibility (unknown candidates stand in as row 0, masked out): over every
            # node, then gathered; contiguous columns make that 4-6x cheaper than gathering
            # the candidates' columns first, even for 500 of 5,000 nodes
            safe = np.where(rows < 0, 0, rows) if n_unknown else rows
            ok = np.take(feasible(pod, snap), safe)
            if n_unknown:
                ok &= rows >= 0
            stale = self._stale(pub, safe, ok) if self.scorer.reads_telemetry else None
            fresh = ok if stale is None else ok & ~stale
            t1 = time.perf_counter()
            # --- model
            raw = None
            fell_back = 0
            if fresh.any():
                try:
                    raw = self.scorer.score(pod, snap, rows[fresh])
                except Exception:  # a broken model must not stop scheduling: the fallback
                    self.policy_errors += 1
                    if self.policy_errors == 1 or self.policy_errors % 1000 == 0:
                        log.exception("policy %r failed (%d times); scoring with %r",
                                      self.scorer.name, self.policy_errors, self.fallback.name)
                    raw = self.fallback.score(pod, snap, rows[fresh])
                    fell_back = len(raw)
            raw_stale = self.fallback.score(pod, snap, rows[stale]) if stale is not None else None
            t2 = time.perf_counter()
            # --- normalise, each scorer's group on its own scale
            out = np.zeros(m, dtype=np.int64)
            if raw is not None:
                out[fresh] = normalize(raw, max_score)
            if raw_stale is not None:
                out[stale] = normalize(raw_stale, max_score)
            # --- tie-break: the lowest name among the top scores keeps it
            best = -1
            n_ok = int(np.count_nonzero(ok))
            if n_ok:
                # infeasible candidates score 0, no more than any feasible one
                top = out.max()
                tied = np.flatnonzero(out == top if top > 0 else ok)
                best = int(tied[0])
                if len(tied) > 1:
                    best = int(tied[np.argmin(self._rank(snap.names)[rows[tied]])])
                    if top > 0:
                        out[tied] -= 1
                        out[best] = top
            winner = snap.names[int(rows[best])] if best >= 0 else ""
            if assume and winner:
                if defer:
                    self._pending = (assume, pod, winner)
                else:
                    self._assume(assume, pod, winner)
            return ScoreResult(
                scores=out, best=best, winner=winner, unknown=n_unknown,
                fallback=fell_back + (0 if stale is None else int(np.count_nonzero(stale))),
                featurize_s=t1 - t0, model_s=t2 - t1, version=pub.version,
                table_epoch=pub.table_epoch, rows=rows, names=snap.names,
                by_fallback=ok if fell_back else stale)

    def _rows(self, pub: Published, names: Sequence[str] | NodeRows) -> tuple[I64, int]:
        """The candidates' rows in ``pub`` (-1 unknown) and how many are unknown."""
        if isinstance(names, NodeRows):
            if names.epoch != pub.table_epoch:
                raise StaleNodeTable(
                    f"node table epoch {names.epoch} is not the sidecar's ({pub.table_epoch}):"
                    " send node names, or fetch the table again (NodeTable)")
            n = len(pub.snap.names)
            if len(names.rows) and (names.rows.min() < 0 or names.rows.max() >= n):
                raise BadNodeRows(f"node index out of range: the table has {n} nodes")
            return names.rows, 0
        rows, n_unknown = name_rows(pub.index, names, pub.snap.names)
        if n_unknown and (n_unknown == len(names) or self._strict):
            missing = [nm for nm, r in zip(names, rows.tolist(), strict=True) if r < 0]
            more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
            raise NoKnownNodes(
                f"unknown node names: {', '.join(map(repr, missing[:5]))}{more} (the "
                "sidecar's cache has no such nodes)")
        return rows, n_unknown

    def _stale(self, pub: Published, rows: I64, ok: BOOL) -> BOOL | None:
        """Feasible GPU candidates whose telemetry is older than ``telemetry_stale_s``, or
        None when no GPU node of ``pub`` is (the usual case: one comparison with the oldest
        report, kept per publish, instead of O(m) work)."""
        cutoff = self._wall() - self._stale_s
        tt = pub.telemetry_time
        if self._oldest[0] is not tt:  # held, so a freed array's id cannot come back
            gpu = pub.snap.gpu_count[: len(tt)] > 0
            self._oldest = (tt, float(tt[gpu].min()) if gpu.any() else np.inf)
        if not cutoff > self._oldest[1]:
            return None
        stale = ok & (pub.snap.gpu_count[rows] > 0) & (tt[rows] < cutoff)
        return stale if stale.any() else None

    def _rank(self, names: list[str]) -> I64:
        """Each row's position in the sorted order of ``names`` (a published snapshot's,
        replaced, never mutated, when the table changes)."""
        if self._ranks[0] is not names:
            rank = np.empty(len(names), dtype=np.int64)
            rank[np.argsort(np.array(names, dtype=object), kind="stable")] = np.arange(len(names))
            self._ranks = (names, rank)
        return self._ranks[1]

    def settle(self) -> bool:
        """Apply the deferred assumption, if any, and let the scorer prepare for the next
        pod like it. Safe from any thread; True if there was one to apply."""
        if self._pending is None:  # read without the lock: checked again under it
            return False
        with self.cache.scoring_lock:
            if self._pending is None:
                return False
            self._settle_locked()
            return True

    def _assume(self, key: str, pod: PodSpec, node: str) -> None:
        self.cache.assume(key, pod, node, patch_published=True)
        if self.on_assume is not None:
            self.on_assume(node)

    def _settle_locked(self) -> None:
        assert self._pending is not None
        key, pod, node = self._pending
        self._pending = None
        self._assume(key, pod, node)
        try:
            self.scorer.prepare(pod, self.cache.snapshot().snap)
        except Exception:  # only preparation failed: the next request does the work itself
            self.settle_errors += 1
            if self.settle_errors == 1 or self.settle_errors % 1000 == 0:
                log.exception("preparing after assuming %s failed (%d times)", key,
                              self.settle_errors)

    def filter(self, pod: PodSpec, names: Sequence[str], fit: bool = True
               ) -> tuple[list[str], dict[str, str]]:
        """Split candidates into (passed, {name: reason}) on our view: feasibility, then the
        policy's node quota (``Scorer.controller.allowed``; DSAN's keeps room for GPU work on
        GPU nodes and CPU headroom beside latency-sensitive pods, the heuristics allow every
        feasible node).

        ``fit=False`` (the gRPC Filter): the quota alone, on every node. kube-scheduler keeps a
        Filter plugin's refusal through its preemption dry run, so a node refused for being
        full could never be preempted on; NodeResourcesFit checks fit itself, on the state the
        dry run changes. Unknown nodes pass: the sidecar must not veto nodes it has not heard
        of yet.
        """
        with self.cache.scoring_lock:
            if self._pending is not None:
                self._settle_locked()
            pub = self.cache.snapshot()
            rows, _ = name_rows(pub.index, names, pub.snap.names)
            known = np.flatnonzero(rows >= 0)
            fits = np.ones(len(names), dtype=bool)
            if fit:
                fits[known] = np.take(feasible(pod, pub.snap), rows[known])
            checked = known[fits[known]]
            allowed = self.scorer.controller.allowed(pod, pub.snap, rows[checked])
            ok = fits.copy()
            ok[checked] = np.isin(rows[checked], allowed)
        arr = np.array(names, dtype=object)
        passed: list[str] = arr[ok].tolist()
        failed = dict.fromkeys(arr[~fits].tolist(), _FAILED_REASON)
        failed.update(dict.fromkeys(arr[fits & ~ok].tolist(), _QUOTA_REASON))
        return passed, failed


_FAILED_REASON = "dsan: insufficient CPU, memory or GPU share on this node"
_QUOTA_REASON = ("dsan: the node's quota refuses this pod (the served policy keeps room there "
                 "for GPU work, or CPU headroom beside latency-sensitive pods)")
