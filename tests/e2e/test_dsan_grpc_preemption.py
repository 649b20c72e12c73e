"""Reclamation in plugin mode on a real control plane: our kube-scheduler build runs
scheduler-config/dsan-scheduler-grpc.yaml, whose DSANPreemption (DefaultPreemption with the
choice of node made by the sidecar's gRPC Reclaim) replaces DefaultPreemption.

The real sidecar runs `dsan serve --reclaimer=protect-latency` (never a web pod), as in
test_dsan_preemption.py, which covers the HTTP extender's preempt verb the same way.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from dsan.api import types as t
from tests.e2e.test_dsan_preemption import PRIORITY, Deletions, Stack, _alive, _until
from tests.support.controlplane import SCHEDULER_CONFIG_DIR, ControlPlane
from tests.support.sidecar import Sidecar

pytestmark = pytest.mark.e2e
LOW, HIGH = list(PRIORITY)
SCHEDULER = "dsan-grpc-preempt"
FALLBACK = "DSAN sidecar unavailable, preempting without it"


class GrpcStack(Stack):
    def __init__(self, cp: ControlPlane, core: Any, sidecar: Sidecar) -> None:
        super().__init__(cp, core, proxy=None)  # type: ignore[arg-type]
        self.sidecar = sidecar

    def reclaim_calls(self) -> float:
        m = re.search(r'^dsan_sidecar_requests_total\{api="grpc",verb="reclaim"\} (\S+)$',
                      self.sidecar.metrics(), re.M)
        return float(m.group(1)) if m else 0.0

    def scheduler_log(self) -> str:
        proc, _ = self.cp.schedulers[SCHEDULER]
        return str(proc.log.read_text(errors="replace"))


@pytest.fixture(scope="module")
def stack(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[GrpcStack]:
    work = tmp_path_factory.mktemp("dsan-grpc-preempt")
    sidecar = Sidecar(control_plane.kubeconfig, work, policy="bestfit",
                      extra_args=("--reclaimer=protect-latency",)).start()
    try:
        with control_plane.api_client() as api:
            sched: Any = client.SchedulingV1Api(api)
            for name, value in PRIORITY.items():
                with contextlib.suppress(client.exceptions.ApiException):  # already there
                    sched.create_priority_class({"apiVersion": "scheduling.k8s.io/v1",
                                                 "kind": "PriorityClass",
                                                 "metadata": {"name": name}, "value": value})
            control_plane.start_scheduler(SCHEDULER,
                                          SCHEDULER_CONFIG_DIR / "dsan-scheduler-grpc.yaml",
                                          score_address=f"127.0.0.1:{sidecar.grpc_port}")
            yield GrpcStack(control_plane, client.CoreV1Api(api), sidecar)
            control_plane.stop_scheduler(SCHEDULER)
    finally:
        sidecar.stop()


def _web_and_batch(stack: GrpcStack, ns: str, prefix: str) -> Any:
    """One web pod fills <prefix>-0, two batch pods fill <prefix>-1 (all LOW); Kubernetes
    alone evicts the web pod (sum of victim priorities 100 against 200)."""
    stack.cp.ensure_namespace(ns)
    stack.nodes([f"{prefix}-0", f"{prefix}-1"], prefix)
    web = stack.pod(ns, "web", LOW, "4", node=f"{prefix}-0", **{t.ANNOTATION_TASK_TYPE: "web"})
    for name in ("batch-a", "batch-b"):
        stack.pod(ns, name, LOW, "2", node=f"{prefix}-1", **{t.ANNOTATION_TASK_TYPE: "batch"})
    return web


def test_the_best_effort_pod_is_evicted_and_the_web_pod_never_is(stack: GrpcStack) -> None:
    ns, prefix = "e2e-grpc-preempt-web", "gpw"
    deletions = Deletions(stack.core, ns)
    try:
        web = _web_and_batch(stack, ns, prefix)
        time.sleep(1.0)  # the sidecar's informer sees the victims before they are proposed
        before = stack.reclaim_calls()
        stack.pod(ns, "urgent", HIGH, "4", label=prefix)
        bound = _until("the urgent pod bound", lambda: stack.core.read_namespaced_pod(
            "urgent", ns).spec.node_name)
        assert bound == f"{prefix}-1"
        assert stack.reclaim_calls() > before, "the plugin never called Reclaim"
        deletions.saw("batch-a", "batch-b")
        assert "web" not in deletions.seen and _alive(stack.core, ns, "web", web.metadata.uid)
        assert FALLBACK not in stack.scheduler_log()
        metrics = stack.sidecar.metrics()
        assert re.search(r'^dsan_sidecar_preemptions_total\{outcome="evict"\} [1-9]', metrics,
                         re.M), metrics
    finally:
        deletions.stop()


def test_without_the_sidecar_kubernetes_own_pick_is_evicted(stack: GrpcStack) -> None:
    """Runs last: the sidecar dies; DSANPreemption falls back to DefaultPreemption's own
    choice (the web node) instead of leaving the pod pending."""
    ns, prefix = "e2e-grpc-preempt-down", "gpd"
    deletions = Deletions(stack.core, ns)
    try:
        web = _web_and_batch(stack, ns, prefix)
        stack.sidecar.kill()
        stack.pod(ns, "urgent", HIGH, "4", label=prefix)
        bound = _until("the urgent pod bound", lambda: stack.core.read_namespaced_pod(
            "urgent", ns).spec.node_name)
        assert bound == f"{prefix}-0"
        deletions.saw("web")
        assert not _alive(stack.core, ns, "web", web.metadata.uid)
        assert not {"batch-a", "batch-b"} & deletions.seen
        assert FALLBACK in stack.scheduler_log()
    finally:
        deletions.stop()
