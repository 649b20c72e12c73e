"""NvmlBackend's own logic (NVLink discovery incl. NVSwitch, NaN for unsupported readings,
event translation, init failure) against a stand-in ``pynvml`` module, so it is exercised on
machines without a GPU. The contract suite checks the real library where one exists."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from deviceplugin.backend import COL, N_FIELDS, BackendUnavailable, EventKind
from deviceplugin.nvml import NvmlBackend
from tests.unit.deviceplugin.nvml_stub import make_pynvml


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    m = make_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", m)
    yield m


def test_init_failure_becomes_backend_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", make_pynvml(init_error=True))
    with pytest.raises(BackendUnavailable, match="LibraryNotFound"):
        NvmlBackend().init()


def test_gpu_lost_during_discovery_becomes_backend_unavailable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # nvmlInit works, one GPU does not answer: the agent's degraded start (or exit 1 with
    # fail_on_init_error), not an NVMLError it does not catch; and NVML is shut down again.
    m = make_pynvml(lost_at_init=2)
    monkeypatch.setitem(sys.modules, "pynvml", m)
    b = NvmlBackend()
    with pytest.raises(BackendUnavailable, match="GpuIsLost"):
        b.init()
    assert m.initialised == 0 and b.devices() == []


def test_discovery_finds_direct_and_nvswitch_links(nvml: Any) -> None:
    b = NvmlBackend()
    b.init()
    devs = b.devices()
    assert [d.uuid for d in devs] == [f"GPU-{i:08d}" for i in range(4)]
    assert devs[0].model == "Tesla T4" and devs[0].memory_total_mib == 16 * 1024
    assert [d.nvlink_peers for d in devs] == [(1,), (0,), (3,), (2,)]
    assert [d.nvlink_domain for d in devs] == [0, 0, 2, 2]


def test_pcie_switch_groups_from_common_ancestors(nvml: Any) -> None:
    b = NvmlBackend()
    b.init()
    assert [b.pcie_switch(i) for i in range(4)] == [0, 0, 2, 2]


def test_sample_converts_units_and_marks_unsupported_nan(nvml: Any) -> None:
    b = NvmlBackend()
    b.init()
    out = np.zeros((4, N_FIELDS))
    b.sample(out)
    assert out[:, COL["util"]].tolist() == [0, 10, 20, 30]
    assert out[0, COL["powerW"]] == pytest.approx(70.0)
    assert math.isnan(out[3, COL["powerW"]])  # NotSupported -> NaN, not a failed sample
    assert out[1, COL["memoryUsedMiB"]] == 1024 and out[1, COL["memoryFreeMiB"]] == 15 * 1024
    assert out[2, COL["pcieRxKBps"]] == 200 and out[2, COL["temperatureC"]] == 42
    assert np.isnan(out[:, COL["nvlinkKBps"]]).all()
    assert out[:, COL["eccDbeVolatile"]].tolist() == [0, 1, 2, 3]


def test_counters_give_pcie_and_nvlink_rates_without_the_20ms_call(
        monkeypatch: pytest.MonkeyPatch) -> None:
    m = make_pynvml(counters=True)
    monkeypatch.setitem(sys.modules, "pynvml", m)
    monkeypatch.setattr("deviceplugin.nvml.time.monotonic", lambda: m.now)
    b = NvmlBackend()
    b.init()
    out = np.zeros((4, N_FIELDS))
    m.now = 100.0
    b.sample(out)
    rate_cols = [COL["pcieTxKBps"], COL["pcieRxKBps"], COL["nvlinkKBps"]]
    assert np.isnan(out[:, rate_cols]).all()  # a rate needs two readings
    m.now = 102.0
    b.sample(out)
    # GPU h moves 1 KiB/s x (h + 1) TX and twice that RX; NVLink 10 + 30 KiB/s on linked GPUs.
    assert out[:, COL["pcieTxKBps"]].tolist() == [1.0, 2.0, 3.0, 4.0]
    assert out[:, COL["pcieRxKBps"]].tolist() == [2.0, 4.0, 6.0, 8.0]
    assert out[:, COL["nvlinkKBps"]].tolist() == [40.0, 40.0, 40.0, 40.0]
    b.sample(out)  # no time passed: no rate, rather than a division by zero
    assert np.isnan(out[:, rate_cols]).all()


def test_events_translate_and_time_out(nvml: Any) -> None:
    b = NvmlBackend()
    b.init()
    assert b.watch_events()
    assert b.wait_events(0.01) == []
    nvml.events.put(SimpleNamespace(device=2, eventType=8, eventData=79))
    nvml.events.put(SimpleNamespace(device=1, eventType=2, eventData=0))
    (xid,) = b.wait_events(0.5)
    assert (xid.index, xid.kind, xid.xid) == (2, EventKind.XID, 79)
    (ecc,) = b.wait_events(0.5)
    assert (ecc.index, ecc.kind) == (1, EventKind.ECC_DBE)


def test_check_fails_for_a_lost_gpu(nvml: Any) -> None:
    b = NvmlBackend()
    b.init()
    nvml.lost.add(1)
    assert [b.check(i) for i in range(4)] == [True, False, True, True]
