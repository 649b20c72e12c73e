"""Fixtures for the device-plugin integration tests: a short socket dir and a test kubelet."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.deviceplugin.kubelet_server import LocalKubelet


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    # Unix socket paths must stay under 108 bytes; pytest's tmp_path can be longer.
    d = Path(tempfile.mkdtemp(prefix="dsan-dp-", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def kubelet(sock_dir: Path) -> Iterator[LocalKubelet]:
    k = LocalKubelet(sock_dir).start()
    yield k
    k.stop()
