"""The chart's Grafana dashboard (charts/dsan-scheduler/dashboards/dsan.json) against real data:
a real Prometheus scrapes a sidecar's metrics listener and a fake-GPU device plugin's /metrics,
and every panel's query runs through Prometheus' API. A query that does not parse, or names
a metric neither component exports (a rename on either side), fails here."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import kubeobjects as ko
from tests.support.procs import Proc, free_port, http_ok, wait_until
from tests.support.prometheus import PrometheusServer, require_prometheus

pytestmark = pytest.mark.integration
DASHBOARD = Path(__file__).resolve().parents[3] / "charts" / "dsan-scheduler" / "dashboards" \
    / "dsan.json"
#: What Grafana substitutes, as it would for "All namespaces" on a short time range.
VARIABLES = {"$namespace": ".*", "$__rate_interval": "15s", "$__range": "5m"}
#: Queries that are empty while all is well: refusals (filtered > 0) and unhealthy GPUs.
EMPTY_WHEN_HEALTHY = ("dsan_sidecar_request_errors_total", "dsan_gpu_healthy")


def _exprs(dash: dict[str, Any]) -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in dash["panels"] for t in p.get("targets", [])]


def test_the_dashboard_is_grafana_json_with_a_datasource_variable() -> None:
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] == "dsan-scheduler" and dash["schemaVersion"] >= 36
    names = [v["name"] for v in dash["templating"]["list"]]
    assert names[:2] == ["datasource", "namespace"]
    for p in dash["panels"]:
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "${datasource}" and p["targets"], p["title"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    titles = {p["title"] for p in dash["panels"]}
    for what in ("Score latency", "Fallbacks", "Cache age", "Decisions per node", "GPU"):
        assert any(what in t for t in titles), what


def test_every_panel_query_runs_on_the_components_real_metrics(
    sidecar_factory: Any, tmp_path: Path
) -> None:
    require_prometheus()
    sc, _ = sidecar_factory(n=20, metrics_address="127.0.0.1", metrics_port=0,
                            pods=[ko.pod(f"p{i}", gpus=1) for i in range(10)])
    names = [f"node-{i:05d}" for i in range(20)]
    with httpx.Client() as c:
        for i in range(10):
            r = c.post(sc.extender_url + "/prioritize", json={
                "Pod": ko.pod(f"p{i}", gpus=1), "Nodes": None, "NodeNames": names})
            assert r.status_code == 200
    dp_port = free_port()
    agent = Proc("dsan deviceplugin (fake)", [
        sys.executable, "-m", "dsan.cli", "deviceplugin", "--backend", "fake",
        "--node-name", "gpu-node-1", "--plugin-dir", str(tmp_path / "dp"),
        "--metrics-addr", "127.0.0.1", "--metrics-port", str(dp_port), "--no-crd",
        "--sample-interval", "0.2"], tmp_path / "deviceplugin.log").start()
    prom = None
    try:
        (tmp_path / "dp").mkdir()
        wait_until("the device plugin's /metrics", lambda: http_ok(
            f"http://127.0.0.1:{dp_port}/metrics"), 30, [agent])
        assert sc.metrics_http is not None
        prom = PrometheusServer.start(
            [f"127.0.0.1:{sc.metrics_http.port}", f"127.0.0.1:{dp_port}"], tmp_path / "prom")
        prom.wait_for_targets_up()
        # Two scrapes of each target at least, so rate() and increase() have their samples.
        prom.wait_for('count_over_time(up[1m]) >= 3')
        exported = {s["metric"]["__name__"] for s in prom.query(
            '{__name__=~"dsan_.+|DCGM_.+"}')}
        dash = json.loads(DASHBOARD.read_text())
        for title, expr in _exprs(dash):
            used = set(re.findall(r"\b(dsan_[a-z_]+|DCGM_[A-Z_]+)\b", expr))
            missing = {m for m in used if m not in exported}
            assert not missing, f"panel {title!r} names metrics nobody exports: {missing}"
            q = expr
            for var, value in VARIABLES.items():
                q = q.replace(var, value)
            result = prom.query(q)  # raises on a query Prometheus cannot parse
            if not any(m in expr for m in EMPTY_WHEN_HEALTHY):
                assert result, f"panel {title!r}: no data for {q}"
        decided = prom.query('sum by (node) (dsan_sidecar_decisions_total)')
        assert sum(float(s["value"][1]) for s in decided) == 10
    finally:
        if prom is not None:
            prom.stop()
        agent.stop()
