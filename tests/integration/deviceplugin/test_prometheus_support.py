"""The shared Prometheus helper against a plain prometheus_client endpoint."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from tests.support.prometheus import PrometheusServer, free_port, require_prometheus

pytestmark = pytest.mark.integration


def test_helper_scrapes_and_queries_a_target(tmp_path: Path) -> None:
    require_prometheus()
    registry = CollectorRegistry()
    Gauge("dsan_helper_probe", "probe", ["who"], registry=registry).labels("c").set(42.5)
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        with PrometheusServer.start([f"127.0.0.1:{port}"], tmp_path, scrape_interval="1s") as prom:
            up = prom.wait_for_targets_up()
            assert up[0]["labels"]["instance"] == f"127.0.0.1:{port}"
            assert prom.wait_for_value('dsan_helper_probe{who="c"}') == 42.5
            assert prom.query("dsan_helper_probe_absent") == []
        assert prom.process.poll() is not None  # stopped on exit
    finally:
        server.shutdown()
        thread.join(5)
