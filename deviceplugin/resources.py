"""The resource manager: owns the node's GPUs, their health, allocation and change feed.

The servicer asks it everything and knows nothing about GPUs; the health monitor and the
telemetry sampler feed it. Every health change bumps ``version`` and wakes the ListAndWatch
streams waiting in :meth:`ResourceManager.wait_for_change`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from deviceplugin.backend import GPUEvent
from deviceplugin.config import PluginConfig
from deviceplugin.health import HealthTracker
from deviceplugin.topology import Topology
from dsan.api.telemetry import HEALTHY, UNHEALTHY, GPUInfo

log = logging.getLogger(__name__)

# Device nodes every CUDA container needs besides its own /dev/nvidiaN.
_CONTROL_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
# An error names a few IDs, each cut short: gRPC carries the message in a header, and
# 10,000 IDs (180 KB) exceed the client's 16 KB limit, so the caller would get an opaque
# RESOURCE_EXHAUSTED instead of our INVALID_ARGUMENT.
_NAMED_IDS = 4
_ID_CHARS = 64


def name_ids(ids: Sequence[str]) -> str:
    """``['GPU-a', 'GPU-b'] and 3 more``: a bounded rendering of ``ids`` for messages."""
    shown = [d if len(d) <= _ID_CHARS else d[:_ID_CHARS] + "..." for d in ids[:_NAMED_IDS]]
    more = len(ids) - len(shown)
    return f"{shown}" + (f" and {more} more" if more else "")


class AllocationError(ValueError):
    """kubelet asked for something this plugin cannot give; the message says what."""


@dataclass(frozen=True)
class DeviceView:
    id: str
    index: int
    health: str
    numa_node: int | None
    reason: str = ""


@dataclass
class ContainerAllocation:
    envs: dict[str, str] = field(default_factory=dict)
    #: (container_path, host_path, permissions)
    device_specs: list[tuple[str, str, str]] = field(default_factory=list)
    cdi_devices: list[str] = field(default_factory=list)


class ResourceManager:
    def __init__(
        self,
        devices: Sequence[GPUInfo],
        numa_nodes: Sequence[int | None],
        config: PluginConfig,
        clock: Callable[[], float] = time.monotonic,
        pcie_switches: Sequence[int | None] | None = None,
    ) -> None:
        self.config = config
        self.infos = list(devices)
        self.numa = list(numa_nodes)
        self.index_of = {d.uuid: d.index for d in self.infos}
        self.tracker = HealthTracker(
            len(self.infos), config.ignored_xids, config.recovery_quiet_s,
            enabled=config.health_enabled, clock=clock)
        self.topology = Topology.build(
            [d.uuid for d in self.infos], [d.nvlink_peers for d in self.infos],
            [d.nvlink_domain for d in self.infos], self.numa, pcie_switches)
        self.version = 0
        self._cond = threading.Condition()
        #: (index, monotonic time the backend saw the event, time the change was published)
        self.last_change: tuple[int, float, float] | None = None

    # --- change feed ----------------------------------------------------------------------
    def devices(self) -> list[DeviceView]:
        with self._cond:
            return [
                DeviceView(d.uuid, d.index, HEALTHY if st.healthy else UNHEALTHY,
                           self.numa[d.index], st.reason)
                for d, st in zip(self.infos, self.tracker.states, strict=True)
            ]

    def wait_for_change(self, seen: int, timeout_s: float,
                        cancelled: threading.Event | None = None) -> int:
        """Block until ``version`` differs from ``seen``, ``cancelled`` is set (then
        :meth:`wake` ends the wait at once) or timeout; return the version."""
        with self._cond:
            self._cond.wait_for(
                lambda: self.version != seen or (cancelled is not None and cancelled.is_set()),
                timeout=timeout_s)
            return self.version

    def wake(self) -> None:
        """Make every waiter re-check its condition (a cancelled stream leaves at once)."""
        with self._cond:
            self._cond.notify_all()

    def _publish(self, index: int, seen_at: float) -> None:
        self.version += 1
        self.last_change = (index, seen_at, time.monotonic())
        self._cond.notify_all()

    def apply_events(self, events: list[GPUEvent]) -> bool:
        changed = False
        with self._cond:
            for ev in events:
                if self.tracker.observe(ev):
                    changed = True
                    log.warning("GPU %d Unhealthy: %s", ev.index,
                                self.tracker.states[ev.index].reason)
                    self._publish(ev.index, ev.seen_at)
        return changed

    def recover(self, check: Callable[[int], bool]) -> list[int]:
        with self._cond:
            due = self.tracker.due()
        if not due:
            return []  # the common case: no probe calls at all
        # Probed without the lock: an NVML call on a sick GPU can take seconds, and Allocate
        # and ListAndWatch must not wait for it.
        passed = [(i, seen) for i, seen in due if check(i)]
        with self._cond:
            back = self.tracker.restore(passed)
            for i in back:
                log.info("GPU %d Healthy again", i)
                self._publish(i, time.monotonic())
            return back

    def health_snapshot(self) -> list[tuple[bool, str, int, int | None]]:
        """(healthy, reason, xid count, last xid) per GPU, for telemetry."""
        with self._cond:
            return [(s.healthy, s.reason, s.xid_count, s.last_xid) for s in self.tracker.states]

    # --- allocation -----------------------------------------------------------------------
    def check_ids(self, ids: Sequence[str], what: str = "device IDs") -> None:
        """Refuse what kubelet never sends, cheaply and with a bounded message: more IDs than
        the node has GPUs (checked first, so a flood costs one ``len``), duplicates, unknown
        IDs."""
        n = len(self.infos)
        if len(ids) > n:
            raise AllocationError(f"{len(ids)} {what} requested, the node has {n} GPUs")
        seen: set[str] = set()
        dup: set[str] = set()
        for d in ids:
            (dup if d in seen else seen).add(d)
        if dup:
            raise AllocationError(f"duplicate {what} {name_ids(sorted(dup))}")
        unknown = [d for d in ids if d not in self.index_of]
        if unknown:
            raise AllocationError(f"unknown {what} {name_ids(unknown)}")

    def preferred(
        self, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> list[str]:
        self.check_ids(available, "available device IDs")
        self.check_ids(must_include, "must-include device IDs")
        try:
            return self.topology.preferred(available, must_include, size)
        except ValueError as exc:
            raise AllocationError(str(exc)) from exc

    def allocate_request(self, containers: Sequence[Sequence[str]]) -> list[ContainerAllocation]:
        """One AllocateRequest: every container's IDs checked together (a GPU cannot go to two
        containers), then one allocation per container."""
        flat = [d for ids in containers for d in ids]
        self.check_ids(flat)
        return [self.allocate(ids) for ids in containers]

    def allocate(self, ids: Sequence[str]) -> ContainerAllocation:
        if not ids:
            raise AllocationError("empty device list")
        self.check_ids(ids)
        with self._cond:
            sick = [d for d in ids if not self.tracker.states[self.index_of[d]].healthy]
        if sick:
            raise AllocationError(f"devices {name_ids(sick)} are Unhealthy")
        out = ContainerAllocation()
        modes = self.config.allocate_modes
        if "envvar" in modes:
            out.envs["NVIDIA_VISIBLE_DEVICES"] = ",".join(ids)
        if "device-specs" in modes:
            paths = [f"/dev/nvidia{self.index_of[d]}" for d in ids] + list(_CONTROL_DEVICES)
            out.device_specs = [(p, p, "rw") for p in paths]
        if "cdi" in modes:
            out.cdi_devices = [f"{self.config.cdi_kind}={d}" for d in ids]
        return out

    def check_known(self, ids: Sequence[str]) -> None:
        self.check_ids(ids)
