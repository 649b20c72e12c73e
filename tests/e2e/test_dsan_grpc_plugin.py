"""The DSANScore framework plugin: our kube-scheduler build scores through the sidecar's gRPC
Score service (scheduler-config/dsan-scheduler-grpc.yaml) instead of the HTTP extender."""

from __future__ import annotations

import re
from typing import Any

import pytest
from kubernetes import client

from dsan.api import types as t
from tests.support.controlplane import SCHEDULER_CONFIG_DIR, ControlPlane
from tests.support.procs import wait_until
from tests.support.sidecar import Sidecar
from tests.support.workload import BindingWatch, add_nodes, create_all, fleet, pod_manifest

pytestmark = pytest.mark.e2e

GRPC_ERROR = "DSAN sidecar unavailable, scoring without it"


def _grpc_calls(sidecar: Sidecar, verb: str = "score") -> float:
    pattern = rf'^dsan_sidecar_requests_total\{{api="grpc",verb="{verb}"\}} (\S+)$'
    m = re.search(pattern, sidecar.metrics(), re.M)
    return float(m.group(1)) if m else 0.0


def test_grpc_plugin_scores_every_pod_and_the_scheduler_follows(
    control_plane: ControlPlane, tmp_path: Any
) -> None:
    via = "grpcio"
    ns, sel = f"e2e-grpc-{via}", {"dsan.io/e2e": f"grpc-{via}"}
    prefix = via
    control_plane.ensure_namespace(ns)
    with control_plane.api_client() as api:
        core: Any = client.CoreV1Api(api)  # manifests are plain dicts
        add_nodes(core, fleet(5, prefix=prefix, labels=sel), f"dsan.io/e2e=grpc-{via}")
        busy = pod_manifest("preload", gpus=5)
        busy["spec"]["nodeName"] = f"{prefix}-0002"  # bestfit's favourite, least-allocated's last
        core.create_namespaced_pod(ns, busy)
        sidecar = Sidecar(control_plane.kubeconfig, tmp_path, policy="bestfit").start()
        address = f"127.0.0.1:{sidecar.grpc_port}"
        sched = control_plane.start_scheduler(
            f"dsan-grpc-{via}",
            SCHEDULER_CONFIG_DIR / "dsan-scheduler-grpc.yaml",
            score_address=address,
        )
        watch = BindingWatch(core, ns).start()
        try:
            # Probe with the preload's own UID: the sidecar never "assumes" a pod it has seen
            # bound, so the probe does not charge a GPU to the node it prefers.
            probe = pod_manifest("preload", gpus=1)
            uid = core.read_namespaced_pod("preload", ns).metadata.uid
            probe["metadata"].update(namespace=ns, uid=uid)
            pair = [f"{prefix}-0000", f"{prefix}-0002"]
            wait_until(
                "sidecar sees the preload",
                lambda: (s := sidecar.prioritize(probe, pair))[pair[1]] > s[pair[0]],
                30,
            )
            # The plugin connects and fetches the node table when the scheduler starts, so the
            # first pod's call does not also pay for the connection inside its 100 ms timeout.
            wait_until("the plugin fetched the node table",
                       lambda: _grpc_calls(sidecar, "node_table") >= 1, 30)
            before = _grpc_calls(sidecar)
            names = [f"g{i}" for i in range(5)]
            create_all(
                lambda p: core.create_namespaced_pod(ns, p),
                [
                    pod_manifest(n, scheduler=t.SCHEDULER_NAME, gpus=1, node_selector=sel)
                    for n in names
                ],
            )
            bound = watch.wait(names, timeout=60)
            scored = _grpc_calls(sidecar) - before
            clean_log = sched.log.read_text(errors="replace")
            # The sidecar dies: PreScore returns Skip and the pods still bind.
            sidecar.kill()
            orphans = [f"o{i}" for i in range(3)]
            create_all(
                lambda p: core.create_namespaced_pod(ns, p),
                [pod_manifest(n, scheduler=t.SCHEDULER_NAME, node_selector=sel) for n in orphans],
            )
            watch.wait(orphans, timeout=60)
            failures = sched.log.read_text(errors="replace").count(GRPC_ERROR)
        finally:
            watch.stop()
            control_plane.stop_scheduler(f"dsan-grpc-{via}")
            sidecar.stop()
    skipped = [line for line in clean_log.splitlines() if GRPC_ERROR in line]
    assert scored >= len(names), f"only {scored} gRPC Score calls for {len(names)} pods: {skipped}"
    assert not skipped, skipped
    assert failures >= len(orphans), f"{failures} logged sidecar failures for {len(orphans)} pods"
    nodes = [node for node, _ in bound.values()]
    # -0002 had 3 free GPUs: bestfit fills it first; the default profile would spread.
    assert nodes.count(f"{prefix}-0002") == 3, bound
    assert len(set(nodes)) <= 2, bound
