"""Shared pytest fixtures. Each fixture's machinery lives in tests/support/; keep this file thin."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.support.controlplane import ControlPlane, ControlPlaneConfig


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    """One real control plane for the whole session: etcd, kube-apiserver, the default
    kube-scheduler and kwok on 127.0.0.1 (binaries built once by `make control-plane`).
    Tests isolate themselves by namespace (``control_plane.ensure_namespace``) and node names."""
    # DSAN_KEEP_CONTROL_PLANE=1 keeps its temp dir (logs, certs) for a post-mortem.
    keep = os.environ.get("DSAN_KEEP_CONTROL_PLANE") == "1"
    with ControlPlane(ControlPlaneConfig(keep_workdir=keep)) as cp:
        yield cp


# In CI every prerequisite (traces, Prometheus, the shipped model, the control plane) is
# installed by `make test`, so a skip there means a missing install step, not a missing
# feature: fail it. Only the real-GPU cases may skip, as CI machines have no GPU.
_CI_ALLOWED_SKIPS = ("no NVIDIA GPU/driver here", "NVML works on this machine")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if not os.environ.get("CI") or not report.skipped or hasattr(report, "wasxfail"):
        return
    longrepr = report.longrepr
    reason = str(longrepr[2]) if isinstance(longrepr, tuple) else str(longrepr)
    if not any(allowed in reason for allowed in _CI_ALLOWED_SKIPS):
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, where every prerequisite is installed: {reason}"
