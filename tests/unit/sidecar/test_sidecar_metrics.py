"""The sidecar's own counters: decisions per node beside the assumed total; refusal reasons."""

from __future__ import annotations

from sidecar.metrics import SidecarMetrics


def test_decisions_are_counted_per_node_beside_the_assumed_total() -> None:
    m = SidecarMetrics()
    for node in ("gpu-a", "gpu-b", "gpu-a"):
        m.decided(node)
    text = m.exposition().decode()
    assert 'dsan_sidecar_decisions_total{node="gpu-a"} 2.0' in text
    assert 'dsan_sidecar_decisions_total{node="gpu-b"} 1.0' in text
    assert "# TYPE dsan_sidecar_decisions_total counter" in text
    assert "dsan_sidecar_assumed_pods_total 3.0" in text


def test_every_refusal_reason_is_exported_from_the_start() -> None:
    """A series born at its first increment loses that increment to rate(): each reason a
    request can be refused for is exported at 0 before any request."""
    from sidecar.service import RequestError

    text = SidecarMetrics().exposition().decode()
    for reason in RequestError.CODES:
        for api in ("http", "grpc"):
            assert f'dsan_sidecar_request_errors_total{{api="{api}",reason="{reason}"}} 0.0' \
                in text, (api, reason)
