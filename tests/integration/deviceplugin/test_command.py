"""The ``dsan-deviceplugin`` command end to end: a real process registers with the test
kubelet, serves /metrics, and stops cleanly on SIGTERM."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.integration.deviceplugin.kubelet_server import LocalKubelet

pytestmark = pytest.mark.integration


def test_command_registers_serves_metrics_and_stops(kubelet: LocalKubelet, sock_dir: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "deviceplugin", "--backend", "fake", "--fake-gpus", "4",
         "--plugin-dir", str(sock_dir), "--metrics-port", "0", "--no-crd",
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
    ok = subprocess.run(base, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    if "available=true" in ok.stdout:
        pytest.skip("NVML works on this machine: nothing to degrade")
    # The NVML backend without a driver: degraded, keeps running, exits 0 when told to stop...
    assert "available=false gpus" not in ok.stdout and "gpus=0" in ok.stdout
    assert "NVMLError_LibraryNotFound" in ok.stderr or "nvmlInit" in ok.stderr
    # ...unless configured to fail.
    failed = subprocess.run([*base, "--fail-on-init-error"], capture_output=True, text=True,
                            timeout=60)
    assert failed.returncode == 1 and "GPU backend unavailable" in failed.stderr
    bad = subprocess.run([*base, "--sample-interval", "0"], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "sample_interval_s" in bad.stderr
