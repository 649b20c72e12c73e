"""One contract for every GPU backend. The fake runs everywhere, and so does NvmlBackend over
a stand-in ``pynvml`` module; the real NVML half runs where ``nvmlInit`` succeeds (a machine
with an NVIDIA driver) and is skipped with the reason elsewhere."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import numpy as np
import pytest

from deviceplugin.backend import COL, N_FIELDS, BackendUnavailable, GPUBackend, GPUEvent
from deviceplugin.fake import FakeBackend
from deviceplugin.nvml import NvmlBackend
from tests.unit.deviceplugin.nvml_stub import make_pynvml


@pytest.fixture(params=["fake", "nvml-on-stub", "nvml"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
            ) -> Iterator[GPUBackend]:
    b: GPUBackend
    if request.param == "fake":
        b = FakeBackend(8, topology="dgx1")
    else:
        if request.param == "nvml-on-stub":  # NvmlBackend's code over a stand-in pynvml
            monkeypatch.setitem(sys.modules, "pynvml", make_pynvml())
        b = NvmlBackend()
    try:
        b.init()
    except BackendUnavailable as exc:
        if request.param != "nvml":  # the fake and the stub always have GPUs: a real failure
            raise
        pytest.skip(f"{request.param}: no NVIDIA GPU/driver here ({exc})")
    yield b
    b.shutdown()


def test_devices_are_indexed_unique_and_described(backend: GPUBackend) -> None:
    devs = backend.devices()
    assert devs, "a backend that initialised must report at least one GPU"
    assert [d.index for d in devs] == list(range(len(devs)))
    assert len({d.uuid for d in devs}) == len(devs)
    for d in devs:
        assert d.uuid and len(d.uuid) <= 63  # kubelet's device ID limit
        assert d.model and d.memory_total_mib > 0 and d.pci_bus_id


def test_nvlink_topology_is_consistent(backend: GPUBackend) -> None:
    devs = backend.devices()
    for d in devs:
        for p in d.nvlink_peers:
            assert 0 <= p < len(devs) and p != d.index
            assert d.index in devs[p].nvlink_peers, "NVLink peers must be symmetric"
            assert devs[p].nvlink_domain == d.nvlink_domain is not None
        if not d.nvlink_peers:
            assert d.nvlink_domain is None


def test_sample_fills_plausible_readings(backend: GPUBackend) -> None:
    n = len(backend.devices())
    out = np.full((n, N_FIELDS), -1.0)
    backend.sample(out)
    assert not (out == -1.0).any(), "every cell must be written (a value or NaN)"
    util = out[:, COL["util"]]
    assert np.all((util >= 0) & (util <= 100))
    total = np.array([d.memory_total_mib for d in backend.devices()], dtype=float)
    used_free = out[:, COL["memoryUsedMiB"]] + out[:, COL["memoryFreeMiB"]]
    assert np.allclose(used_free, total, rtol=0.05)
    temp = out[:, COL["temperatureC"]]
    assert np.all(np.isnan(temp) | ((temp > 0) & (temp < 130)))
    for col in ("powerW", "smClockMHz", "pcieTxKBps", "pcieRxKBps", "eccDbeVolatile"):
        v = out[:, COL[col]]
        assert np.all(np.isnan(v) | (v >= 0)), col


def test_healthy_gpus_pass_the_probe(backend: GPUBackend) -> None:
    assert all(backend.check(d.index) for d in backend.devices())
    for d in backend.devices():
        numa = backend.numa_node(d.index)
        assert numa is None or numa >= 0
        switch = backend.pcie_switch(d.index)
        assert switch is None or 0 <= switch < len(backend.devices())


def test_events_are_delivered_as_a_list(backend: GPUBackend) -> None:
    supported = backend.watch_events()
    assert isinstance(supported, bool)
    events = backend.wait_events(0.05)
    assert isinstance(events, list) and all(isinstance(e, GPUEvent) for e in events)


def test_nvml_is_not_touched_at_import() -> None:
    # A fresh interpreter: importing the whole agent must not load pynvml (or NVML).
    code = ("import sys, deviceplugin.agent, deviceplugin.nvml, deviceplugin.cli; "
            "print('pynvml' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
