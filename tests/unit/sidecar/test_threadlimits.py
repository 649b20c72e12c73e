"""sidecar/threadlimits.py: numpy's BLAS pool held to the configured threads at start."""

from __future__ import annotations

import logging
import sys
import types
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import threadpoolctl

from sidecar.config import SidecarConfig
from sidecar.threadlimits import blas_threads, limit_threads, pool_sizes

Pools = list[tuple[Any, int]]


@pytest.fixture
def original_limits() -> Iterator[Pools]:
    """Every pool as it was before the test (a limit applied in a test stays otherwise)."""
    controller = threadpoolctl.ThreadpoolController()
    saved = [(lib, lib.num_threads) for lib in controller.lib_controllers]
    yield saved
    for lib, n in saved:
        lib.set_num_threads(n)


def test_numpy_blas_is_found_and_held_to_the_configured_threads(original_limits: Pools) -> None:
    np.ones((64, 64)) @ np.ones((64, 64))  # numpy's BLAS is loaded
    assert blas_threads(), "threadpoolctl found no BLAS library under numpy"
    limiter = limit_threads(torch_threads=0, blas_threads=1)
    assert limiter is not None
    assert blas_threads() and set(blas_threads()) == {1}
    limiter.restore_original_limits()
    assert blas_threads() == [n for lib, n in original_limits if lib.user_api == "blas"]


def test_zero_leaves_the_pools_as_their_libraries_sized_them(original_limits: Pools) -> None:
    before = blas_threads()
    assert limit_threads(torch_threads=0, blas_threads=0) is None
    assert blas_threads() == before


def test_torch_is_limited_only_when_a_policy_imported_it(
    monkeypatch: pytest.MonkeyPatch, original_limits: Pools,
) -> None:
    calls: list[int] = []
    fake = types.SimpleNamespace(set_num_threads=calls.append)
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    limit_threads(torch_threads=1, blas_threads=0)
    assert calls == []
    monkeypatch.setitem(sys.modules, "torch", fake)
    limit_threads(torch_threads=3, blas_threads=0)
    assert calls == [3]


def test_a_limit_that_cannot_be_applied_is_logged_and_serving_goes_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(**kw: object) -> None:
        raise OSError("no such symbol")

    monkeypatch.setattr(threadpoolctl, "threadpool_limits", broken)
    with caplog.at_level(logging.WARNING, logger="sidecar.threadlimits"):
        assert limit_threads(torch_threads=0, blas_threads=1) is None
    assert "cannot limit the BLAS threads to 1 (no such symbol)" in caplog.text


def test_the_sidecar_starts_with_one_blas_thread(original_limits: Pools) -> None:
    from sidecar.app import load_policies

    assert SidecarConfig().blas_threads == 1
    limit_threads(torch_threads=0, blas_threads=2)
    load_policies(SidecarConfig(policy="fgd"))
    assert set(blas_threads()) == {1}


def test_pool_sizes_read_what_was_set(
    monkeypatch: pytest.MonkeyPatch, original_limits: Pools,
) -> None:
    limit_threads(torch_threads=0, blas_threads=1)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(get_num_threads=lambda: 3))
    assert pool_sizes() == {"torch": 3, "blas": 1}
    monkeypatch.delitem(sys.modules, "torch")
    assert pool_sizes()["torch"] == 0
