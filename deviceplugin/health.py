"""Device health: which events make a GPU Unhealthy and when it may come back.

A critical Xid or a double-bit ECC error marks the GPU Unhealthy at once; application Xids
(configurable, NVIDIA's set by default) are only counted. Unlike NVIDIA's plugin, a GPU is
not written off forever: once it has been quiet for ``recovery_quiet_s`` and the backend's
probe succeeds, it is Healthy again. :class:`HealthMonitor` is the thread that feeds backend
events into the resource manager and runs the recovery checks.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from deviceplugin.backend import EventKind, GPUBackend, GPUEvent

log = logging.getLogger(__name__)


@dataclass
class DeviceHealth:
    healthy: bool = True
    reason: str = ""
    last_bad: float = 0.0
    xid_count: int = 0
    last_xid: int | None = None
    #: Errors that counted against health: a probe started before the newest one is stale.
    bad_events: int = 0


class HealthTracker:
    """Health state of ``n`` GPUs; not thread-safe (the resource manager locks around it)."""

    def __init__(
        self,
        n: int,
        ignored_xids: Iterable[int] = (),
        recovery_quiet_s: float = 30.0,
        enabled: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.states = [DeviceHealth() for _ in range(n)]
        self.ignored = frozenset(ignored_xids)
        self.quiet_s = recovery_quiet_s
        self.enabled = enabled
        self._clock = clock

    def observe(self, ev: GPUEvent) -> bool:
        """Apply one event; ``True`` when a device's health changed."""
        if not 0 <= ev.index < len(self.states):
            log.warning("event for unknown GPU index %d ignored: %s", ev.index, ev)
            return False
        st = self.states[ev.index]
        if ev.kind is EventKind.XID:
            st.xid_count += 1
            st.last_xid = ev.xid
            if ev.xid in self.ignored:
                return False
            reason = f"Xid {ev.xid}"
        elif ev.kind is EventKind.ECC_DBE:
            reason = "double-bit ECC error"
        else:
            reason = "GPU lost"
        if not self.enabled:
            return False
        st.last_bad = self._clock()
        st.bad_events += 1
        changed = st.healthy
        st.healthy, st.reason = False, reason
        return changed

    def recover(self, check: Callable[[int], bool]) -> list[int]:
        """Bring back devices that were quiet long enough and pass ``check``."""
        return self.restore([(i, seen) for i, seen in self.due() if check(i)])

    def due(self) -> list[tuple[int, int]]:
        """(index, ``bad_events``) of each Unhealthy device quiet long enough to be probed."""
        now = self._clock()
        return [(i, st.bad_events) for i, st in enumerate(self.states)
                if not st.healthy and now - st.last_bad >= self.quiet_s]

    def restore(self, passed: Iterable[tuple[int, int]]) -> list[int]:
        """Mark Healthy the devices from :meth:`due` whose probe passed, unless a new error
        came while they were probed; return those brought back."""
        back = []
        for i, seen in passed:
            st = self.states[i]
            if not st.healthy and st.bad_events == seen:
                st.healthy, st.reason = True, ""
                back.append(i)
        return back


class _Sink(Protocol):
    """What the monitor needs from the resource manager."""

    def apply_events(self, events: list[GPUEvent]) -> bool: ...
    def recover(self, check: Callable[[int], bool]) -> list[int]: ...


class HealthMonitor:
    """Thread: wait for backend events, hand them to the manager, retry recoveries."""

    def __init__(self, backend: GPUBackend, manager: _Sink, poll_s: float = 0.2) -> None:
        self.backend = backend
        self.manager = manager
        self.poll_s = poll_s
        self.enabled = False
        self.errors = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> bool:
        """Start watching; ``False`` (health off, all stay Healthy) if events are unsupported."""
        try:
            self.enabled = self.backend.watch_events()
        except Exception:  # an optional feature: degrade, never crash the agent
            log.exception("health events unavailable; health checking is off")
            self.enabled = False
        if not self.enabled:
            log.warning("backend %s cannot deliver health events; health checking is off",
                        self.backend.name)
            return False
        self._thread = threading.Thread(target=self._run, name="health", daemon=True)
        self._thread.start()
        return True

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                events = self.backend.wait_events(self.poll_s)
                if events:
                    self.manager.apply_events(events)
                self.manager.recover(self.backend.check)
            except Exception:
                self.errors += 1
                if self.errors & (self.errors - 1) == 0:  # 1st, 2nd, 4th...: no log flood
                    log.exception("health loop error; continuing")
                self._stop.wait(self.poll_s)

    @property
    def crashed(self) -> bool:
        """Its thread ended without stop() (a bug): /healthz fails, kubelet restarts us."""
        return self._thread is not None and not self._thread.is_alive() and not self._stop.is_set()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
