"""The extender's preempt verb: which of kube-scheduler's preemption candidates to evict.

The reply holds at most one node, the served policy's reclaimer's choice, with its victims
exactly as kube-scheduler proposed them: docs/sidecar.md ("Preemption") says why that shape.
A victim the informer does not show bound on that node drops its candidate: its cost is
unknown, and guessing it could evict what the policy protects.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from dsan.policies.reclaim import Candidate, Reclaimer, admissible
from sidecar.cache import GraphCache
from sidecar.podspec import PodError, podspec_from_pod
from sidecar.service import RequestError, json_object
from sidecar.shrinker import Shrinker
from sidecar.victims import PodRecord, record

log = logging.getLogger("dsan.sidecar.preemption")
#: How candidates ended, by :data:`CANDIDATE_RESULTS` (the metric's label values):
#: offered by kube-scheduler, dropped for a victim the cache does not show bound on that node,
#: dropped because the served policy's quota refuses the preemptor that node, chosen by the
#: reclaimer.
CANDIDATE_RESULTS = ("offered", "unknown_victim", "quota_refused", "chosen")
#: Preempt requests by outcome: some node's victims returned, or none (the pod waits).
OUTCOMES = ("evict", "none")
#: Victim UIDs whose workload was already shrunk, remembered so that kube-scheduler asking
#: again about the same victims does not shrink twice (oldest forgotten first).
_SHRUNK_MAX = 10_000


@dataclass(frozen=True, slots=True)
class Proposal:
    """One candidate node as kube-scheduler sent it."""

    node: str
    uids: tuple[str, ...]
    pdb_violations: int
    #: Whole victim pods (``NodeNameToVictims``), else None: look the UIDs up in the cache.
    pods: tuple[Mapping[str, Any], ...] | None = None


def parse_preemption_args(body: bytes) -> tuple[dict[str, Any], list[Proposal]]:
    """ExtenderPreemptionArgs -> (Pod, proposals); RequestError names what is wrong."""
    args = json_object(body, "ExtenderPreemptionArgs")
    pod = args.get("Pod")
    if not isinstance(pod, dict) or not isinstance(pod.get("spec"), dict):
        raise RequestError("bad_pod", "ExtenderPreemptionArgs.Pod is missing or has no spec")
    meta, full = args.get("NodeNameToMetaVictims"), args.get("NodeNameToVictims")
    if meta is None and full is None:
        raise RequestError("bad_request", "ExtenderPreemptionArgs has neither "
                           "NodeNameToMetaVictims nor NodeNameToVictims")
    field = "NodeNameToMetaVictims" if meta is not None else "NodeNameToVictims"
    victims = meta if meta is not None else full
    if not isinstance(victims, dict):
        raise RequestError("bad_request", f"ExtenderPreemptionArgs.{field} must be an object")
    return pod, [_proposal(field, node, v, whole=meta is None) for node, v in victims.items()]


def _proposal(field: str, node: str, v: Any, whole: bool) -> Proposal:
    where = f"ExtenderPreemptionArgs.{field}[{node[:64]!r}]"
    if v is None:  # a nil *MetaVictims: a candidate without victims, never admissible
        return Proposal(node, (), 0, () if whole else None)
    if not isinstance(v, dict):
        raise RequestError("bad_request", f"{where} must be an object")
    pods, pdb = v.get("Pods"), v.get("NumPDBViolations", 0)
    pods = [] if pods is None else pods  # a nil slice
    if not isinstance(pods, list):
        raise RequestError("bad_request", f"{where}.Pods must be a list")
    if isinstance(pdb, bool) or not isinstance(pdb, int) or not 0 <= pdb < 2**63:
        raise RequestError("bad_request", f"{where}.NumPDBViolations must be a non-negative "
                           "int64")
    uids = []
    for i, p in enumerate(pods):
        uid = _uid(p, whole)
        if uid is None:
            what = "a Pod with metadata.uid" if whole else 'a MetaPod {"UID": "..."}'
            raise RequestError("bad_request", f"{where}.Pods[{i}] must be {what}")
        uids.append(uid)
    return Proposal(node, tuple(uids), pdb, tuple(pods) if whole else None)


def _uid(p: Any, whole: bool) -> str | None:
    if not isinstance(p, dict):
        return None
    if whole:
        meta = p.get("metadata")
        p = meta if isinstance(meta, dict) else {}
        uid = p.get("uid")
    else:
        uid = p.get("UID")
    return uid if isinstance(uid, str) and 0 < len(uid) <= 128 else None


def encode_result(chosen: Proposal | None) -> bytes:
    """ExtenderPreemptionResult: the chosen node's victims, or an empty map (evict nothing)."""
    out: dict[str, Any] = {}
    if chosen is not None:
        out[chosen.node] = {"Pods": [{"UID": u} for u in chosen.uids],
                            "NumPDBViolations": chosen.pdb_violations}
    return orjson.dumps({"NodeNameToMetaVictims": out})


