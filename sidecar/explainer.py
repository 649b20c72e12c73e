"""``GET /explain/{namespace}/{pod}``: why the sidecar put a node first for a pod it scored.

DSAN's impacts are SHAP values of the served logit, FGD's and k8s-default's their per-term
breakdown; they add up to ``score - base_value``. The candidates are re-read on the *current*
cluster with the pod's own charge taken off a copy (remembering the cluster per request would
cost O(nodes) on the scoring path). Under the scoring lock only copies are made; the rest
runs one at a time (429 otherwise) within a CPU budget. See docs/explain.md.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

import numpy as np
import orjson

from dsan.core.filtering import feasible, release
from dsan.explain.decision import Decision as ExplainedDecision
from dsan.explain.decision import Explanation
from dsan.explain.explainers import EXPLAINABLE, DSANShapConfig, explain_rows, explain_terms
from dsan.policies.base import Scorer
from dsan.policies.dsan import DSANScorer
from sidecar.cache import GraphCache
from sidecar.decisions import Decision, Decisions
from sidecar.scoring import ScoringEngine

#: Outcomes of /explain requests (the metric's label values).
RESULTS = ("ok", "not_found", "unexplainable", "busy", "not_ready", "bad_request", "error")
#: The longest namespace or pod name Kubernetes allows (a DNS subdomain).
NAME_MAX = 253


class ExplainRefused(Exception):
    """An explanation the sidecar cannot give: HTTP ``status``, metric ``result``."""

    def __init__(self, status: int, result: str, message: str) -> None:
        super().__init__(message)
        self.status, self.result, self.message = status, result, message


class Explainer:
    """Explains remembered decisions on demand; one at a time, CPU-bounded."""

    def __init__(self, cache: GraphCache, engine: ScoringEngine, decisions: Decisions,
                 ready: Callable[[], bool], background: int, permutations: int,
                 cpu_budget_s: float) -> None:
        self._cache = cache
        self._engine = engine
        self._decisions = decisions
        self._ready = ready
        self._shap = DSANShapConfig(background=background, permutations=permutations)
        self._budget = cpu_budget_s
        #: Fresh heuristic scorers, one per policy: the served ones keep per-snapshot state
        #: that scoring a copy would reset (used only while holding the slot).
        self._heuristics: dict[str, Scorer] = {}
        self._slot = threading.Lock()
        #: /explain requests by outcome (:data:`RESULTS`).
        self.results = dict.fromkeys(RESULTS, 0)
        self._count_lock = threading.Lock()

    def http(self, rest: str) -> tuple[int, bytes, str]:
        """``GET /explain/<rest>``: (status, JSON body, extra header lines)."""
        try:
            namespace, name = parse_path(rest)
            doc = self.explain(namespace, name)
        except ExplainRefused as exc:
            self._count(exc.result)
            extra = "Retry-After: 1\r\n" if exc.status == 429 else ""
            return exc.status, orjson.dumps({"error": exc.message}), extra
        self._count("ok")
        return 200, orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY), ""

    def _count(self, result: str) -> None:
        with self._count_lock:  # server threads answer refusals concurrently
            self.results[result] += 1

    def explain(self, namespace: str, name: str) -> dict[str, Any]:
        if not self._ready():
            raise ExplainRefused(503, "not_ready", "the sidecar's informers have not synced yet")
        d = self._decisions.get(f"{namespace}/{name}")
        if d is None:
            raise ExplainRefused(404, "not_found", (
                f"the sidecar has not scored pod {namespace}/{name} (it remembers the last "
                f"{self._decisions.kept} pods it scored for its scheduler; a pod with one "
                "feasible node is bound without a score)"))
        label = d.scored_by(d.result.best)
        policy = label.partition("@")[0]
        if policy not in EXPLAINABLE:
            raise ExplainRefused(404, "unexplainable", (
                f"policy {policy!r} scored {namespace}/{name} and has no explanation: "
                f"explainable policies are {', '.join(EXPLAINABLE)}"))
        if d.runner_up() < 0:
            raise ExplainRefused(404, "unexplainable", (
                f"{namespace}/{name} was scored on one node ({d.winner}): nothing to compare"))
        if not self._slot.acquire(blocking=False):
            raise ExplainRefused(429, "busy", "another explanation is being computed; retry")
        try:
            fallback = label != d.policy
            scorer = self._engine.fallback if fallback else self._engine.scorer
            t0 = time.thread_time()
            expl, notes, lock_s = self._compute(d, scorer, fallback, policy)
            cpu_s = time.thread_time() - t0
        except ExplainRefused:
            raise
        except Exception as exc:
            raise ExplainRefused(500, "error", f"explaining {namespace}/{name} failed: "
                                 f"{type(exc).__name__}: {exc}") from exc
        finally:
            self._slot.release()
        return document(d, label, expl, notes, lock_s, cpu_s)

    def _compute(self, d: Decision, scorer: Scorer, fallback: bool, policy: str
                 ) -> tuple[Explanation, list[str], float]:
        """Under the scoring lock copies only (the cluster, for DSAN the candidates' embedding
        rows); outside it, featurize and SHAP (DSAN) or the per-term breakdown. Also the notes
        and the seconds the lock was held."""
        cache = self._cache
        fb = d.result.by_fallback
        rows_then = d.result.rows
        group = rows_then >= 0
        if fb is not None:  # the candidates the same scorer scored (one normalised group)
            group &= fb if fallback else ~fb
        names_then = d.result.names
        ru_name = d.name_at(d.runner_up(among=group))  # the best other of the same group
        wanted = [names_then[int(r)] for r in rows_then[group].tolist()]
        node_cols = all_streams = None
        with cache.scoring_lock:
            t0 = time.perf_counter()
            pub, charge = cache.snapshot_with_charge(
                (d.uid, d.key, d.name), d.name, (d.bound_node, d.winner))
            rows_now = np.fromiter((pub.index.get(n, -1) for n in wanted), dtype=np.int64,
                                   count=len(wanted))
            snap = pub.snap.copy()
            if isinstance(scorer, DSANScorer) and (rows_now >= 0).all():
                serving = scorer.serving
                # what the next request would do anyway: embeddings for this node set
                serving.refresh(pub.snap, due=serving.min_refresh_s == 0)
                node_cols = serving.embeddings.node_cols[rows_now]
                all_streams = serving.runtime.streams(rows_now)
            lock_s = time.perf_counter() - t0
        gone = [n for n, r in zip(wanted, rows_now.tolist(), strict=True) if r < 0]
        if gone:
            raise ExplainRefused(404, "unexplainable", (
                f"{len(gone)} of the candidates left the cluster since the score "
                f"({', '.join(gone[:3])}): the decision cannot be re-read"))
        notes = ["state: the cluster now, with this pod's own charge taken off; pods placed "
                 "on these nodes since the score count"]
        if charge is not None and charge[0] in pub.index:
            node, spec, gpus = charge
            release(snap, spec, pub.index[node], gpus)
        else:
            notes.append("the pod's own charge was not found (bound elsewhere since, deleted "
                         "or not yet seen): nothing was taken off")
        chosen_pos = wanted.index(d.winner)
        if not ru_name:
            raise ExplainRefused(404, "unexplainable",
                                 f"{d.name}: no other node was scored by {policy}")
        ru_pos = wanted.index(ru_name)
        # the engine's candidates: those that fit (an infeasible one scored 0 without a model)
        fits = feasible(d.spec, snap)[rows_now]
        fits[[chosen_pos, ru_pos]] = True
        keep = np.flatnonzero(fits)
        rows = rows_now[keep]
        chosen = int(np.flatnonzero(keep == chosen_pos)[0])
        runner_up = int(np.flatnonzero(keep == ru_pos)[0])
        if isinstance(scorer, DSANScorer):
            assert node_cols is not None and all_streams is not None
            runtime = scorer.serving.runtime
            x = scorer.serving.features(d.spec, snap, rows, node_cols=node_cols[keep])
            streams = all_streams[keep]
            logits = runtime.head(x, streams)  # the served function on every candidate
            dec = ExplainedDecision(d.spec, snap, scorer, rows, logits, chosen, runner_up,
                                     tie_by_rank=True)  # ties: the lowest name
            t0, budget = time.thread_time(), self._budget
            expl = explain_rows(dec, runtime, x, streams, self._shap,
                                stop=lambda: time.thread_time() - t0 > budget)
            top = int(np.argmax(logits))
            if logits[top] > logits[chosen] + 1e-4:
                notes.append(f"on the current state {snap.names[int(rows[top])]} scores "
                             "above the recommended node")
            return expl, notes, lock_s
        if policy not in self._heuristics:
            from dsan.policies.registry import make_scorer

            self._heuristics[policy] = make_scorer(policy)
        fresh = self._heuristics[policy]
        scores = np.asarray(fresh.score(d.spec, snap, rows), dtype=np.float64)
        dec = ExplainedDecision(d.spec, snap, fresh, rows, scores, chosen, runner_up,
                                 tie_by_rank=True)
        return explain_terms(dec), notes, lock_s


def parse_path(rest: str) -> tuple[str, str]:
    """``<namespace>/<pod>`` (percent-decoded) of an /explain path; 400 otherwise."""
    parts = rest.split("/")
    if len(parts) != 2:
        raise ExplainRefused(400, "bad_request", "the path is /explain/<namespace>/<pod>")
    out = []
    for what, raw in zip(("namespace", "pod name"), parts, strict=True):
        value = unquote(raw)
        if not 0 < len(value) <= NAME_MAX or not value.isprintable() or "/" in value:
            raise ExplainRefused(400, "bad_request",
                                 f"bad {what} {value[:64]!r}: 1..{NAME_MAX} printable "
                                 "characters without '/'")
        out.append(value)
    return out[0], out[1]


def document(d: Decision, label: str, e: Explanation, notes: list[str], lock_s: float,
             cpu_s: float) -> dict[str, Any]:
    """The JSON answer: the decision, its factors (largest |impact| first) and the cost."""
    order = e.top(len(e.names), "chosen")
    factors = [{
        "feature": e.names[i],
        "value": float(e.value_chosen[i]),
        "unit": e.units[i],
        "impact": float(e.contrib_chosen[i]),
        "runner_up_value": float(e.value_runner_up[i]),
        "runner_up_impact": float(e.contrib_runner_up[i]),
    } for i in order.tolist()]
    then = d.candidate_names()
    reply_ru = (int(d.result.scores[np.flatnonzero(d.result.rows >= 0)[then.index(e.runner_up)]])
                if e.runner_up in then else None)
    return {
        "task_id": d.name,
        "recommended_node": e.chosen,
        "runner_up": e.runner_up,
        "bound_node": d.bound_node or None,
        "policy": label,
        "served_policy": d.policy,
        "base_value": e.base_value,
        "score": e.output_chosen,
        "runner_up_score": e.output_runner_up,
        "method": e.method,
        "candidates": e.n_candidates,
        "reply": {"recommended": d.winner_score, "runner_up": reply_ru, "max": d.max_score},
        "scored_at": datetime.fromtimestamp(d.at, UTC).isoformat(timespec="milliseconds"),
        "notes": [*notes, *e.notes],
        "decision_factors": factors,
        "context": [{"name": n, "unit": u, "value": a, "runner_up_value": b}
                    for n, u, a, b in e.context],
        "cost": {"lock_s": round(lock_s, 6), "cpu_s": round(cpu_s, 6)},
    }
