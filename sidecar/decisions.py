"""The sidecar's recent decisions: per scored pod, what a later Event or explanation needs.

Remembering is a dict insert on the request path (nothing copied); derived facts are computed
when asked. Only pods the informer has shown pending for our scheduler are remembered, so
callers cannot fill the memory with made-up pods. kube-scheduler often asks about a pod before
the sidecar's informer has shown it: that decision is held apart (bounded, oldest dropped)
until the informer confirms the pod (:meth:`Decisions.confirm`), and forgotten otherwise.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dsan.core.snapshot import PodSpec
from sidecar.scoring import ScoreResult


@dataclass(slots=True)
class Decision:
    """One scored pod. ``uid`` and ``bound_node`` are filled when the informer sees it bound."""

    #: namespace/name (the PodSpec's name).
    name: str
    #: The key it was assumed under (its UID, or namespace/name).
    key: str
    spec: PodSpec
    result: ScoreResult
    #: Top of the reply's scale: 10 for the extender, 100 for gRPC.
    max_score: int
    #: Wall time of the score.
    at: float
    #: The served policy's label (``dsan@<version>`` or a heuristic's name), the fallback's.
    policy: str
    fallback: str
    uid: str = ""
    bound_node: str = ""

    @property
    def winner(self) -> str:
        return self.result.winner

    @property
    def winner_score(self) -> int:
        return int(self.result.scores[self.result.best])

    def candidate_names(self) -> list[str]:
        """The known candidates' names, in request order."""
        names = self.result.names
        return [names[r] for r in self.result.rows.tolist() if r >= 0]

    def runner_up(self, among: npt.NDArray[np.bool_] | None = None) -> int:
        """Position of the best other known candidate (of the mask ``among``) by the reply's
        score, ties to the lowest name as the engine's; -1 if there is none."""
        rows, scores, best = self.result.rows, self.result.scores, self.result.best
        names = self.result.names
        known = rows >= 0 if among is None else (rows >= 0) & among
        pick, key = -1, (0, "")
        for i in np.flatnonzero(known).tolist():
            if i == best:
                continue
            k = (-int(scores[i]), names[int(rows[i])])
            if pick < 0 or k < key:
                pick, key = i, k
        return pick

    def name_at(self, position: int) -> str:
        """The name of the candidate at ``position`` ("" for -1 or an unknown name)."""
        row = int(self.result.rows[position]) if position >= 0 else -1
        return self.result.names[row] if row >= 0 else ""

    def scored_by(self, position: int) -> str:
        """The label of the policy (served, or the fallback) that scored that candidate."""
        fb = self.result.by_fallback
        return self.fallback if fb is not None and bool(fb[position]) else self.policy


class Decisions:
    """The ``kept`` most recent decisions by namespace/name; thread-safe."""

    def __init__(self, kept: int, held_max_age_s: float = 30.0) -> None:
        self.kept = kept
        #: A held decision older than this is not confirmed (the sidecar passes assume_ttl_s:
        #: an assumption that old would have expired anyway).
        self.held_max_age_s = held_max_age_s
        self._lock = threading.Lock()
        self._by_name: OrderedDict[str, Decision] = OrderedDict()
        #: Decisions for pods not yet shown pending, by the key they were scored under.
        self._held: OrderedDict[str, Decision] = OrderedDict()

    def remember(self, spec: PodSpec, key: str, result: ScoreResult, max_score: int,
                 policy: str, fallback: str, held: bool = False) -> None:
        """A request's decision (on the request path: a dict insert, the oldest dropped);
        ``held``: the pod is not known to be ours yet, keep it apart until :meth:`confirm`."""
        d = Decision(spec.name, key, spec, result, max_score, time.time(), policy, fallback)
        with self._lock:
            if held:
                self._put(self._held, key, d)
            else:
                self._put(self._by_name, spec.name, d)

    def _put(self, into: OrderedDict[str, Decision], key: str, d: Decision) -> None:
        into.pop(key, None)
        into[key] = d
        if len(into) > self.kept:
            into.popitem(last=False)

    def confirm(self, *keys: str) -> Decision | None:
        """The pod scored under one of ``keys`` is pending for our scheduler after all: its
        held decision, if recent, is remembered and returned."""
        with self._lock:
            for key in keys:
                d = self._held.pop(key, None)
                if d is not None and time.time() - d.at <= self.held_max_age_s:
                    self._put(self._by_name, d.name, d)
                    return d
            return None

    def get(self, name: str) -> Decision | None:
        with self._lock:
            return self._by_name.get(name)

    def note_bound(self, name: str, uid: str, node: str) -> Decision | None:
        """Pod ``name`` was seen bound: note where and its UID; its decision, if remembered."""
        with self._lock:
            d = self._by_name.get(name)
            if d is not None:
                d.uid, d.bound_node = uid, node
            return d

    def __len__(self) -> int:
        return len(self._by_name)
