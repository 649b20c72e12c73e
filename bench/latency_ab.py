"""Before/after in one time window: the sidecar's per-request cost in two source trees.

    git archive <old-commit> | tar -x -C /tmp/old
    for t in /tmp/old . /tmp/old .; do
        nice -n 10 .venv/bin/python bench/latency_ab.py $t > out/ab-$(basename $t)-$RANDOM.json
    done

Each run builds bench/test_score_latency.py's worlds from the given tree (its own code on
``sys.path`` first) for the policies in ``$DSAN_AB_POLICIES`` (default ``dsan``) and the
sizes in ``$DSAN_BENCH_SIZES``, and times over the same rotated candidate lists, 600 calls
each (min, p50 and p99 in microseconds, as JSON on stdout, with the 1-minute load average):

* ``ScoringService.score``: score and assume the winner inline, as before deferral; every
  call also pays for what the previous assumption changed;
* ``reply (deferred)``: ``score(..., defer=True)``, what a client waits for when the sidecar
  settles after the reply (both servers do); ``settle`` is then timed alone, and
  ``reply + settle`` is the server's busy time per request (trees without a deferred
  assumption, b2bc440 and older: the inline call, and a no-op settle);
* ``ExtenderApp.prioritize`` and the ``gRPC handler`` (no socket; each settled after the
  call, outside the timing, as the servers do after the reply).

Alternating the trees spreads the shared machine's load over both; docs/results quote the
best of the runs.
"""

from __future__ import annotations

import inspect
import itertools
import json
import os
import sys
import timeit
from collections.abc import Callable

TREE = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
sys.path[:0] = [TREE, os.path.join(TREE, "bench")]
os.environ["DSAN_BENCH_POLICIES"] = os.environ.get("DSAN_AB_POLICIES", "dsan")

from test_score_latency import POLICIES, SIZES, VARIANTS, World, pod  # noqa: E402

from dsan.api.gen.scorer_v1 import scorer_pb2  # noqa: E402
from sidecar.extender import ExtenderApp  # noqa: E402
from sidecar.grpc_server import ScoreHandler  # noqa: E402

ROUNDS = 600


def stat(fn: Callable[[], object], after: Callable[[], object] | None = None) -> list[float]:
    """min, p50, p99 (us) of ``fn``; ``after`` runs between calls, untimed."""
    for _ in range(20):
        fn()
        if after is not None:
            after()
    ts = []
    for _ in range(ROUNDS):
        ts.append(timeit.timeit(fn, number=1))
        if after is not None:
            after()
    ts.sort()
    return [round(ts[i] * 1e6, 1) for i in (0, ROUNDS // 2, int(ROUNDS * 0.99))]


def measure(policy: str, n: int) -> dict[str, list[float] | float]:
    w = World(n, policy)
    svc = w.service
    cands = [w.names[k:] + w.names[:k] for k in ((i * 7919) % n for i in range(VARIANTS))]
    calls = itertools.cycle(list(zip([f"bench-uid-{i}" for i in range(VARIANTS)], cands,
                                     strict=True)))

    def score() -> object:
        key, names = next(calls)
        return svc.score("inprocess", w.spec, key, names, 100)

    # Trees from before the deferred assumption (b2bc440 and older) have no settle(): there
    # the reply is the inline call and the settle a no-op.
    deferred = "defer" in inspect.signature(svc.score).parameters
    svc_settle: Callable[[], object] = getattr(svc, "settle", lambda: None)

    def reply() -> object:
        key, names = next(calls)
        if not deferred:
            return svc.score("inprocess", w.spec, key, names, 100)
        return svc.score("inprocess", w.spec, key, names, 100, defer=True)

    busy: list[float] = []

    def settle() -> None:
        busy.append(timeit.timeit(svc_settle, number=1))

    bodies = itertools.cycle([json.dumps({"Pod": pod(i), "Nodes": None,
                                          "NodeNames": cands[i]}).encode()
                              for i in range(VARIANTS)])
    reqs = itertools.cycle([scorer_pb2.ScoreRequest(
        pod=scorer_pb2.Pod(name=f"bench-{i}", namespace="default", uid=f"bench-uid-{i}",
                           requests={"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
                           annotations={"dsan.io/gpu-milli": "500"}),
        node_names=cands[i]).SerializeToString() for i in range(VARIANTS)])
    app, handler = ExtenderApp(svc), ScoreHandler(svc)
    out: dict[str, list[float] | float] = {"loadavg_1m": os.getloadavg()[0]}
    out["ScoringService.score"] = stat(score)
    out["reply (deferred)"] = stat(reply, settle)
    busy.sort()
    out["settle"] = [round(busy[i] * 1e6, 1) for i in (0, len(busy) // 2, int(len(busy) * .99))]
    out["ExtenderApp.prioritize"] = stat(lambda: app.prioritize(next(bodies)), svc_settle)
    out["gRPC handler"] = stat(lambda: handler._score(next(reqs)), svc_settle)
    out["loadavg_1m_after"] = os.getloadavg()[0]
    return out


def main() -> int:
    out = {f"{p} {n}": measure(p, n) for p in POLICIES for n in SIZES}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
