"""GET /explain on a whole sidecar on loopback (real HTTP server, fake cluster): a pod scored
through the extender API and bound gets its Event and annotation (fake writer) and an
explanation whose impacts add up; ``dsan explain pod`` prints it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from dsan.api import types as t
from dsan.cli import main
from sidecar.app import Sidecar, load_policies
from sidecar.cache import GraphCache
from sidecar.config import SidecarConfig
from tests.integration.sidecar.harness import GatedView
from tests.support import kubeobjects as ko
from tests.support.fakes import FakeClusterWriter, idle

pytestmark = pytest.mark.integration
NODES = ko.cluster(16, gpu_every=4)
NAMES = [n["metadata"]["name"] for n in NODES]


@pytest.fixture
def stack() -> Iterator[tuple[Sidecar, GatedView, FakeClusterWriter]]:
    cfg = SidecarConfig(http_port=0, grpc_port=-1, policy="dsan", gc_freeze_after_sync=False)
    views: list[GatedView] = []

    def factory(cache: GraphCache) -> GatedView:
        views.append(GatedView(cache, NODES))
        return views[0]

    writer = FakeClusterWriter()
    sc = Sidecar(cfg, view_factory=factory, policies=load_policies(cfg), writer=writer)
    sc.start()
    views[0].open()
    assert sc.wait_ready(5)
    for i, n in enumerate(NODES):  # fresh telemetry: DSAN, not its fallback, scores GPU nodes
        if n["status"]["allocatable"].get(t.RESOURCE_GPU):
            views[0].apply("gputelemetries", "ADDED", ko.telemetry(
                n["metadata"]["name"], util=[[float((i * 13 + g) % 100)] * 4 for g in range(8)]))
    try:
        yield sc, views[0], writer
    finally:
        sc.stop()


def base(sc: Sidecar) -> str:
    return f"http://127.0.0.1:{sc.http.port}"


def place(sc: Sidecar, view: GatedView, name: str, **shape: Any) -> str:
    """Create a pending pod, score it through the extender API, bind it where it scored best."""
    pod = ko.pod(name, uid=f"uid-{name}", **shape)
    view.apply("pods", "ADDED", pod)
    r = httpx.post(sc.extender_url + "/prioritize",
                   json={"Pod": pod, "Nodes": None, "NodeNames": NAMES})
    assert r.status_code == 200
    best = max(r.json(), key=lambda e: e["Score"])["Host"]
    view.apply("pods", "MODIFIED", ko.pod(name, uid=f"uid-{name}", node_name=best,
                                          phase="Running", **shape))
    return best


def test_a_placed_pod_gets_its_event_annotation_and_explanation(
        stack: tuple[Sidecar, GatedView, FakeClusterWriter]) -> None:
    sc, view, writer = stack
    node = place(sc, view, "web", cpu="8", memory="32Gi")
    r = httpx.get(base(sc) + "/explain/default/web", timeout=30)
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["task_id"] == "default/web" and doc["recommended_node"] == node
    assert doc["policy"].startswith("dsan@")
    total = sum(f["impact"] for f in doc["decision_factors"])
    assert abs(total - (doc["score"] - doc["base_value"])) < 1e-6
    assert sc.recorder is not None and idle(sc.recorder, 5)
    [(ns, ev)] = writer.events
    assert ns == "default" and f"best {node} 10/10" in ev["note"]
    assert writer.annotations[("default", "web")] == {t.ANNOTATION_SCORED_BY: doc["policy"]}
    metrics = httpx.get(base(sc) + "/metrics").text
    assert 'dsan_sidecar_explanations_total{result="ok"} 1.0' in metrics
    assert 'dsan_sidecar_decisions_recorded_total{what="event"} 1.0' in metrics


def test_refusals_are_json_with_a_status(
        stack: tuple[Sidecar, GatedView, FakeClusterWriter]) -> None:
    sc, _, _ = stack
    r = httpx.get(base(sc) + "/explain/default/nobody")
    assert r.status_code == 404 and "has not scored pod default/nobody" in r.json()["error"]
    r = httpx.get(base(sc) + "/explain/too/many/parts")
    assert r.status_code == 400 and "/explain/<namespace>/<pod>" in r.json()["error"]
    assert httpx.get(base(sc) + "/healthz").status_code == 200  # still serving


def test_dsan_explain_pod_prints_the_sidecars_explanation(
        stack: tuple[Sidecar, GatedView, FakeClusterWriter],
        capsys: pytest.CaptureFixture[str]) -> None:
    sc, view, _ = stack
    node = place(sc, view, "train", cpu="4", memory="16Gi", gpus=1)
    assert main(["explain", "pod", "default/train", "--sidecar", base(sc), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["recommended_node"] == node
    assert main(["explain", "pod", "default/train", "--sidecar", base(sc), "--top-k", "5"]) == 0
    out = capsys.readouterr().out
    assert f"recommended {node} (10/10)" in out and "(124 more)" in out
    assert main(["explain", "pod", "default/none", "--sidecar", base(sc)]) == 1
    assert "answered 404" in capsys.readouterr().err
