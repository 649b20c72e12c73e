"""Where the sidecar's score latency goes: each step of one request timed alone, in process.

    .venv/bin/python bench/latency_breakdown.py out/latency-breakdown.json

Every figure is the minimum over 300 single calls (the cost of the work itself, without the
shared machine's preemptions that dominate the p99 of bench/test_score_latency.py), for the
same worlds, pods and node names as that benchmark. ``bench/latency_report.py`` prints them
beside the end-to-end numbers to show which part of each budget is physically reachable.
"""

from __future__ import annotations

import itertools
import json
import sys
import timeit
from collections.abc import Callable
from itertools import repeat
from json.encoder import encode_basestring
from pathlib import Path

import numpy as np
import orjson

# The bench directory (its test module) and the repository root (the `bench` package it imports).
sys.path.insert(0, str(Path(__file__).parents[1]))
sys.path.insert(0, str(Path(__file__).parent))
from test_score_latency import POLICIES, SIZES, VARIANTS, pod, world

from dsan.api.gen.scorer_v1 import scorer_pb2
from dsan.core.filtering import feasible
from dsan.core.snapshot import ClusterSnapshot, PodSpec
from dsan.policies.base import Scorer, normalize
from sidecar.extender import ExtenderApp, encode_priorities, parse_args
from sidecar.grpc_server import ScoreHandler


def best_us(fn: Callable[..., object], setup: Callable[[], object] | None = None) -> float:
    if setup is None:
        fn()
        return min(timeit.repeat(fn, number=1, repeat=300)) * 1e6
    times = []
    for _ in range(300):
        arg = setup()
        t = timeit.default_timer()
        fn(arg)
        times.append(timeit.default_timer() - t)
    return min(times) * 1e6


def _reference_scorer(scorer: Scorer) -> Scorer | None:
    """DSAN's previous serving path beside the served one, same model and workload: every
    candidate featurized, torch head (``ServingModel(fast=False)``); None for other policies."""
    from dsan.model.serving import ServingModel
    from dsan.policies.dsan import DSANScorer

    if not isinstance(scorer, DSANScorer):
        return None
    sm = scorer.serving
    return DSANScorer(ServingModel(sm.model, sm.workload, sm.manifest, fast=False),
                      scorer.workload)


def _dsan_rows(scorer: Scorer, snap: ClusterSnapshot, spec: PodSpec) -> dict[str, float]:
    """DSAN's changed-row featurize, batch featurizer vs the few-row path, same rows."""
    from dsan.rowfeatures import featurize_rows

    from dsan.features import featurize
    from dsan.policies.dsan import DSANScorer

    names = ("dsan: featurize 1 row, placements cached (batch featurizer)",
             "dsan: featurize 1 row, placements cached (few-row path)")
    if not isinstance(scorer, DSANScorer):
        return dict.fromkeys(names, float("nan"))
    sm = scorer.serving
    sm.logits(spec, snap, np.arange(len(snap), dtype=np.int64))
    cache, cols = sm._placements(snap), sm.embeddings.node_cols
    rows = itertools.cycle([np.array([i], dtype=np.int64) for i in range(0, len(snap), 7)])

    def batch(r: np.ndarray) -> object:
        return featurize(spec, snap, r, cache.workload, node_cols=cols[r], cache=cache)

    def few(r: np.ndarray) -> object:
        return featurize_rows(spec, snap, r, cols[r], cache)

    return {names[0]: best_us(batch, lambda: next(rows)),
            names[1]: best_us(few, lambda: next(rows))}


