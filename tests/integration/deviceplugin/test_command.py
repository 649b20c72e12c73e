"""The ``dsan-deviceplugin`` command end to end: a real process registers with the test
kubelet, serves /metrics, and stops cleanly on SIGTERM."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.integration.deviceplugin.kubelet_server import LocalKubelet
from tests.integration.deviceplugin.podresources_server import (
    LocalPodResources,
    PodResourcesState,
)
from tests.support.nvml import nvml_works

pytestmark = pytest.mark.integration


def test_command_registers_serves_metrics_and_stops(kubelet: LocalKubelet, sock_dir: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "deviceplugin", "--mode", "device-plugin", "--backend", "fake",
         "--fake-gpus", "4", "--plugin-dir", str(sock_dir), "--metrics-port", "0", "--no-crd",
         "--node-name", "cmd-node", "--run-for", "60"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.match(r"deviceplugin ready: node=cmd-node gpus=4 socket=\S+ metrics=(\S+) "
                     r"available=true", line)
        assert m, line
        kubelet.wait_for(lambda: len(kubelet.latest()) == 4, timeout=10)
        body = httpx.get(m.group(1), timeout=5).text
        assert body.count("DCGM_FI_DEV_GPU_UTIL{") == 4 and 'Hostname="cmd-node"' in body
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert not (sock_dir / "dsan-gpu.sock").exists()  # removed on the way out


def test_command_without_gpu_degrades_or_fails_as_configured(sock_dir: Path) -> None:
    base = [sys.executable, "-m", "deviceplugin", "--plugin-dir", str(sock_dir),
            "--metrics-port", "-1", "--no-crd", "--node-name", "n", "--run-for", "0.2"]
    # Asked of NVML itself, not of the agent: an agent that wrongly claims a GPU must fail
    # here, not skip.
    if nvml_works():
        pytest.skip("NVML works on this machine: nothing to degrade")
    ok = subprocess.run(base, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    # The NVML backend without a driver: degraded, keeps running, exits 0 when told to stop...
    assert " gpus=0 " in ok.stdout and " available=false " in ok.stdout, ok.stdout
    assert "NVMLError_LibraryNotFound" in ok.stderr or "nvmlInit" in ok.stderr
    # ...unless configured to fail.
    failed = subprocess.run([*base, "--fail-on-init-error"], capture_output=True, text=True,
                            timeout=60)
    assert failed.returncode == 1 and "GPU backend unavailable" in failed.stderr
    bad = subprocess.run([*base, "--sample-interval", "0"], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "sample_interval_s" in bad.stderr


def test_command_default_mode_is_telemetry_beside_kubelet_with_pod_attribution(
    sock_dir: Path,
) -> None:
    """The docs' telemetry-mode command: no registration with the kubelet on the same
    directory, /healthz and /readyz answer, a pod kubelet reports is on its GPU's series."""
    state = PodResourcesState()
    kubelet = LocalKubelet(sock_dir, pod_resources=state).start()
    pr = LocalPodResources(sock_dir / "pod-resources" / "kubelet.sock", state).start()
    proc = subprocess.Popen(
        [sys.executable, "-m", "deviceplugin", "--backend", "fake", "--fake-gpus", "4",
         "--plugin-dir", str(sock_dir), "--pod-resources-socket", str(pr.socket),
         "--pod-resources-interval", "0.2", "--metrics-port", "0", "--no-crd",
         "--node-name", "tm-node", "--run-for", "60"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.match(r"deviceplugin ready: node=tm-node gpus=4 socket=off metrics=(\S+) "
                     r"available=true mode=telemetry pods=on$", line.strip())
        assert m, line
        base = m.group(1).removesuffix("/metrics")
        body = httpx.get(m.group(1), timeout=5).text
        uuid = re.search(r'DCGM_FI_DEV_GPU_UTIL\{gpu="1",UUID="([^"]+)"', body)
        assert uuid, body[:2000]
        state.assignments.append(("team-a", "job-1", "main", "nvidia.com/gpu", (uuid.group(1),)))
        deadline = time.monotonic() + 10
        while 'pod="job-1"' not in body and time.monotonic() < deadline:
            time.sleep(0.1)
            body = httpx.get(m.group(1), timeout=5).text
        assert re.search(r'DCGM_FI_DEV_GPU_UTIL\{gpu="1"[^}]*pod="job-1",namespace="team-a",'
                         r'container="main"\}', body), body[:3000]
        assert httpx.get(base + "/healthz", timeout=5).text == "ok\n"
        assert httpx.get(base + "/readyz", timeout=5).text == "ok\n"
        assert kubelet.registrations == []
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
        pr.stop()
        kubelet.stop()
    assert proc.returncode == 0, err
