"""A real Prometheus (Debian's package) scrapes the sidecar on loopback; the score-latency
histogram and the policy info come back through Prometheus' HTTP API."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import kubeobjects as ko
from tests.support.prometheus import PrometheusServer, PrometheusUnavailable, find_binary

pytestmark = pytest.mark.integration


def test_prometheus_reads_back_the_score_latency(sidecar_factory: Any, tmp_path: Path) -> None:
    if find_binary() is None:
        pytest.skip("prometheus binary not installed (make deps)")
    sc, _ = sidecar_factory(n=30)
    names = [f"node-{i:05d}" for i in range(30)]
    with httpx.Client() as c:
        for i in range(20):
            r = c.post(sc.extender_url + "/prioritize", json={
                "Pod": ko.pod(f"p{i}", gpus=1), "Nodes": None, "NodeNames": names})
            assert r.status_code == 200
    target = f"127.0.0.1:{sc.http.port}"
    try:
        prom = PrometheusServer.start([target], tmp_path / "prom")
    except PrometheusUnavailable as exc:
        pytest.skip(str(exc))
    try:
        prom.wait_for_targets_up()
        sel = 'api="http",phase="total"'
        count = prom.wait_for_value(f"dsan_sidecar_score_latency_seconds_count{{{sel}}}")
        assert count == 20
        p99 = prom.wait_for_value(
            f"histogram_quantile(0.99, sum by (le) (dsan_sidecar_score_latency_seconds_bucket"
            f"{{{sel}}}))")
        assert 0 < p99 < 1.0
        info = prom.wait_for("dsan_sidecar_policy_info")
        assert info[0]["metric"]["policy"] == "fgd"
    finally:
        prom.stop()