def measure(n: int, policy: str) -> dict[str, float]:
    w = world(n, policy)
    svc, cache, names, spec = w.service, w.service.cache, w.names, w.spec
    pub = cache.snapshot()
    idx, snap = pub.index, pub.snap
    rows = np.arange(len(names))
    keys = itertools.cycle([f"bench-uid-{i}" for i in range(VARIANTS)])
    bodies = itertools.cycle([json.dumps({"Pod": pod(i), "Nodes": None,
                                          "NodeNames": names}).encode()
                              for i in range(VARIANTS)])
    body = next(bodies)
    reqs = itertools.cycle([scorer_pb2.ScoreRequest(
        pod=scorer_pb2.Pod(name=f"bench-{i}", namespace="default", uid=f"bench-uid-{i}",
                           requests={"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
                           annotations={"dsan.io/gpu-milli": "500"}),
        node_names=names).SerializeToString() for i in range(VARIANTS)])
    # The same requests as the DSANScore plugin sends them: rows of the sidecar's node table.
    table = svc.cache.snapshot()
    row_bytes = np.fromiter(map(table.index.__getitem__, names), dtype="<u4",
                            count=len(names)).tobytes()
    row_reqs = itertools.cycle([scorer_pb2.ScoreRequest(
        pod=scorer_pb2.Pod(name=f"bench-{i}", namespace="default", uid=f"bench-uid-{i}",
                           requests={"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
                           annotations={"dsan.io/gpu-milli": "500"}),
        node_indices=row_bytes, node_table_epoch=table.table_epoch).SerializeToString()
        for i in range(VARIANTS)])
    raw = svc.engine.scorer.score(spec, snap, rows)
    scores10 = normalize(raw, 10)
    app, handler = ExtenderApp(svc), ScoreHandler(svc)

    def lookup(ns: list[str]) -> object:
        return np.fromiter(map(idx.get, ns, repeat(-1)), dtype=np.int64, count=len(ns))

    # Winners spread over the cluster, as in the benchmark: every assumption changes a row.
    winners = itertools.cycle(names[:: max(1, len(names) // 61)])

    def assumed_snapshot() -> object:
        cache.assume(next(keys), spec, next(winners))
        return cache.snapshot().snap

    def assumed_pub() -> object:
        # As the engine does it: under the scoring lock, patching the published snapshot.
        with cache.scoring_lock:
            cache.assume(next(keys), spec, next(winners), patch_published=True)
        return cache.snapshot()

    eng = svc.engine
    key = eng.classes.key(spec)
    ref = _reference_scorer(eng.scorer)

    def refresh() -> object:
        cache._touch()  # as after an assumption: the next snapshot() republishes
        return cache.snapshot()

    def reply() -> object:  # as both servers serve: the assumption waits for settle()
        return svc.score("inprocess", spec, next(keys), names, 100, defer=True)

    dsan = _dsan_rows(eng.scorer, snap, spec)

    return {
        "floor dot": best_us(lambda: int(np.argmax(w.vectors @ w.pod_vec))),
        "name lookup (hashed names)": best_us(lambda: lookup(names)),
        "name lookup (fresh names, as decoded)": best_us(
            lookup, lambda: [(s + " ")[:-1] for s in names]),
        "snapshot refresh after a change": best_us(refresh),
        "feasibility (dsan.core.filtering)": best_us(lambda: feasible(spec, snap)),
        "policy, uncached (snapshot unchanged)": best_us(
            lambda: svc.engine.scorer.score(spec, snap, rows)),
        "policy, uncached (after an assumption)": best_us(
            lambda s: svc.engine.scorer.score(spec, s, rows),
            lambda: assumed_snapshot()),
        "policy, class cache (after an assumption)": (best_us(
            lambda p: eng.classes.lookup(spec, key, p), assumed_pub)
            if key is not None and eng._cached else float("nan")),
        "dsan reference path, no head cache (snapshot unchanged)": (best_us(
            lambda: ref.score(spec, snap, rows)) if ref is not None else float("nan")),
        "dsan reference path, no head cache (after an assumption)": (best_us(
            lambda s: ref.score(spec, s, rows), lambda: assumed_snapshot())
            if ref is not None else float("nan")),
        "normalise": best_us(lambda: normalize(raw, 100)),
        "assume (republish next request)": best_us(
            lambda: cache.assume(next(keys), spec, next(winners))),
        "assume (patch the published snapshot)": best_us(lambda: assumed_pub()),
        "ScoringService.score": best_us(
            lambda: svc.score("inprocess", spec, next(keys), names, 100)),
        # setup runs untimed before each timed call: settle the previous reply / reply
        "ScoringService.score, deferred (reply only)": best_us(lambda _: reply(), svc.settle),
        "settle (deferred assumption + refresh)": best_us(lambda _: svc.settle(), reply),
        **dsan,
        "HTTP decode: orjson.loads": best_us(lambda: orjson.loads(body)),
        "HTTP decode: stdlib json.loads": best_us(lambda: json.loads(body)),
        "HTTP decode: parse_args (orjson + checks)": best_us(lambda: parse_args(body)),
        "HTTP encode (orjson + numpy)": best_us(lambda: encode_priorities(names, scores10)),
        "HTTP encode (stdlib format per node)": best_us(lambda: "[" + ",".join(map(
            '{{"Host":{},"Score":{}}}'.format, map(encode_basestring, names),
            scores10.tolist())) + "]"),
        "ExtenderApp.prioritize (no socket)": best_us(lambda: app.prioritize(next(bodies))),
        "gRPC handler (no socket)": best_us(lambda: handler._score(next(reqs))),
        "gRPC handler, node-table rows (no socket)": best_us(
            lambda: handler._score(next(row_reqs))),
    }


def main(argv: list[str]) -> int:
    out = {f"{policy} {n}": measure(n, policy) for policy in POLICIES for n in SIZES}
    text = json.dumps(out, indent=1)
    if argv:
        Path(argv[0]).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
