"""The resource manager: change feed, allocation responses per mode, refusals."""

from __future__ import annotations

import threading
import time

import pytest

from deviceplugin.backend import EventKind, GPUEvent
from deviceplugin.config import PluginConfig
from deviceplugin.fake import FakeBackend
from deviceplugin.resources import AllocationError, ResourceManager


def _manager(**kw: object) -> ResourceManager:
    b = FakeBackend(4)
    devs = b.devices()
    cfg = PluginConfig(node_name="n", recovery_quiet_s=0, **kw)  # type: ignore[arg-type]
    return ResourceManager(devs, [b.numa_node(d.index) for d in devs], cfg)


def test_health_change_wakes_waiters_and_bumps_version() -> None:
    m = _manager()
    got: list[int] = []
    t = threading.Thread(target=lambda: got.append(m.wait_for_change(0, 5.0)))
    t.start()
    time.sleep(0.05)
    assert m.apply_events([GPUEvent(2, EventKind.XID, 79, time.monotonic())])
    t.join(2)
    assert got == [1]
    assert [d.health for d in m.devices()] == ["Healthy", "Healthy", "Unhealthy", "Healthy"]
    assert m.last_change is not None and m.last_change[0] == 2
    assert m.recover(lambda i: True) == [2] and m.version == 2
    assert m.recover(lambda i: True) == []  # all healthy: no probes, no change


def test_wait_for_change_times_out_without_change() -> None:
    m = _manager()
    t0 = time.monotonic()
    assert m.wait_for_change(0, 0.05) == 0
    assert time.monotonic() - t0 >= 0.04


def test_allocate_modes() -> None:
    m = _manager(allocate_modes=("envvar", "device-specs", "cdi"), cdi_kind="example.com/gpu")
    ids = [d.uuid for d in m.infos]
    a = m.allocate([ids[1], ids[3]])
    assert a.envs == {"NVIDIA_VISIBLE_DEVICES": f"{ids[1]},{ids[3]}"}
    assert ("/dev/nvidia3", "/dev/nvidia3", "rw") in a.device_specs
    assert ("/dev/nvidiactl", "/dev/nvidiactl", "rw") in a.device_specs
    assert a.cdi_devices == [f"example.com/gpu={ids[1]}", f"example.com/gpu={ids[3]}"]
    only_env = _manager().allocate([ids[0]])
    assert only_env.device_specs == [] and only_env.cdi_devices == []


def test_allocate_refuses_unknown_empty_and_unhealthy() -> None:
    m = _manager()
    ids = [d.uuid for d in m.infos]
    with pytest.raises(AllocationError, match="unknown"):
        m.allocate(["GPU-x"])
    with pytest.raises(AllocationError, match="empty"):
        m.allocate([])
    m.apply_events([GPUEvent(0, EventKind.ECC_DBE)])
    with pytest.raises(AllocationError, match="Unhealthy"):
        m.allocate([ids[0]])
    with pytest.raises(AllocationError, match="must-include"):
        m.preferred(ids[1:], [ids[0]], 2)


def test_requests_kubelet_never_sends_are_refused_with_bounded_messages() -> None:
    m = _manager()
    ids = [d.uuid for d in m.infos]
    with pytest.raises(AllocationError, match=r"duplicate device IDs \['GPU-"):
        m.allocate([ids[0], ids[0]])
    with pytest.raises(AllocationError, match="5 device IDs requested, the node has 4 GPUs"):
        m.allocate([*ids, ids[0]])
    with pytest.raises(AllocationError, match="duplicate"):  # one GPU, two containers
        m.allocate_request([[ids[1]], [ids[1]]])
    flood = [f"GPU-{i}" for i in range(1_000_000)]
    with pytest.raises(AllocationError) as err:
        m.allocate(flood)
    assert str(err.value) == "1000000 device IDs requested, the node has 4 GPUs"
    with pytest.raises(AllocationError) as err:
        m.allocate(["x" * 10_000, "y", "z", "w"])
    assert len(str(err.value)) < 200 and "and 3 more" not in str(err.value)
    with pytest.raises(AllocationError) as err:
        m.check_known(["a" * 5000, "b" * 5000, "c", "d"])
    assert len(str(err.value)) < 250
    with pytest.raises(AllocationError, match="available device IDs requested"):
        m.preferred(flood[:10], [], 2)
    with pytest.raises(AllocationError, match="duplicate must-include"):
        m.preferred(ids, [ids[0], ids[0]], 2)
    assert len(m.allocate_request([[ids[0]], [ids[1], ids[2]]])) == 2


def test_a_slow_recovery_probe_does_not_hold_up_allocate_or_the_change_feed() -> None:
    # NVML calls on a sick GPU can take seconds; kubelet's Allocate and ListAndWatch must not
    # wait for them.
    m = _manager()
    ids = [d.uuid for d in m.infos]
    m.apply_events([GPUEvent(0, EventKind.XID, 79)])
    probing, release = threading.Event(), threading.Event()

    def slow_check(i: int) -> bool:
        probing.set()
        release.wait(5)
        return True

    back: list[list[int]] = []
    t = threading.Thread(target=lambda: back.append(m.recover(slow_check)))
    t.start()
    try:
        assert probing.wait(2)
        done: list[object] = []
        other = threading.Thread(target=lambda: done.extend(
            [m.allocate([ids[1]]), m.devices(),
             m.apply_events([GPUEvent(0, EventKind.XID, 79)])]))  # a new error mid-probe
        other.start()
        other.join(1.0)
        assert len(done) == 3, "Allocate / devices() / apply_events waited for the probe"
    finally:
        release.set()
        t.join(5)
    # The error that came during the probe is newer than the probe: the GPU stays Unhealthy.
    assert back == [[]] and m.devices()[0].health == "Unhealthy"
    assert m.recover(lambda i: True) == [0] and m.devices()[0].health == "Healthy"
