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
