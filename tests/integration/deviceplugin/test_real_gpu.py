"""The agent on real GPUs: NvmlBackend behind the kubelet protocol, /metrics and the CR summary.

The fake backend covers every code path everywhere; this file proves the same agent works
over the real driver. It runs where ``nvmlInit`` succeeds and is skipped with the reason
elsewhere (CI has no GPU; tests/conftest.py allows exactly that skip).
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from deviceplugin.agent import Agent
from deviceplugin.config import PluginConfig
from deviceplugin.nvml import NvmlBackend
from dsan.api.gen.deviceplugin_v1beta1 import api_pb2 as pb
from dsan.api.telemetry import GPUInfo, GPUTelemetry
from tests.integration.deviceplugin.kubelet_server import LocalKubelet
from tests.support.nvml import nvml_works

pytestmark = pytest.mark.integration


@pytest.fixture
def real_gpus() -> Iterator[list[GPUInfo]]:
    if not nvml_works():
        pytest.skip("no NVIDIA GPU/driver here (nvmlInit failed)")
    probe = NvmlBackend()
    probe.init()  # NVML works: a BackendUnavailable here is the agent's fault, not a skip
    devs = probe.devices()
    probe.shutdown()
    yield devs


def test_real_gpus_register_allocate_and_export_telemetry(
    kubelet: LocalKubelet, sock_dir: Path, real_gpus: list[GPUInfo]
) -> None:
    cfg = PluginConfig(node_name="real-gpu-node", plugin_dir=sock_dir, metrics_port=0,
                       mode="device-plugin",
                       crd_enabled=False, health_poll_s=0.1, socket_check_s=0.1)
    agent = Agent(cfg, NvmlBackend()).start()
    try:
        assert agent.available, agent.reason
        uuids = [d.uuid for d in real_gpus]
        kubelet.wait_for(lambda: set(kubelet.latest()) == set(uuids), timeout=20)
        assert set(kubelet.latest().values()) == {"Healthy"}
        assert kubelet.registrations[0].resource_name == "nvidia.com/gpu"

        resp = kubelet.stub().Allocate(pb.AllocateRequest(container_requests=[
            pb.ContainerAllocateRequest(devices_ids=[uuids[-1]])]), timeout=5)
        assert resp.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"] == uuids[-1]

        assert agent.metrics is not None
        body = httpx.get(f"http://127.0.0.1:{agent.metrics.port}/metrics", timeout=5).text
        for u in uuids:  # one utilisation and one framebuffer series per real GPU
            assert re.search(rf'DCGM_FI_DEV_GPU_UTIL\{{[^}}]*UUID="{u}"', body), u
            assert re.search(rf'DCGM_FI_DEV_FB_USED\{{[^}}]*UUID="{u}"', body), u

        # The CR summary the sidecar reads: the real devices, and windows of real readings
        # that survive the typed parser.
        summary = GPUTelemetry.from_dict(agent.summary().to_dict())
        assert [(g.uuid, g.model, g.memory_total_mib) for g in summary.gpus] == [
            (d.uuid, d.model, d.memory_total_mib) for d in real_gpus]
        for st in summary.statuses:
            assert st.health == "Healthy"
            util = [v for v in st.windows.get("util", ()) if not math.isnan(v)]
            assert all(0 <= v <= 100 for v in util)
    finally:
        agent.stop()


def test_command_serves_real_gpus(kubelet: LocalKubelet, sock_dir: Path,
                                  real_gpus: list[GPUInfo]) -> None:
    """The default backend is NVML: ``dsan-deviceplugin`` with no backend flag finds them."""
    proc = subprocess.run(
        [sys.executable, "-m", "deviceplugin", "--mode", "device-plugin", "--plugin-dir",
         str(sock_dir), "--metrics-port", "-1", "--no-crd", "--node-name", "real", "--run-for",
         "3", "--fail-on-init-error"],
        capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert f"gpus={len(real_gpus)} " in proc.stdout and "available=true" in proc.stdout
    assert kubelet.registrations
    assert {r.resource_name for r in kubelet.registrations} == {"nvidia.com/gpu"}
