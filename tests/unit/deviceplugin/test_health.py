"""Health rules: critical Xid / DBE -> Unhealthy, application Xids counted only, recovery after
a quiet period and a passing probe."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import pytest

from deviceplugin.backend import EventKind, GPUEvent
from deviceplugin.config import DEFAULT_IGNORED_XIDS
from deviceplugin.fake import FakeBackend
from deviceplugin.health import HealthMonitor, HealthTracker


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_application_xids_are_counted_not_fatal() -> None:
    h = HealthTracker(2, DEFAULT_IGNORED_XIDS)
    assert not h.observe(GPUEvent(0, EventKind.XID, 13))
    assert h.states[0].healthy and h.states[0].xid_count == 1 and h.states[0].last_xid == 13


def test_critical_xid_and_dbe_and_loss_are_fatal_once() -> None:
    h = HealthTracker(3, DEFAULT_IGNORED_XIDS)
    assert h.observe(GPUEvent(0, EventKind.XID, 79))
    assert not h.observe(GPUEvent(0, EventKind.XID, 48))  # already Unhealthy: no new change
    assert h.states[0].reason == "Xid 48" and h.states[0].xid_count == 2
    assert h.observe(GPUEvent(1, EventKind.ECC_DBE, 48))
    assert h.observe(GPUEvent(2, EventKind.LOST))
    assert [s.healthy for s in h.states] == [False, False, False]
    assert not h.observe(GPUEvent(9, EventKind.XID, 79))  # unknown index: ignored, logged


def test_recovery_needs_quiet_period_and_passing_probe() -> None:
    clock = Clock()
    h = HealthTracker(2, (), recovery_quiet_s=30, clock=clock)
    h.observe(GPUEvent(1, EventKind.XID, 79))
    clock.t += 29
    assert h.recover(lambda i: True) == []
    clock.t += 2
    assert h.recover(lambda i: False) == []  # quiet but still broken
    h.observe(GPUEvent(1, EventKind.XID, 79))  # new error restarts the quiet period
    clock.t += 10
    assert h.recover(lambda i: True) == []
    clock.t += 25
    assert h.recover(lambda i: True) == [1]
    assert h.states[1].healthy and h.states[1].reason == ""


def test_disabled_health_never_marks_unhealthy_but_counts() -> None:
    h = HealthTracker(1, (), enabled=False)
    assert not h.observe(GPUEvent(0, EventKind.XID, 79))
    assert h.states[0].healthy and h.states[0].xid_count == 1


def test_a_persistently_failing_event_wait_is_logged_sparsely(
        caplog: pytest.LogCaptureFixture) -> None:
    # A driver stuck in an error state fails every wait; the loop goes on, the log does not
    # fill with a traceback every poll.
    class Broken(FakeBackend):
        waits = 0

        def wait_events(self, timeout_s: float) -> list[GPUEvent]:
            self.waits += 1
            raise RuntimeError("NVML_ERROR_UNKNOWN")

    class Sink:
        def apply_events(self, events: list[GPUEvent]) -> bool:
            return False

        def recover(self, check: Callable[[int], bool]) -> list[int]:
            return []

    backend = Broken(1)
    mon = HealthMonitor(backend, Sink(), poll_s=0.005)
    with caplog.at_level(logging.ERROR, logger="deviceplugin.health"):
        assert mon.start()
        deadline = time.monotonic() + 5
        while backend.waits < 64 and time.monotonic() < deadline:
            time.sleep(0.01)
        mon.stop()
    assert backend.waits >= 64 and not mon.crashed
    assert len(caplog.records) <= 8, len(caplog.records)  # 1st, 2nd, 4th, ... 64th
