"""The scoring hot path: snapshot -> featurize -> model -> normalise, in one function.

Both APIs call :meth:`ScoringEngine.score`. Phases, each timed into the latency histogram:

* **featurize**: resolve candidate names to snapshot rows, drop the ones our view calls
  infeasible (assumed pods may have filled them since kube-scheduler's Filter ran), split off
  GPU nodes with stale telemetry when the policy reads telemetry;
* **model**: the served :class:`~dsan.policies.base.Scorer` on the fresh candidates, the
  fallback scorer on the stale ones (its own featurization happens inside ``score``);
* **normalise**: each group min-max scaled onto 0..max_score separately (two scorers' raw
  scales are not comparable), unknown or infeasible nodes get 0; then ties at the top go to
  the lowest node name (:mod:`sidecar.tiebreak`), so the reply names one best node. A scorer with
  ``score_scaled(pod, snap, nodes, max_score)`` (DSAN: :mod:`dsan.policies.logitscale`)
  returns the normalised scores and the first maximum of its own ``score`` in one pass when
  no candidate goes to the fallback (the usual case); that time counts as model.

Nothing here loops over nodes in Python or allocates per node; the name lookup is one
``np.fromiter`` over a C-level ``map``.

Fast path (:mod:`sidecar.classpaths`): a scorer with a ``cache_key`` (FGD, k8s-default) is
served from a :class:`~sidecar.scorecache.ScoreCache` (raw scores and feasibility of every
node per pod class, recomputed only on changed rows), and the winner is assumed under the same
lock with the published snapshot patched in place, so the next request needs no O(n)
republish. A scorer with ``score_held`` (DSAN) first answers from the logits its pod class
holds (:mod:`dsan.model.heldreply`: one C pass when they apply, else the general path).

Deferred bookkeeping (``defer=True``, what both APIs use): the winner's assumption, the served
class's refresh of that row (scores, or for a scorer scored in full its feasibility,
:class:`~sidecar.scorecache.FeasibleCache`) and a scorer's optional ``after_assume(pod, snap,
row, feasible)`` hook (``feasible``: that feasibility of every node, or None) are kept
pending and done by :meth:`ScoringEngine.settle`, which the servers call *after* the reply
has left (HTTP: after the socket write; gRPC: the RPC-done callback).
kube-scheduler waits for the scores, not for our bookkeeping. Every request and filter settles
a pending assumption first under the same lock, so each request sees exactly the state it
would have seen with the assumption done inline (at most one is ever pending).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from dsan.filtering import feasible
from dsan.policies.base import MAX_NODE_SCORE, Scorer, normalize
from dsan.snapshot import PodSpec
from sidecar.cache import GraphCache
from sidecar.candidates import NodeRows, NoKnownNodes, name_rows, unknown_message
from sidecar.classpaths import score_cached, score_class, score_held
from sidecar.published import Published
from sidecar.scorecache import FeasibleCache, ScoreCache
from sidecar.scoreresult import ScoreResult
from sidecar.scorerfeed import ScorerFeed
from sidecar.staleness import Staleness
from sidecar.tiebreak import NameRank, lowest_name_wins

__all__ = ["ScoreResult", "ScoringEngine"]

log = logging.getLogger("dsan.sidecar.scoring")
#: A deferred assumption: (pod key, pod, winner, the request's candidates, its max score).
_Pending = tuple[str, PodSpec, str, Sequence[str] | NodeRows, int]


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
        warm_reply_max_nodes: int = 0,
    ) -> None:
        self.cache = cache
        self.scorer = scorer
        self.fallback = fallback
        self._strict = strict_node_names
        #: Which candidates' telemetry is too old (scored by the fallback instead).
        self._staleness = Staleness(telemetry_stale_s, wall)
        # Heuristics read no telemetry, so staleness cannot hurt them; DSAN does.
        self.uses_telemetry = bool(getattr(scorer, "uses_telemetry", scorer.name == "dsan"))
        #: Requests where the served policy raised and the fallback scored instead.
        self.policy_errors = 0
        # Staleness splits candidates per request, so telemetry readers are never cached.
        self.classes = ScoreCache(cache, scorer)
        #: Requests the class cache could not serve (the scorer raised while updating it).
        self.cache_misses = 0
        self._cached = self.classes.enabled and not self.uses_telemetry
        #: Feasibility per pod class for the requests scored in full (DSAN).
        self.feasibility = FeasibleCache(cache)
        #: The deferred assumption (key, pod, node) and the request's (candidates, max
        #: score), applied by settle() or the next request.
        self._pending: _Pending | None = None
        #: warm() replays the reply settle() settled last (its read-only path) when it had
        #: at most this many candidates (0: never).
        self.warm_reply_max_nodes = warm_reply_max_nodes
        self._settled: _Pending | None = None
        #: Replays that raised (the next request answers as it would have without).
        self.warm_errors = 0
        #: Replays skipped because the caller's next request was already there.
        self.replays_skipped = 0
        self._after_assume = getattr(scorer, "after_assume", None)
        #: A scorer's one-pass ``normalize(score(...))`` and first argmax (DSAN's
        #: ``score_scaled``), used when no candidate goes to the fallback.
        self._score_scaled = getattr(scorer, "score_scaled", None)
        #: A scorer's reply from what it holds for the pod's class (DSAN's ``score_held``,
        #: :mod:`dsan.model.heldreply`): None sends the request down the general path.
        self._score_held = getattr(scorer, "score_held", None)
        fix_weights = getattr(scorer, "fix_weights", None)
        if fix_weights is not None:  # a model served here is loaded once and never trained
            fix_weights()
        #: Called before the served scorer reads a snapshot: the rows written since it last
        #: read it, for a scorer that trusts snapshot versions (sidecar.scorerfeed).
        self._feed = ScorerFeed(cache, scorer)
        #: settle() calls whose class refresh or scorer hook raised (the assumption stands).
        self.settle_errors = 0
        #: Deferred assumptions the next request applied first (its settle() came late).
        self.settled_by_next = 0
        #: Ties at the top go to the lowest node name (sidecar.tiebreak); ranks per table.
        self._name_rank = NameRank()
        #: Called once per assumption made, with its node (the service counts them in its
        #: metrics, per node).
        self.on_assume: Callable[[str], None] | None = None

    def score(
        self, pod: PodSpec, names: Sequence[str] | NodeRows, max_score: int = MAX_NODE_SCORE,
        assume: str = "", defer: bool = False,
    ) -> ScoreResult:
        """Score ``names`` (or the rows of a node table, :class:`NodeRows`) for ``pod``; with
        ``assume`` (the pod's key), charge the pod to the best node in the same critical
        section (:meth:`GraphCache.assume`), or with ``defer`` leave that to :meth:`settle`
        (called once the reply is out)."""
        # One request at a time: the snapshot is refreshed in place between requests, and
        # under the GIL parallel scoring would gain nothing anyway.
        with self.cache.scoring_lock:
            if self._pending is not None:  # the previous request's settle() has not run yet
                self.settled_by_next += 1
                self._settle_locked()
            t0 = time.perf_counter()
            pub = self.cache.snapshot()
            if isinstance(names, NodeRows):
                rows = names.resolve(pub)
                res = self._score(pod, names, rows, max_score, pub, t0)
            else:
                res = self._score(pod, names, None, max_score, pub, t0)
            if res.rows is not None:
                res.scores, res.best = lowest_name_wins(
                    res.scores, res.best, res.rows, self._name_rank.of(pub.snap.names))
            if res.best < 0:
                winner = ""
            elif isinstance(names, NodeRows):
                winner = pub.snap.names[int(names.rows[res.best])]
            else:
                winner = names[res.best]
            if assume and winner:
                if defer:
                    self._pending = (assume, pod, winner, names, max_score)
                else:
                    self.cache.assume(assume, pod, winner, patch_published=True)
                    if self.on_assume is not None:
                        self.on_assume(winner)
            return res

    def settle(self) -> bool:
        """Apply the deferred assumption, if any: charge the winner, refresh the class that
        was just served on that row (the next pod of the class then finds nothing to
        update), call the scorer's ``after_assume``. Safe from any thread; True if there
        was one to apply."""
        if self._pending is None:  # read without the lock: checked again under it
            return False
        with self.cache.scoring_lock:
            pending = self._pending
            if pending is None:
                return False
            self._settle_locked()
            self._settled = pending
            return True

    def warm(self, waiting: Callable[[], bool] | None = None) -> None:
        """Replay the reply of the request :meth:`settle` settled last on its candidates,
        if it had at most ``warm_reply_max_nodes``, discarding it: the held path (DSAN's
        held logits, then the tie-break) reads the same code and data the next request of
        the class will, so that request finds them in the CPU caches instead of behind the
        refresh that just ran (docs/sidecar.md, "Warm replies"). Read-only but for catching
        up what that request would catch up first (the scorer's feed, the embeddings'
        refresh, the class's feasibility); nothing when the held logits do not apply.
        Skipped, and counted in ``replays_skipped``, when ``waiting()`` says the caller's
        next request is already there: the replay would only delay it. The caller runs this
        last after a reply's deferred work (anything after it cools the caches again), never
        on a request's path (a request that settles the previous one itself replays
        nothing)."""
        settled, self._settled = self._settled, None
        if (settled is None or self._score_held is None
                or len(settled[3]) > self.warm_reply_max_nodes):
            return
        if waiting is not None and waiting():
            self.replays_skipped += 1
            return
        with self.cache.scoring_lock:
            self._warm(settled[1], settled[3], settled[4])

    def _warm(self, pod: PodSpec, names: Sequence[str] | NodeRows, max_score: int) -> None:
        if self._score_held is None or max_score < 1:
            return
        try:
            pub = self.cache.snapshot()
            if self.uses_telemetry and not self._staleness.none(pub):
                return
            rows = names.resolve(pub) if isinstance(names, NodeRows) else None
            self._feed(pub)
            res = score_held(self._score_held, pod, names, rows,
                             self.feasibility.mask(pod, pub), max_score, pub, 0.0)
            if res is not None and res.rows is not None:
                lowest_name_wins(res.scores, res.best, res.rows,
                                 self._name_rank.of(pub.snap.names))
        except Exception:  # the next request takes its own path, as without the replay
            self.warm_errors += 1
            if self.warm_errors == 1 or self.warm_errors % 1000 == 0:
                log.exception("replaying the last reply failed (%d times)", self.warm_errors)

    def _settle_locked(self) -> None:
        assert self._pending is not None
        key, pod, node = self._pending[:3]
        self._pending = None
        self.cache.assume(key, pod, node, patch_published=True)
        if self.on_assume is not None:
            self.on_assume(node)
        try:
            # One view for the whole refresh: the feasibility handed to the scorer's hook is
            # then that of the very snapshot the hook reads.
            pub = self.cache.snapshot()
            ok = None
            if self._cached:
                ckey = self.classes.key(pod)
                if ckey is not None:
                    self.classes.lookup(pod, ckey, pub)
            else:  # the class's feasibility of the winner's row, off the next reply's path
                ok = self.feasibility.mask(pod, pub)
            if self._after_assume is not None:
                row = pub.index.get(node, -1)
                if row >= 0:
                    self._feed(pub)
                    self._after_assume(pod, pub.snap, row, ok)
        except Exception:  # only warm-up work failed: the next request recomputes it
            self.settle_errors += 1
            if self.settle_errors == 1 or self.settle_errors % 1000 == 0:
                log.exception("refresh after assuming %s failed (%d times)", key,
                              self.settle_errors)

    def _score(self, pod: PodSpec, names: Sequence[str] | NodeRows,
                rows: npt.NDArray[np.int64] | None, max_score: int, pub: Published,
                t0: float) -> ScoreResult:
        """``rows``: the candidates' rows when the client sent them (``names`` is then the
        :class:`NodeRows`), else None and they are looked up by name."""
        try_cached = self._cached and max_score >= 1
        if try_cached:
            key = self.classes.key(pod)
            if key is not None:
                try:
                    res = score_class(self.classes, pod, key, pub, names, rows, max_score,
                                      self._strict, t0)
                except NoKnownNodes:
                    raise
                except Exception:  # the class could not be updated: the general path
                    self.cache_misses += 1
                    try_cached = False
                    res = None
                if res is not None:
                    return res
        # DSAN: the logits its pod class holds, unless a GPU node is stale (the fallback
        # then scores it, which only the general path does)
        if (self._score_held is not None and max_score >= 1
                and (not self.uses_telemetry or self._staleness.none(pub))):
            self._feed(pub)
            res = score_held(self._score_held, pod, names, rows,
                             self.feasibility.mask(pod, pub), max_score, pub, t0)
            if res is not None:
                return res
        return self._score_general(pod, names, rows, max_score, pub, t0, try_cached)

    def _score_general(self, pod: PodSpec, names: Sequence[str] | NodeRows,
                       given: npt.NDArray[np.int64] | None, max_score: int, pub: Published,
                       t0: float, try_cached: bool) -> ScoreResult:
        snap = pub.snap
        m = len(names)
        # --- featurize: names -> rows, feasibility and staleness on our view
        n_unknown = 0
        if given is not None:
            rows = given  # rows of this snapshot's table (NodeRows.resolve): all known
        else:
            assert not isinstance(names, NodeRows)
            rows, n_unknown = name_rows(pub.index, names)  # -1 for an unknown name
        if n_unknown == 0:
            known = _NO_MASK  # read only when n_unknown
        else:
            known = rows >= 0
            if n_unknown == m or (self._strict and n_unknown):
                assert not isinstance(names, NodeRows)
                raise NoKnownNodes(unknown_message(names, known))
        if try_cached:
            key = self.classes.key(pod)
            if key is not None:
                try:
                    return score_cached(self.classes, pod, key, pub, rows, known, n_unknown,
                                        max_score, t0)
                except Exception:  # the uncached path below degrades and counts it
                    self.cache_misses += 1
        safe = np.where(known, rows, 0) if n_unknown else rows
        ok = self.feasibility.mask(pod, pub)[safe]
        if n_unknown:
            ok &= known
        # The feasible candidates' positions: their count, and where a one-pass scorer's
        # scores go back (ndarray.nonzero: ~1 us; count_nonzero plus flatnonzero's Python
        # wrapper were ~4.5 on the development machine).
        at = ok.nonzero()[0]
        n_ok = len(at)
        stale: npt.NDArray[np.bool_] | None = None
        n_stale = 0
        if self.uses_telemetry:  # stale GPU nodes go to the fallback (sidecar.staleness)
            stale, n_stale = self._staleness.mask(pub, safe, ok)
        everyone = n_ok == m and n_stale == 0  # the common case: no masks needed
        fresh = ok if stale is None or n_stale == 0 else ok & ~stale
        # The scorer scales its candidates itself (one pass) when they are the only ones
        # scored (no stale group on the fallback's scale); beside infeasible or unknown ones
        # (scored 0, argmax'ed as -1) only when no score can be negative.
        one_pass = self._score_scaled if n_stale == 0 and (everyone or max_score >= 0) else None
        t1 = time.perf_counter()
        # --- model
        raw_fresh = None
        scaled = None  # (scores, best) when the scorer scaled its candidates itself
        fell_back = 0
        if n_ok > n_stale:
            if everyone:
                cand = rows
            elif one_pass is not None:  # fresh is ok: the positions serve both ways
                cand = rows[at]
            else:
                cand = rows[fresh]
            try:
                self._feed(pub)
                if one_pass is not None:
                    scaled = one_pass(pod, snap, cand, max_score)
                else:
                    raw_fresh = self.scorer.score(pod, snap, cand)
            except Exception:  # a broken model must not stop scheduling: degrade to fallback
                self.policy_errors += 1
                if self.policy_errors == 1 or self.policy_errors % 1000 == 0:
                    log.exception("policy %r failed (%d times); scoring with %r",
                                  self.scorer.name, self.policy_errors, self.fallback.name)
                raw_fresh = self.fallback.score(pod, snap, cand)
                fell_back = len(cand)
        raw_stale = self.fallback.score(pod, snap, rows[stale]) if n_stale else None
        t2 = time.perf_counter()
        # --- normalise
        best = -1
        if scaled is not None and everyone:
            out, best = scaled
        elif scaled is not None:  # scattered back: the rest are unknown or infeasible (0)
            out = np.zeros(m, dtype=np.int64)
            out[at] = scaled[0]
            best = int(at[scaled[1]])
        elif everyone and raw_fresh is not None:
            out = normalize(raw_fresh, max_score)
        else:
            out = np.zeros(m, dtype=np.int64)
            if raw_fresh is not None:
                out[fresh] = normalize(raw_fresh, max_score)
            if raw_stale is not None:
                out[stale] = normalize(raw_stale, max_score)
        if n_ok and scaled is None:
            best = int(np.argmax(out if everyone else np.where(ok, out, -1)))
        t3 = time.perf_counter()
        return ScoreResult(
            scores=out, best=best, unknown=n_unknown, infeasible=m - n_unknown - n_ok,
            fallback=n_stale + fell_back, version=pub.version, table_epoch=pub.table_epoch,
            featurize_s=t1 - t0, model_s=t2 - t1, total_s=t3 - t0, rows=rows,
        )

    def filter(self, pod: PodSpec, names: Sequence[str]) -> tuple[list[str], dict[str, str]]:
        """Split candidates into (feasible, {name: reason}) on our view.

        Unknown nodes pass: the sidecar must not veto nodes it has not heard of yet.
        """
        m = len(names)
        with self.cache.scoring_lock:
            if self._pending is not None:
                self._settle_locked()
            pub = self.cache.snapshot()
            rows = name_rows(pub.index, names)[0]
            known = rows >= 0
            ok = np.ones(m, dtype=bool)
            ok[known] = feasible(pod, pub.snap)[rows[known]]
        # Object-array masking and dict.fromkeys run in C: no Python loop over the names.
        arr = np.array(names, dtype=object)
        passed: list[str] = arr[ok].tolist()
        failed = dict.fromkeys(arr[~ok].tolist(), _FAILED_REASON)
        return passed, failed


_NO_MASK = np.zeros(0, dtype=bool)
_FAILED_REASON = "dsan: insufficient CPU, memory or GPU share on this node"

