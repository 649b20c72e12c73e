"""DSAN's ``ls_headroom`` quota on a real control plane: kube-scheduler's extender ``filter``
call reaches the sidecar's quota, which keeps an elastic pod off the node of a web pod, and
the ``preempt`` verb drops the candidates the quota refuses (the preemption dry run never asks
the filter verb); the learned grant reaches a workload owner's desired-members.

The real sidecar serves the shipped DSAN model with its actions.json rewritten to
``ls_headroom=0.75`` (the shipped 0.93 needs a fuller node); a second kube-scheduler runs
scheduler-config/dsan-scheduler.yaml with the ``filterVerb`` the Helm chart adds for
``scheduler.extender.filter: true``, behind a proxy that records the filter replies.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client

from dsan.api import types as t
from tests.support.controlplane import SCHEDULER_CONFIG_DIR, ControlPlane
from tests.support.procs import eventually
from tests.support.sidecar import RecordingProxy, Sidecar, model_with_headroom
from tests.support.workload import NodeShape, add_nodes, node_manifest, pod_manifest

pytestmark = pytest.mark.e2e
NS, LABEL = "e2e-quota", "quota"
SEL = {"dsan.io/e2e": LABEL}
# A (the web pod's node) sorts first: on the sidecar's equal scores the lowest name wins.
A, B = "quota-a", "quota-b"
HEADROOM = 0.75


class Stack:
    def __init__(self, core: Any, sidecar: Sidecar, proxy: RecordingProxy) -> None:
        self.core, self.sidecar, self.proxy = core, sidecar, proxy

    def pod(self, name: str, cpu: str, ann: dict[str, str], node: str | None = None,
            affinity: dict[str, Any] | None = None) -> dict[str, Any]:
        """A pod bound straight to ``node``, or pending for dsan-scheduler on this module's
        nodes."""
        p = pod_manifest(name, scheduler=None if node else t.SCHEDULER_NAME, cpu=cpu,
                         memory="100Mi", annotations=ann, node_selector=None if node else SEL)
        if node:
            p["spec"]["nodeName"] = node
        if affinity:
            p["spec"]["affinity"] = affinity
        self.core.create_namespaced_pod(NS, p)
        return p

    def bound(self, name: str) -> str:
        return str(eventually(f"{name} bound", lambda: self.core.read_namespaced_pod(
            name, NS).spec.node_name, 60))

    def filter_replies(self, name: str) -> list[dict[str, Any]]:
        with self.proxy._lock:
            return [r for a, r in self.proxy.filters if a["Pod"]["metadata"]["name"] == name]


@pytest.fixture(scope="module")
def stack(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[Stack]:
    work = tmp_path_factory.mktemp("dsan-quota")
    model = model_with_headroom(work / "model", HEADROOM)
    cfg = yaml.safe_load((SCHEDULER_CONFIG_DIR / "dsan-scheduler.yaml").read_text())
    for ext in cfg["extenders"]:
        ext["filterVerb"] = "filter"
        # An ignorable extender that times out is skipped, and the pod would land on the
        # refused node: on a loaded test host the shipped 100 ms is a race, not a check.
        ext["httpTimeout"] = "10s"
    sched_cfg = work / "dsan-scheduler-filter.yaml"
    sched_cfg.write_text(yaml.safe_dump(cfg))
    sidecar = Sidecar(control_plane.kubeconfig, work, policy="dsan",
                      extra_args=(f"--model-dir={model}",)).start()
    try:
        # "dsan" degrades to the fallback when the model does not load, which has no quota.
        info = re.search(r"dsan_sidecar_policy_info\{([^}]*)\}", sidecar.metrics())
        assert info is not None and 'policy="dsan"' in info.group(1), info
        with RecordingProxy(sidecar.http_port) as proxy, control_plane.api_client() as api:
            control_plane.start_scheduler("dsan-quota", sched_cfg, extender_url=proxy.url)
            try:
                control_plane.ensure_namespace(NS)
                core = client.CoreV1Api(api)
                add_nodes(core, [node_manifest(n, NodeShape(cpu=8, gpus=0), SEL)
                                 for n in (A, B)], f"dsan.io/e2e={LABEL}")
                yield Stack(core, sidecar, proxy)
            finally:
                control_plane.stop_scheduler("dsan-quota")
    finally:
        sidecar.stop()


def test_an_elastic_pod_keeps_off_the_web_pods_node_past_the_headroom(stack: Stack) -> None:
    """A web pod (2 of 8 cores) on A, a 2-core batch pod on B: the nodes are alike to DSAN
    (A wins the tie) and the elastic pod prefers A, yet (2 + 5) / 8 = 0.875 > 0.75 of A's
    cores, so the filter verb refuses A and it binds to B. A plain batch pod of the same size
    is refused A as well; a second web replica may still take it."""
    batch = {t.ANNOTATION_TASK_TYPE: "batch"}
    stack.pod("web", "2", {t.ANNOTATION_TASK_TYPE: "web"}, node=A)
    stack.pod("filler", "2", batch, node=B)
    # Quota-independent proof that the sidecar's cache holds both bound pods (and so the
    # web pod's count on A, from the same informer event): 7 cores fit neither node now.
    probe = pod_manifest("probe", cpu="7", memory="100Mi")
    eventually("the sidecar's cache saw the bound pods",
               lambda: set(stack.sidecar.filter(probe, [A, B])["FailedNodes"]) == {A, B}, 30)

    # Without the quota (ls_headroom 1.0) the pod binds to A; the preference makes that
    # margin kube-scheduler's own, not only the sidecar's tie-break by name.
    prefer_a = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "preference": {"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [A]}]}}]}}
    stack.pod("elastic", "5", {**batch, t.ANNOTATION_ELASTIC: "true"}, affinity=prefer_a)
    assert stack.bound("elastic") == B
    replies = stack.filter_replies("elastic")
    assert replies, "kube-scheduler never called the filter verb"
    for reply in replies:
        assert reply["NodeNames"] == [B], reply
        assert reply["FailedNodes"][A].startswith("dsan: the node's quota"), reply

    # B now has 7 of 8 cores requested: a pod of the same size fits only A. A plain batch pod
    # is held to the quota too; a second web replica is not (the quota keeps room for them).
    plain = pod_manifest("plain", cpu="5", memory="100Mi", annotations=batch)
    assert stack.sidecar.filter(plain, [A])["FailedNodes"][A].startswith("dsan: the node's quota")
    stack.pod("web2", "5", {t.ANNOTATION_TASK_TYPE: "web"}, affinity=prefer_a)
    assert stack.bound("web2") == A
    replies = stack.filter_replies("web2")
    assert replies and all(A in r["NodeNames"] for r in replies), replies


def test_a_node_the_quota_refuses_is_no_preemption_candidate(stack: Stack) -> None:
    """C: a 1-core web pod and a 6-core batch pod; D: batch pods of 4 and 3 cores; a 6-core
    urgent batch pod fits neither. kube-scheduler's preemption dry run never asks the filter
    verb, so it proposes both nodes; evicting C's one pod would lose the least work, but the
    urgent pod beside the web pod would take (1 + 6) / 8 = 0.875 > 0.75 of C's cores, so the
    preempt verb drops C and D's two pods make room."""
    sel = {"dsan.io/e2e": "quota-preempt"}
    add_nodes(stack.core, [node_manifest(n, NodeShape(cpu=8, gpus=0), sel)
                           for n in ("qp-c", "qp-d")], "dsan.io/e2e=quota-preempt")
    batch = {t.ANNOTATION_TASK_TYPE: "batch"}
    stack.pod("qp-web", "1", {t.ANNOTATION_TASK_TYPE: "web"}, node="qp-c")
    for name, cpu, node in (("qp-c-low", "6", "qp-c"), ("qp-d-low1", "4", "qp-d"),
                            ("qp-d-low2", "3", "qp-d")):
        stack.pod(name, cpu, batch, node=node)
    probe = pod_manifest("probe", cpu="2", memory="100Mi")
    eventually("the sidecar's cache saw the bound pods", lambda: set(stack.sidecar.filter(
        probe, ["qp-c", "qp-d"])["FailedNodes"]) == {"qp-c", "qp-d"}, 30)
    sched: Any = client.SchedulingV1Api(stack.core.api_client)
    with contextlib.suppress(client.exceptions.ApiException):  # another module made it
        sched.create_priority_class({"apiVersion": "scheduling.k8s.io/v1", "kind":
                                     "PriorityClass", "metadata": {"name": "dsan-e2e-high"},
                                     "value": 1000})
    urgent = pod_manifest("qp-urgent", scheduler=t.SCHEDULER_NAME, cpu="6", memory="100Mi",
                          annotations=batch, node_selector=sel)
    urgent["spec"]["priorityClassName"] = "dsan-e2e-high"
    stack.core.create_namespaced_pod(NS, urgent)
    assert stack.bound("qp-urgent") == "qp-d"
    with stack.proxy._lock:
        calls = [(a, r) for a, r in stack.proxy.preempts
                 if a["Pod"]["metadata"]["name"] == "qp-urgent"]
    assert calls, "kube-scheduler never called the preempt verb"
    args, reply = calls[0]
    assert set(args["NodeNameToMetaVictims"]) == {"qp-c", "qp-d"}, args
    assert set(reply["NodeNameToMetaVictims"]) == {"qp-d"}, reply
    m = stack.sidecar.metrics()
    assert 'dsan_sidecar_preempt_candidates_total{result="quota_refused"} 1.0' in m
    # C's batch pod was never evicted for a node the pod could not have had.
    assert stack.core.read_namespaced_pod("qp-c-low", NS).metadata.deletion_timestamp is None


