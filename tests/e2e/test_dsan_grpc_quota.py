"""DSAN's ``ls_headroom`` quota in plugin mode on a real control plane: our kube-scheduler build
runs scheduler-config/dsan-scheduler-grpc.yaml with DSANScore also under preFilter and filter
(what the Helm chart renders for ``scheduler.extender.filter: true``), so the sidecar's gRPC
Filter keeps an elastic pod off the node of a web pod, as test_dsan_quota.py shows for the
HTTP extender's filter verb.

The real sidecar serves the shipped DSAN model with its actions.json rewritten: at
``ls_headroom=0.75`` the quota refuses the web pod's node; at 1.0 it refuses nothing and the same
pod lands there, so the first outcome is the quota's doing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from kubernetes import client

from dsan.api import types as t
from dsan.api.gen.scorer_v1 import scorer_pb2, scorer_pb2_grpc
from tests.support.controlplane import SCHEDULER_CONFIG_DIR, ControlPlane
from tests.support.procs import eventually
from tests.support.sidecar import Sidecar, model_with_headroom
from tests.support.workload import NodeShape, add_nodes, node_manifest, pod_manifest

pytestmark = pytest.mark.e2e
BATCH = {t.ANNOTATION_TASK_TYPE: "batch"}
ELASTIC = {**BATCH, t.ANNOTATION_ELASTIC: "true"}
WEB = {t.ANNOTATION_TASK_TYPE: "web"}
QUOTA = "dsan: the node's quota"


class Stack:
    def __init__(self, core: Any, sidecar: Sidecar, ns: str, label: str) -> None:
        self.core, self.sidecar, self.ns = core, sidecar, ns
        self.sel = {"dsan.io/e2e": label}
        # A (the web pod's node) sorts first: on the sidecar's equal scores the lowest name wins.
        self.a, self.b = f"{label}-a", f"{label}-b"

    def pod(self, name: str, cpu: str, ann: dict[str, str], node: str | None = None,
            prefer: str | None = None, require: str | None = None) -> None:
        """A pod bound straight to ``node``, or pending for dsan-scheduler on this stack's
        nodes, preferring node ``prefer`` or allowed on node ``require`` only."""
        p = pod_manifest(name, scheduler=None if node else t.SCHEDULER_NAME, cpu=cpu,
                         memory="100Mi", annotations=ann,
                         node_selector=None if node else self.sel)
        if node:
            p["spec"]["nodeName"] = node
        term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                      "values": [prefer or require]}]}
        if prefer:
            p["spec"]["affinity"] = {"nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 100, "preference": term}]}}
        if require:
            p["spec"]["affinity"] = {"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
        self.core.create_namespaced_pod(self.ns, p)

    def bound(self, name: str) -> str:
        return str(eventually(f"{name} bound", lambda: self.core.read_namespaced_pod(
            name, self.ns).spec.node_name, 60))

    def grpc_filter(self, cpu: str, ann: dict[str, str]) -> dict[str, str]:
        """The sidecar's gRPC Filter answer for a pod of ``cpu`` cores on A and B."""
        req = scorer_pb2.FilterRequest(
            pod=scorer_pb2.Pod(namespace=self.ns, name="probe", requests={"cpu": cpu},
                               annotations=ann), node_names=[self.a, self.b])
        with grpc.insecure_channel(f"127.0.0.1:{self.sidecar.grpc_port}") as ch:
            return dict(scorer_pb2_grpc.ScorerStub(ch).Filter(req, timeout=10).refused)

    def filter_calls(self) -> float:
        m = re.search(r'^dsan_sidecar_requests_total\{api="grpc",verb="filter"\} (\S+)$',
                      self.sidecar.metrics(), re.M)
        return float(m.group(1)) if m else 0.0

    def web_and_filler(self) -> None:
        """A web pod (2 of 8 cores) on A, a 2-core batch pod on B, and proof (independent of
        the quota) that the sidecar's cache holds both: by the HTTP filter verb, which also
        refuses full nodes, 7 cores fit neither node now."""
        self.pod("web", "2", WEB, node=self.a)
        self.pod("filler", "2", BATCH, node=self.b)
        probe = pod_manifest("probe", cpu="7", memory="100Mi", annotations=BATCH)
        eventually("the sidecar's cache saw the bound pods", lambda: set(
            self.sidecar.filter(probe, [self.a, self.b])["FailedNodes"]) == {self.a, self.b}, 30)


