"""Reclamation on a real control plane: kube-scheduler v1.36's DefaultPreemption asks the
sidecar's preempt verb which candidate's victims to evict.

The real sidecar (`dsan serve --reclaimer=protect-latency`: never a web pod) sits behind a
recording proxy; a second kube-scheduler runs scheduler-config/dsan-scheduler.yaml (with its
``preemptVerb``) against it. Low-priority pods are bound straight to kwok nodes; a
high-priority pod for dsan-scheduler then fits only by preemption.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, watch

from dsan.api import types as t
from tests.support.controlplane import SCHEDULER_CONFIG_DIR, ControlPlane
from tests.support.procs import eventually
from tests.support.sidecar import RecordingProxy, Sidecar
from tests.support.workload import NodeShape, add_nodes, node_manifest, pod_manifest

pytestmark = pytest.mark.e2e
LOW, HIGH = "dsan-e2e-low", "dsan-e2e-high"
PRIORITY = {LOW: 100, HIGH: 1000}


class Stack:
    def __init__(self, cp: ControlPlane, core: Any, proxy: RecordingProxy) -> None:
        self.cp, self.core, self.proxy = cp, core, proxy
        #: Priority of every pod this module created, by UID (as admission resolved it).
        self.priority_of: dict[str, int] = {}

    def nodes(self, names: list[str], label: str, cpu: int = 4) -> None:
        sel = {"dsan.io/e2e": label}
        add_nodes(self.core, [node_manifest(n, NodeShape(cpu=cpu, gpus=0), sel) for n in names],
                  f"dsan.io/e2e={label}")

    def pod(self, ns: str, name: str, prio: str, cpu: str, node: str | None = None,
            label: str | None = None, **ann: str) -> Any:
        """A pod of priority class ``prio``: bound straight to ``node``, or pending for
        dsan-scheduler on the nodes of ``label``."""
        p = pod_manifest(name, scheduler=None if node else t.SCHEDULER_NAME, cpu=cpu,
                         memory="100Mi", annotations=ann,
                         node_selector=None if node else {"dsan.io/e2e": str(label)})
        p["spec"]["priorityClassName"] = prio
        if node:
            p["spec"]["nodeName"] = node
        created = self.core.create_namespaced_pod(ns, p)
        self.priority_of[created.metadata.uid] = created.spec.priority
        return created


class Deletions:
    """Every pod of one namespace that was ever marked for deletion or deleted, by name."""

    def __init__(self, core: Any, ns: str) -> None:
        self.seen: set[str] = set()
        self._w = watch.Watch()
        rv = core.list_namespaced_pod(ns).metadata.resource_version

        def run() -> None:
            with contextlib.suppress(Exception):  # ends when stopped
                for ev in self._w.stream(core.list_namespaced_pod, ns, resource_version=rv):
                    pod = ev["object"]
                    if ev["type"] == "DELETED" or pod.metadata.deletion_timestamp:
                        self.seen.add(pod.metadata.name)

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def saw(self, *names: str, timeout: float = 20.0) -> set[str]:
        """Wait until every one of ``names`` was seen deleted; what was seen. The watch runs
        on its own thread and may lag the bind the caller just observed (a loaded machine)."""
        try:
            eventually("deletions seen", lambda: set(names) <= self.seen, timeout)
        except AssertionError:
            raise AssertionError(f"deletions of {sorted(names)} not seen within {timeout} s; "
                                 f"seen: {sorted(self.seen)}") from None
        return set(self.seen)

    def stop(self) -> None:
        self._w.stop()


@pytest.fixture(scope="module")
def stack(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[Stack]:
    work = tmp_path_factory.mktemp("dsan-preempt")
    sidecar = Sidecar(control_plane.kubeconfig, work, policy="bestfit",
                      extra_args=("--reclaimer=protect-latency",)).start()
    try:
        with RecordingProxy(sidecar.http_port) as proxy, control_plane.api_client() as api:
            sched: Any = client.SchedulingV1Api(api)
            for name, value in PRIORITY.items():
                with contextlib.suppress(client.exceptions.ApiException):  # already there
                    sched.create_priority_class({"apiVersion": "scheduling.k8s.io/v1",
                                                 "kind": "PriorityClass",
                                                 "metadata": {"name": name}, "value": value})
            control_plane.start_scheduler("dsan-preempt",
                                          SCHEDULER_CONFIG_DIR / "dsan-scheduler.yaml",
                                          extender_url=proxy.url)
            yield Stack(control_plane, client.CoreV1Api(api), proxy)
            control_plane.stop_scheduler("dsan-preempt")
    finally:
        sidecar.stop()


def _until(what: str, probe: Any, timeout: float = 60.0) -> Any:
    return eventually(what, probe, timeout)


def _calls_for(stack: Stack, name: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    with stack.proxy._lock:
        return [(a, r) for a, r in stack.proxy.preempts if a["Pod"]["metadata"]["name"] == name]


def _alive(core: Any, ns: str, name: str, uid: str) -> bool:
    try:
        p = core.read_namespaced_pod(name, ns)
    except client.exceptions.ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return bool(p.metadata.uid == uid and p.metadata.deletion_timestamp is None)


def test_the_best_effort_pod_is_evicted_and_the_web_pod_never_is(stack: Stack) -> None:
    """Kubernetes alone would evict the one web pod (sum of victim priorities 100 against
    200); the protecting reclaimer picks the node of two batch pods."""
    ns = "e2e-preempt-web"
    stack.cp.ensure_namespace(ns)
    stack.nodes(["pw-0", "pw-1"], "preempt-web")
    deletions = Deletions(stack.core, ns)
    try:
        web = stack.pod(ns, "web", LOW, "4", node="pw-0", **{t.ANNOTATION_TASK_TYPE: "web"})
        for name in ("batch-a", "batch-b"):
            stack.pod(ns, name, LOW, "2", node="pw-1", **{t.ANNOTATION_TASK_TYPE: "batch"})
        time.sleep(1.0)  # the sidecar's informer sees the victims before they are proposed
        stack.pod(ns, "urgent", HIGH, "4", label="preempt-web")
        bound = _until("the urgent pod bound", lambda: stack.core.read_namespaced_pod(
            "urgent", ns).spec.node_name)
        calls = _calls_for(stack, "urgent")
        assert calls, "kube-scheduler never called the preempt verb"
        args, reply = calls[0]
        # kube-scheduler proposed both nodes (the web node is its own pick) by UID only.
        assert set(args["NodeNameToMetaVictims"]) == {"pw-0", "pw-1"}, args
        assert args.get("NodeNameToVictims") is None
        assert set(reply["NodeNameToMetaVictims"]) == {"pw-1"}, reply
        assert bound == "pw-1"
        deletions.saw("batch-a", "batch-b")
        assert "web" not in deletions.seen and _alive(stack.core, ns, "web", web.metadata.uid)
    finally:
        deletions.stop()


def test_evicting_an_elastic_executor_lowers_its_drivers_count(stack: Stack) -> None:
    ns = "e2e-preempt-elastic"
    stack.cp.ensure_namespace(ns)
    stack.nodes(["pe-0", "pe-1"], "preempt-elastic")
    # The driver (not a victim: the preemptor's priority) fills pe-1 but for one core.
    stack.pod(ns, "driver", HIGH, "3", node="pe-1", **{t.ANNOTATION_DESIRED_MEMBERS: "3"})
    member = {t.ANNOTATION_TASK_TYPE: "batch", t.ANNOTATION_ELASTIC: "true",
              t.ANNOTATION_WORKLOAD_OWNER: "driver", t.ANNOTATION_LOST_SECONDS: "30"}
    for i in range(2):
        stack.pod(ns, f"exec-{i}", LOW, "2", node="pe-0", **member)
    time.sleep(1.0)
    deletions = Deletions(stack.core, ns)
    try:
        stack.pod(ns, "needs-room", HIGH, "2", label="preempt-elastic")
        bound = _until("the pod bound", lambda: stack.core.read_namespaced_pod(
            "needs-room", ns).spec.node_name)
        assert bound == "pe-0"
        assert _calls_for(stack, "needs-room"), "kube-scheduler never called the preempt verb"
        _until("an executor's deletion seen", lambda: deletions.seen & {"exec-0", "exec-1"})
        evicted = deletions.seen & {"exec-0", "exec-1"}
        assert len(evicted) == 1, deletions.seen
        _until("the driver's desired count lowered", lambda: stack.core.read_namespaced_pod(
            "driver", ns).metadata.annotations[t.ANNOTATION_DESIRED_MEMBERS] == "2", 20)
        assert "driver" not in deletions.seen
    finally:
        deletions.stop()


def test_no_victim_ever_has_the_preemptors_priority(stack: Stack) -> None:
    """Pods of the preemptor's own priority fill the nodes: nothing is evicted and the pod
    waits. Over every preempt call of this module, each returned victim had a lower
    priority than its preemptor."""
    ns = "e2e-preempt-equal"
    stack.cp.ensure_namespace(ns)
    stack.nodes(["pq-0", "pq-1"], "preempt-equal")
    for i in range(2):
        stack.pod(ns, f"peer-{i}", HIGH, "4", node=f"pq-{i}")
    deletions = Deletions(stack.core, ns)
    try:
        stack.pod(ns, "same", HIGH, "4", label="preempt-equal")
        time.sleep(5.0)
        pod = stack.core.read_namespaced_pod("same", ns)
        assert not pod.spec.node_name and not deletions.seen, deletions.seen
    finally:
        deletions.stop()
    with stack.proxy._lock:
        calls = list(stack.proxy.preempts)
    assert calls, "no preempt call in this module"
    for args, reply in calls:
        mine = args["Pod"]["spec"]["priority"]
        for node, victims in reply["NodeNameToMetaVictims"].items():
            for v in victims["Pods"]:
                assert stack.priority_of[v["UID"]] < mine, (node, v, mine)