def test_a_workload_owner_is_granted_dsans_learned_share_of_its_growth(stack: Stack) -> None:
    """A Spark-driver-like owner for dsan-scheduler declares 2..12 executors and no count: the
    sidecar writes the served model's grant into its desired-members (the shipped
    batch_growth, 0.90: 2 + round(0.90 x 10) = 11), through the real apiserver's JSON patch."""
    from dsan.model.artifact import DEFAULT_DIR
    from dsan.policies.dsan_actions import load_actions

    _, controller, _ = load_actions(DEFAULT_DIR)
    want = controller.grant("batch", 2, 12)
    assert 2 < want < 12  # a grant that is neither Kubernetes' "all" nor the minimum
    stack.pod("qp-driver", "1", {t.ANNOTATION_TASK_TYPE: "batch", t.ANNOTATION_MIN_MEMBERS: "2",
                                 t.ANNOTATION_MAX_MEMBERS: "12"})
    eventually("the driver granted its count", lambda: (stack.core.read_namespaced_pod(
        "qp-driver", NS).metadata.annotations or {}).get(t.ANNOTATION_DESIRED_MEMBERS)
        == str(want), 30)
    assert 'dsan_sidecar_elastic_grants_total{result="ok"} 1.0' in stack.sidecar.metrics()
