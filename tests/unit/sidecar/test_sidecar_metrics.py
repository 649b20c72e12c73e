"""The per-request histograms (sidecar.metrics.RequestHistograms) export exactly what
prometheus_client's Histogram exports for the same observations: the same series, cumulative
buckets (values on a bound included), counts and sums; only the ``_created`` samples, which
nothing reads, are left out."""

from __future__ import annotations

import random

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.exposition import generate_latest

from sidecar.metrics import APIS, LATENCY_BUCKETS, NODE_BUCKETS, SidecarMetrics


def _lines(text: bytes, prefix: str) -> list[str]:
    return sorted(line for line in text.decode().splitlines()
                  if line.startswith(prefix) and "_created" not in line)


def test_exposition_equals_prometheus_clients_histograms() -> None:
    m = SidecarMetrics()
    reg = CollectorRegistry()
    lat = Histogram("dsan_sidecar_score_latency_seconds", "x", ["api", "phase"],
                    buckets=LATENCY_BUCKETS, registry=reg)
    cand = Histogram("dsan_sidecar_candidate_nodes", "x", ["api"], buckets=NODE_BUCKETS,
                     registry=reg)
    settle = Histogram("dsan_sidecar_settle_seconds", "x", buckets=LATENCY_BUCKETS,
                       registry=reg)
    for a in APIS:  # every series exported from the start, as bound label children were
        cand.labels(a)
        for p in ("featurize", "model", "total"):
            lat.labels(a, p)
    rnd = random.Random(7)
    values = [*LATENCY_BUCKETS, 0.0, 3.0, 1e-9]  # on a bound, below all, past all
    for i in range(400):
        api = rnd.choice(APIS[:2])
        f, mo, t = (rnd.choice(values) if i % 3 == 0 else rnd.expovariate(3e3)
                    for _ in range(3))
        n = rnd.choice([*NODE_BUCKETS, 0, 20000, rnd.randint(1, 6000)])
        m.observe(api, f, mo, t, n)
        lat.labels(api, "featurize").observe(f)
        lat.labels(api, "model").observe(mo)
        lat.labels(api, "total").observe(t)
        cand.labels(api).observe(n)
        if i % 2:
            m.observe_settle(t / 2)
            settle.observe(t / 2)
    ours, theirs = m.exposition(), generate_latest(reg)
    for name in ("dsan_sidecar_score_latency_seconds", "dsan_sidecar_candidate_nodes",
                 "dsan_sidecar_settle_seconds"):
        got, want = _lines(ours, name), _lines(theirs, name)
        assert got == want and len(want) > 20


def test_decisions_are_counted_per_node_beside_the_assumed_total() -> None:
    m = SidecarMetrics()
    for node in ("gpu-a", "gpu-b", "gpu-a"):
        m.decided(node)
    text = m.exposition().decode()
    assert 'dsan_sidecar_decisions_total{node="gpu-a"} 2.0' in text
    assert 'dsan_sidecar_decisions_total{node="gpu-b"} 1.0' in text
    assert "# TYPE dsan_sidecar_decisions_total counter" in text
    assert "dsan_sidecar_assumed_pods_total 3.0" in text