class Reclamation:
    """Proposals in, the reclaimer's choice out; shrinks the workloads of elastic victims."""

    def __init__(self, cache: GraphCache, reclaimer: Reclaimer,
                 shrinker: Shrinker | None = None, wall: Callable[[], float] = time.time) -> None:
        self.cache = cache
        self.reclaimer = reclaimer
        self.shrinker = shrinker
        self._wall = wall
        #: Counters the metrics read at scrape time (plain ints, bumped under _lock).
        self.candidates = dict.fromkeys(CANDIDATE_RESULTS, 0)
        self.outcomes = dict.fromkeys(OUTCOMES, 0)
        #: Victims returned for eviction, by task type.
        self.victims: dict[str, int] = {}
        self._shrunk: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def choose(self, priority: int, proposals: list[Proposal],
               refused: Collection[str] = ()) -> Proposal | None:
        """The proposal whose victims to evict for a pod of ``priority``, or None; none on a
        node in ``refused`` (the nodes the quota refuses the pod)."""
        now = self._wall()
        known: list[tuple[Proposal, list[PodRecord]]] = []
        allowed = [p for p in proposals if p.node not in refused]
        for p in allowed:
            recs = self._records(p)
            if recs is not None:
                known.append((p, recs))
        cands = [Candidate(i, tuple(r.victim(now) for r in recs))
                 for i, (_, recs) in enumerate(known)]
        pick = self.reclaimer.choose(priority, cands) if cands else None
        if pick is not None and not (0 <= pick < len(cands)
                                     and admissible(priority, cands[pick])):
            # The contract's one hard rule, held here too: a reclaimer's bug evicts nothing.
            log.error("reclaimer %s chose candidate %r, which is not admissible for priority "
                      "%d: evicting nothing", self.reclaimer.name, pick, priority)
            pick = None
        with self._lock:
            self.candidates["offered"] += len(proposals)
            self.candidates["quota_refused"] += len(proposals) - len(allowed)
            self.candidates["unknown_victim"] += len(allowed) - len(known)
            self.outcomes["evict" if pick is not None else "none"] += 1
            if pick is None:
                return None
            self.candidates["chosen"] += 1
            chosen, recs = known[pick]
            for v in cands[pick].victims:
                self.victims[v.task_type] = self.victims.get(v.task_type, 0) + 1
            owners = self._newly_shrunk(chosen.uids, recs)
        if self.shrinker is not None:
            for (ns, owner), n in owners.items():
                self.shrinker.offer(ns, owner, n)
        return chosen

    def _records(self, p: Proposal) -> list[PodRecord] | None:
        """Each victim of ``p`` as the cache shows it bound on ``p.node``, or None when one
        is not (or, for whole pods, cannot be read)."""
        if p.pods is not None:
            try:
                return [record(pod, p.node, podspec_from_pod(pod, self.cache.models))
                        for pod in p.pods]
            except PodError as exc:
                raise RequestError("bad_pod", f"a victim on node {p.node[:64]!r}: {exc}") \
                    from None
        recs = self.cache.bound_pods(p.uids)
        if any(r is None or r.node != p.node for r in recs):
            return None
        return [r for r in recs if r is not None]

    def _newly_shrunk(self, uids: tuple[str, ...],
                      recs: list[PodRecord]) -> dict[tuple[str, str], int]:
        """(namespace, owner) -> elastic members among the victims not counted before."""
        owners: dict[tuple[str, str], int] = {}
        for uid, r in zip(uids, recs, strict=True):
            owner = r.owner
            if owner is None or uid in self._shrunk:
                continue
            self._shrunk[uid] = None
            if len(self._shrunk) > _SHRUNK_MAX:
                self._shrunk.popitem(last=False)
            owners[r.namespace, owner] = owners.get((r.namespace, owner), 0) + 1
        return owners
