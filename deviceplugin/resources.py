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

    def wait_for_change(self, seen: int, timeout_s: float) -> int:
        """Block until ``version`` differs from ``seen`` (or timeout); return the version."""
        with self._cond:
            self._cond.wait_for(lambda: self.version != seen, timeout=timeout_s)
            return self.version

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
            if all(st.healthy for st in self.tracker.states):
                return []  # the common case: no probe calls at all
            back = self.tracker.recover(check)
            for i in back:
                log.info("GPU %d Healthy again", i)
                self._publish(i, time.monotonic())
            return back

    def health_snapshot(self) -> list[tuple[bool, str, int, int | None]]:
        """(healthy, reason, xid count, last xid) per GPU, for telemetry."""
        with self._cond:
            return [(s.healthy, s.reason, s.xid_count, s.last_xid) for s in self.tracker.states]

    # --- allocation -----------------------------------------------------------------------
    def preferred(
        self, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> list[str]:
        try:
            return self.topology.preferred(available, must_include, size)
        except ValueError as exc:
            raise AllocationError(str(exc)) from exc

    def allocate(self, ids: Sequence[str]) -> ContainerAllocation:
        unknown = [d for d in ids if d not in self.index_of]
        if unknown:
            raise AllocationError(f"unknown device IDs {unknown}")
        if not ids:
            raise AllocationError("empty device list")
        with self._cond:
            sick = [d for d in ids if not self.tracker.states[self.index_of[d]].healthy]
        if sick:
            raise AllocationError(f"devices {sick} are Unhealthy")
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
        unknown = [d for d in ids if d not in self.index_of]
        if unknown:
            raise AllocationError(f"unknown device IDs {unknown}")
