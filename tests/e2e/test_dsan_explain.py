"""Decisions visible in the cluster, on a real control plane: a pod the real kube-scheduler
placed through the real sidecar (`dsan serve`, the shipped DSAN model) gets an
events.k8s.io/v1 Event and the dsan.io/scored-by annotation, and the sidecar's
/explain answers for it with impacts adding up to the served logit minus the base value;
``dsan explain pod --kubeconfig`` prints it. The recorder's writer passes its contract against
the real apiserver.

CPU-only nodes: kwok nodes send no GPU telemetry, so GPU nodes would be scored by the
fallback policy (FGD) and the explanation would be FGD's terms, not DSAN's SHAP.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from dsan.api import types as t
from dsan.cli import main
from sidecar.recorder import KubeClusterWriter
from tests.support.controlplane import SCHEDULER_CONFIG_DIR, ControlPlane
from tests.support.procs import eventually
from tests.support.sidecar import RecordingProxy, Sidecar
from tests.support.workload import BindingWatch, add_nodes, create_all, fleet, pod_manifest
from tests.unit.sidecar.test_recorder import check_writer_contract

pytestmark = pytest.mark.e2e
NS, SEL = "e2e-explain", {"dsan.io/e2e": "explain"}


class Stack:
    def __init__(self, cp: ControlPlane, api: Any, sidecar: Sidecar,
                 proxy: RecordingProxy) -> None:
        self.cp, self.api, self.sidecar, self.proxy = cp, api, sidecar, proxy
        self.core = client.CoreV1Api(api)

    def events(self, pod: str) -> list[dict[str, Any]]:
        """events.k8s.io/v1 Events regarding ``pod`` in NS, as JSON."""
        resp = client.EventsV1Api(self.api).list_namespaced_event(
            NS, field_selector=f"regarding.name={pod}", _preload_content=False)
        return list(json.loads(resp.data)["items"])

    def pod(self, name: str) -> dict[str, Any]:
        resp = self.core.read_namespaced_pod(name, NS, _preload_content=False)
        return dict(json.loads(resp.data))


@pytest.fixture(scope="module")
def stack(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[Stack]:
    work = tmp_path_factory.mktemp("dsan-explain")
    sidecar = Sidecar(control_plane.kubeconfig, work, policy=None).start()  # the shipped DSAN
    try:
        with RecordingProxy(sidecar.http_port) as proxy, control_plane.api_client() as api:
            control_plane.start_scheduler(
                "dsan", SCHEDULER_CONFIG_DIR / "dsan-scheduler.yaml", extender_url=proxy.url)
            control_plane.ensure_namespace(NS)
            s = Stack(control_plane, api, sidecar, proxy)
            add_nodes(s.core, fleet(5, prefix="expl", gpus=0, labels=SEL),
                      "dsan.io/e2e=explain")
            yield s
            control_plane.stop_scheduler("dsan")
    finally:
        sidecar.stop()


def _eventually(what: str, probe: Any, timeout: float = 20.0) -> Any:
    return eventually(what, probe, timeout)


def test_a_placed_pod_gets_an_event_an_annotation_and_an_explanation(
        stack: Stack, capsys: pytest.CaptureFixture[str]) -> None:
    # a busy node first (bound directly: no scheduler), so the nodes differ
    busy = pod_manifest("busy", cpu="24", memory="64Gi")
    busy["spec"]["nodeName"] = "expl-0002"
    stack.core.create_namespaced_pod(NS, busy)
    time.sleep(1.0)  # the sidecar's informer sees it before the score
    watch = BindingWatch(stack.core, NS).start()
    try:
        create_all(lambda p: stack.core.create_namespaced_pod(NS, p), [pod_manifest(
            "explained", scheduler=t.SCHEDULER_NAME, cpu="2", memory="4Gi",
            node_selector=SEL)])
        node, _ = watch.wait(["explained"], 60)["explained"]
    finally:
        watch.stop()
    scores = stack.proxy.scores["explained"]
    best = max(scores, key=lambda n: scores[n])
    assert list(scores.values()).count(scores[best]) == 1  # the reply names one best node
    assert scores[node] == scores[best], (node, scores)

    # the Event: which node won, its score, the runner-up, the policy@version
    [ev] = _eventually("the sidecar's Event", lambda: [
        e for e in stack.events("explained") if e["reason"] == t.EVENT_REASON_SCORED])
    assert ev["reportingController"] == t.EVENT_CONTROLLER and ev["type"] == "Normal"
    assert ev["regarding"]["uid"] == stack.pod("explained")["metadata"]["uid"]
    note = ev["note"]
    assert f"best {best} 10/10" in note and "runner-up " in note and f"bound to {node}" in note
    # the annotation names the policy and the model version
    scored_by = _eventually("the annotation", lambda: stack.pod("explained")["metadata"].get(
        "annotations", {}).get(t.ANNOTATION_SCORED_BY))
    policy, _, version = scored_by.partition("@")
    assert policy == "dsan" and version, scored_by
    assert f"{scored_by} scored" in note

    # the explanation: SHAP of the served logit, additive
    with urllib.request.urlopen(f"{stack.sidecar.url}/explain/{NS}/explained",
                                timeout=60) as r:
        doc = json.loads(r.read())
    assert doc["task_id"] == f"{NS}/explained" and doc["recommended_node"] == best
    assert doc["policy"] == scored_by and doc["bound_node"] == node
    factors = doc["decision_factors"]
    assert {"feature", "value", "unit", "impact"} <= set(factors[0])
    assert abs(sum(f["impact"] for f in factors) - (doc["score"] - doc["base_value"])) < 1e-6

    # the command line, with the cluster's view of the pod
    assert main(["explain", "pod", f"{NS}/explained", "--kubeconfig",
                 str(stack.cp.kubeconfig), "--sidecar", stack.sidecar.url]) == 0
    out = capsys.readouterr().out
    assert f"bound to {node} by {t.SCHEDULER_NAME}" in out and f"recommended {best}" in out


def test_the_kube_writer_passes_the_writer_contract(stack: Stack) -> None:
    pod = pod_manifest("contract", annotations={"keep": "me"})
    pod["spec"]["nodeName"] = "expl-0000"
    uid = stack.core.create_namespaced_pod(NS, pod).metadata.uid

    def read_back(ns: str, name: str) -> tuple[list[dict[str, Any]], dict[str, str]]:
        return stack.events(name), stack.pod(name)["metadata"]["annotations"]

    check_writer_contract(KubeClusterWriter(stack.api), NS, "contract", uid, read_back)
