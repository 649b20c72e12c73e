"""The metrics listener (sidecar/extender.py's server without an extender) in a whole sidecar
on loopback: the three read-only paths on a port of their own, scoring never reachable
through it."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support import kubeobjects as ko

pytestmark = pytest.mark.integration


def test_metrics_healthz_readyz_on_their_own_port_follow_the_sidecar(
    sidecar_factory: Any,
) -> None:
    sc, view = sidecar_factory(ready=False, metrics_address="127.0.0.1", metrics_port=0,
                               pods=[ko.pod("p")])  # pending for the dsan-scheduler
    assert sc.metrics_http is not None and sc.metrics_http.port not in (0, sc.http.port)
    url = f"http://127.0.0.1:{sc.metrics_http.port}"
    with httpx.Client() as c:
        assert c.get(f"{url}/healthz").status_code == 200
        assert c.get(f"{url}/readyz").status_code == 503  # the informers have not synced
        view.open()
        assert sc.wait_ready(5)
        assert c.get(f"{url}/readyz").text == "ok"
        # A scored request shows up in the exposition served on this port.
        ext = sc.extender_url
        names = [f"node-{i:05d}" for i in range(5)]
        r = c.post(f"{ext}/prioritize",
                   json={"Pod": ko.pod("p"), "Nodes": None, "NodeNames": names})
        assert r.status_code == 200
        m = c.get(f"{url}/metrics")
        assert m.headers["content-type"].startswith("text/plain; version=0.0.4")
        assert 'dsan_sidecar_requests_total{api="http",verb="prioritize"} 1.0' in m.text
        assert "dsan_sidecar_cache_age_seconds" in m.text
        # The node it scored best is where it charged the pod: one decision there.
        best = max(r.json(), key=lambda h: h["Score"])["Host"]
        assert f'dsan_sidecar_decisions_total{{node="{best}"}} 1.0' in m.text
        assert c.head(f"{url}/metrics").status_code == 200


def test_the_metrics_port_never_scores(sidecar_factory: Any) -> None:
    sc, _ = sidecar_factory(metrics_address="127.0.0.1", metrics_port=0)
    url = f"http://127.0.0.1:{sc.metrics_http.port}"
    names = ["node-00000"]
    with httpx.Client() as c:
        r = c.post(f"{url}/dsan/prioritize",
                   json={"Pod": ko.pod("p"), "Nodes": None, "NodeNames": names})
        assert r.status_code == 405 and r.headers["allow"] == "GET, HEAD"
        assert c.get(f"{url}/dsan/prioritize").status_code == 404
    text = httpx.get(f"{sc.extender_url.rsplit('/', 1)[0]}/metrics").text
    assert 'dsan_sidecar_requests_total{api="http",verb="prioritize"} 0.0' in text


def test_no_listener_unless_configured(sidecar_factory: Any) -> None:
    sc, _ = sidecar_factory()
    assert sc.metrics_http is None