def _stack(control_plane: ControlPlane, work: Path, headroom: float, label: str
           ) -> Iterator[Stack]:
    model = model_with_headroom(work / "model", headroom)
    cfg = yaml.safe_load((SCHEDULER_CONFIG_DIR / "dsan-scheduler-grpc.yaml").read_text())
    (profile,) = cfg["profiles"]
    for point in ("preFilter", "filter"):
        profile["plugins"][point] = {"enabled": [{"name": "DSANScore"}]}
    for pc in profile["pluginConfig"]:
        # A Filter call past the timeout refuses nothing and the pod may land on the refused
        # node: on a loaded test host the shipped 100 ms is a race, not a check.
        pc["args"]["timeout"] = "10s"
    sched_cfg = work / "dsan-scheduler-grpc-filter.yaml"
    sched_cfg.write_text(yaml.safe_dump(cfg))
    sidecar = Sidecar(control_plane.kubeconfig, work, policy="dsan",
                      extra_args=(f"--model-dir={model}",)).start()
    name = f"dsan-{label}"
    ns = f"e2e-{label}"
    try:
        # "dsan" degrades to the fallback when the model does not load, which has no quota.
        info = re.search(r"dsan_sidecar_policy_info\{([^}]*)\}", sidecar.metrics())
        assert info is not None and 'policy="dsan"' in info.group(1), info
        with control_plane.api_client() as api:
            control_plane.start_scheduler(name, sched_cfg,
                                          score_address=f"127.0.0.1:{sidecar.grpc_port}")
            try:
                control_plane.ensure_namespace(ns)
                core = client.CoreV1Api(api)
                stack = Stack(core, sidecar, ns, label)
                add_nodes(core, [node_manifest(n, NodeShape(cpu=8, gpus=0), stack.sel)
                                 for n in (stack.a, stack.b)], f"dsan.io/e2e={label}")
                yield stack
            finally:
                control_plane.stop_scheduler(name)
    finally:
        sidecar.stop()


@pytest.fixture(scope="module")
def quota(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[Stack]:
    yield from _stack(control_plane, tmp_path_factory.mktemp("grpc-quota"), 0.75, "gquota")


@pytest.fixture(scope="module")
def no_quota(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[Stack]:
    yield from _stack(control_plane, tmp_path_factory.mktemp("grpc-noquota"), 1.0, "gnoquota")


def test_the_quota_keeps_an_elastic_pod_off_the_web_pods_node(quota: Stack) -> None:
    """(2 + 5) / 8 = 0.875 > 0.75 of A's cores: an elastic pod allowed on A only stays pending,
    kube-scheduler's FailedScheduling naming the quota (DSANScore's Filter, with the sidecar's
    reason); one free to choose binds to B; a web replica of the same size may still take A."""
    s = quota
    s.web_and_filler()
    assert s.grpc_filter("5", ELASTIC)[s.a].startswith(QUOTA)
    before = s.filter_calls()
    s.pod("pinned", "5", ELASTIC, require=s.a)

    def refused_by_the_quota() -> str | None:
        events = s.core.list_namespaced_event(
            s.ns, field_selector="involvedObject.name=pinned").items
        return next((e.message for e in events
                     if e.reason == "FailedScheduling" and QUOTA in (e.message or "")), None)

    eventually("the pinned pod's FailedScheduling names the quota", refused_by_the_quota, 60)
    assert s.core.read_namespaced_pod("pinned", s.ns).spec.node_name is None
    assert s.filter_calls() > before, "kube-scheduler never called the sidecar's Filter"
    s.core.delete_namespaced_pod("pinned", s.ns, grace_period_seconds=0)

    s.pod("elastic", "5", ELASTIC, prefer=s.a)
    assert s.bound("elastic") == s.b
    # B now has 7 of 8 cores requested: a pod of the same size fits only A. A plain batch pod
    # is held to the quota too; a second web replica is not (the quota keeps room for them).
    # B, full, is not refused: NodeResourcesFit says so, on the state preemption changes.
    refused = s.grpc_filter("5", BATCH)
    assert list(refused) == [s.a] and refused[s.a].startswith(QUOTA)
    s.pod("web2", "5", WEB, prefer=s.a)
    assert s.bound("web2") == s.a


def test_without_the_quota_the_same_pod_takes_the_web_pods_node(no_quota: Stack) -> None:
    """ls_headroom 1.0 (the quota refuses nothing): the same pod allowed on A only binds
    there, so the first test's refusal is the quota's doing."""
    s = no_quota
    s.web_and_filler()
    assert s.grpc_filter("5", ELASTIC) == {}
    before = s.filter_calls()
    s.pod("pinned", "5", ELASTIC, require=s.a)
    assert s.bound("pinned") == s.a
    assert s.filter_calls() > before, "kube-scheduler never called the sidecar's Filter"
