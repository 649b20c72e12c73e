"""bench/throughput_cluster.py's latency line, read from a real sidecar's /metrics text."""

from __future__ import annotations

from bench.throughput_cluster import latency_summary
from sidecar.metrics import SidecarMetrics


def test_summary_gives_quantile_bounds_and_requests_behind_the_settle_per_api() -> None:
    m = SidecarMetrics()
    for _ in range(98):
        m.observe("http", 1e-5, 1e-4, 2e-4, 100)
    m.observe("http", 1e-5, 1e-4, 2e-3, 100)
    m.observe("http", 1e-5, 1e-4, 2e-3, 100)
    for _ in range(7):
        m.behind_settle_of["http"].inc()
    text = latency_summary(m.exposition().decode())
    assert text == ("http 100 requests, p50 <= 0.25 ms, p99 <= 2.5 ms, 7 sent before the "
                    "previous reply's settle ended")
    m.observe("grpc", 1e-5, 1e-4, 4e-4, 100)
    assert latency_summary(m.exposition().decode()).endswith(
        "grpc 1 requests, p50 <= 0.5 ms, p99 <= 0.5 ms, 0 sent before the previous reply's "
        "settle ended (counted through the relay only)")
