"""The base install serves DSAN: ``pip install .`` without extras (no torch, no plotting;
``bench/serve_env.sh`` builds it once per dependency list under ~/.cache/dsan) runs
``dsan serve`` with the shipped model against the real control plane, scores from the numpy
artifact, and holds its memory budget. Its start time is a benchmark's business
(``bench/throughput_cluster.py`` reports it), not a timed test's."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.support.controlplane import ControlPlane
from tests.support.sidecar import Sidecar
from tests.support.workload import add_nodes, fleet, pod_manifest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
#: The sidecar's resident memory once ready.
RSS_BUDGET = 250 * 2**20


@pytest.fixture(scope="module")
def serve_python() -> str:
    out = subprocess.run(["bash", str(ROOT / "bench" / "serve_env.sh")], check=True,
                         capture_output=True, text=True, timeout=900)
    return out.stdout.strip().splitlines()[-1]


def test_the_base_install_serves_dsan_without_torch(
    control_plane: ControlPlane, tmp_path: Any, serve_python: str
) -> None:
    with control_plane.api_client() as api:
        core: Any = client.CoreV1Api(api)
        add_nodes(core, fleet(20, prefix="serve"), "type=kwok")
    sidecar = Sidecar(control_plane.kubeconfig, tmp_path, policy=None,
                      python=serve_python).start()
    try:
        assert sidecar.proc is not None
        maps = Path(f"/proc/{sidecar.proc.pid}/maps").read_text()
        assert "libtorch" not in maps and "torch/" not in maps
        info = re.search(r"dsan_sidecar_policy_info\{([^}]*)\}", sidecar.metrics())
        assert info is not None and 'policy="dsan"' in info.group(1), info
        names = [f"serve-{i:04d}" for i in range(20)]
        scores = sidecar.prioritize(pod_manifest("p", gpus=1), names)
        assert sorted(scores) == sorted(names) and max(scores.values()) == 10
        assert sidecar.ready_rss <= RSS_BUDGET, f"RSS {sidecar.ready_rss / 2**20:.0f} MiB"
    finally:
        sidecar.stop()
