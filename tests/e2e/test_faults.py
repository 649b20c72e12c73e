"""Faults: the sidecar dies halfway through a burst of opted-in pods; scheduling must not stop."""

from __future__ import annotations

import re
import threading
from typing import Any

import pytest
from kubernetes import client

from dsan.api import types as t
from tests.support.controlplane import SCHEDULER_CONFIG_DIR, ControlPlane
from tests.support.procs import wait_until
from tests.support.sidecar import Sidecar
from tests.support.workload import BindingWatch, add_nodes, create_all, fleet, pod_manifest

pytestmark = pytest.mark.e2e

EXTENDER_ERROR = "Failed to run extender's priority function"


def _prioritized(sidecar: Sidecar) -> float:
    m = re.search(
        r'^dsan_sidecar_requests_total\{api="http",verb="prioritize"\} (\S+)$',
        sidecar.metrics(),
        re.M,
    )
    return float(m.group(1)) if m else 0.0


def test_killing_the_sidecar_midway_still_binds_every_pod(
    control_plane: ControlPlane, tmp_path: Any
) -> None:
    ns, sel, n = "e2e-fault", {"dsan.io/e2e": "fault"}, 500
    control_plane.ensure_namespace(ns)
    with control_plane.api_client() as api:
        core = client.CoreV1Api(api)
        add_nodes(core, fleet(20, prefix="fault", gpus=0, labels=sel), "dsan.io/e2e=fault")
        sidecar = Sidecar(control_plane.kubeconfig, tmp_path, policy="bestfit").start()
        # schedule_one.go logs extender failures at V(5) only; raise just that file.
        sched = control_plane.start_scheduler(
            "dsan-fault",
            SCHEDULER_CONFIG_DIR / "dsan-scheduler.yaml",
            extender_url=sidecar.extender_url,
            extra_args=("--vmodule=schedule_one=5",),
        )
        watch = BindingWatch(core, ns).start()
        try:
            pods = [
                pod_manifest(
                    f"p{i:03d}",
                    scheduler=t.SCHEDULER_NAME,
                    cpu="100m",
                    memory="128Mi",
                    node_selector=sel,
                )
                for i in range(n)
            ]
            # Create in the background: the scheduler keeps pace with creation, so waiting for
            # create_all would find every pod scored already.
            creator = threading.Thread(
                target=create_all, args=(lambda p: core.create_namespaced_pod(ns, p), pods, 4)
            )
            creator.start()
            # "Midway" by the sidecar's own count: the binding watch lags the scheduler.
            wait_until(
                "half the pods scored",
                lambda: _prioritized(sidecar) >= n // 2,
                120,
                [sched],
                interval=0.02,
            )
            scored_before_kill = _prioritized(sidecar)
            sidecar.kill()
            creator.join()
            bound = watch.wait([p["metadata"]["name"] for p in pods], timeout=120)
        finally:
            watch.stop()
            sidecar.stop()
            control_plane.stop_scheduler("dsan-fault")
    assert len(bound) == n
    failures = sched.log.read_text(errors="replace").count(EXTENDER_ERROR)
    print(
        f"sidecar scored {scored_before_kill:.0f} of {n} before the kill; "
        f"scheduler logged {failures} extender failures; all {n} bound"
    )
    assert 0 < scored_before_kill < n, scored_before_kill
    # Every pod scheduled after the kill went without the extender, and the scheduler said so.
    assert failures > 0, f"no '{EXTENDER_ERROR}' in {sched.log}"
    assert failures + scored_before_kill >= n * 0.9, (failures, scored_before_kill)
