"""The shipped policy through the real dsan-scheduler packs GPUs where the default spreads.

The sidecar serves its default policy (the shipped DSAN model; kwok nodes send no telemetry,
so its openb stage on FGD answers). FGD and that stage tie every node with whole free GPUs
for a whole-GPU pod; the reply gives the top to the lowest tied name (sidecar.tiebreak) and
the dsan profile drops the default spreading scores (scheduler-config/dsan-scheduler.yaml),
so the pods fill nodes one after another. Before both, the dsan-scheduler placed them as
the default scheduler does (``make cluster-demo``: 7 of 50 nodes left with 8 free GPUs,
against 30 now).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from dsan.api import types as t
from tests.support.controlplane import SCHEDULER_CONFIG_DIR, ControlPlane
from tests.support.sidecar import Sidecar
from tests.support.workload import BindingWatch, add_nodes, create_all, fleet, pod_manifest

pytestmark = pytest.mark.e2e
NODES, PODS = 6, 12


@pytest.fixture(scope="module")
def dsan_scheduler(control_plane: ControlPlane,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[client.CoreV1Api]:
    work: Path = tmp_path_factory.mktemp("dsan-packing")
    sidecar = Sidecar(control_plane.kubeconfig, work, policy=None).start()
    try:
        control_plane.start_scheduler(
            "dsan", SCHEDULER_CONFIG_DIR / "dsan-scheduler.yaml", extender_url=sidecar.extender_url
        )
        with control_plane.api_client() as api:
            yield client.CoreV1Api(api)
        control_plane.stop_scheduler("dsan")
    finally:
        sidecar.stop()


def _run(core: client.CoreV1Api, cp: ControlPlane, pool: str, scheduler: str | None) -> Counter:
    ns, sel = f"e2e-pack-{pool}", {"dsan.io/e2e": f"pack-{pool}"}
    cp.ensure_namespace(ns)
    add_nodes(core, fleet(NODES, prefix=f"pack{pool}", labels=sel), f"dsan.io/e2e=pack-{pool}")
    pods = [pod_manifest(f"g{i:02d}", scheduler=scheduler, gpus=1, node_selector=sel)
            for i in range(PODS)]
    watch = BindingWatch(core, ns).start()
    try:
        # One at a time: each pod is scored on the cluster its predecessors left.
        for p in pods:
            create_all(lambda x: core.create_namespaced_pod(ns, x), [p])
            watch.wait([p["metadata"]["name"]], 60)
        bound = watch.wait([p["metadata"]["name"] for p in pods], 60)
    finally:
        watch.stop()
    return Counter(node for node, _ in bound.values())


def test_the_dsan_scheduler_fills_nodes_the_default_scheduler_spreads_over(
        dsan_scheduler: client.CoreV1Api, control_plane: ControlPlane) -> None:
    packed = _run(dsan_scheduler, control_plane, "d", t.SCHEDULER_NAME)
    spread = _run(dsan_scheduler, control_plane, "k", None)
    assert sum(packed.values()) == sum(spread.values()) == PODS
    # 12 one-GPU pods fit on two 8-GPU nodes; the default spreads them over most of six.
    assert len(packed) <= 2, f"dsan-scheduler spread the pods: {dict(packed)}"
    assert len(spread) >= 4, f"the default scheduler packed, the contrast is void: {dict(spread)}"
