"""A scriptable GPU backend: N GPUs of a model, an NVLink topology, utilisation curves,
injected Xid / ECC events and removal. Deterministic (no clock reads unless sampling).

It is the stand-in for NVML everywhere a GPU is absent, so it must behave like NVML where the
agent can tell: events queue up and wake ``wait_events`` at once, a removed GPU answers
nothing (NaN readings, failed checks) until restored.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from deviceplugin.backend import COL, BackendUnavailable, EventKind, GPUEvent
from deviceplugin.topology import nvlink_domains
from dsan.api.telemetry import GPUInfo

#: t (seconds since start) -> utilisation percent per GPU, shape (n,).
UtilCurve = Callable[[float], np.ndarray]

# DGX-1's hybrid cube mesh: each GPU has NVLinks to 3 in its quad and 1 in the other.
_DGX1: dict[int, tuple[int, ...]] = {
    0: (1, 2, 3, 4), 1: (0, 2, 3, 5), 2: (0, 1, 3, 6), 3: (0, 1, 2, 7),
    4: (0, 5, 6, 7), 5: (1, 4, 6, 7), 6: (2, 4, 5, 7), 7: (3, 4, 5, 6),
}
TOPOLOGIES = ("two-quads", "dgx1", "nvswitch", "none")


def topology_peers(name: str, n: int) -> dict[int, tuple[int, ...]]:
    """NVLink peers of each GPU for a named topology."""
    if name == "none":
        return {i: () for i in range(n)}
    if name == "nvswitch":
        return {i: tuple(j for j in range(n) if j != i) for i in range(n)}
    if name == "two-quads":  # two fully meshed halves, no link between them
        half = max(1, n // 2)
        return {i: tuple(j for j in range(n) if j != i and j // half == i // half)
                for i in range(n)}
    if name == "dgx1":
        if n != 8:
            raise ValueError(f"topology 'dgx1' needs 8 GPUs, got {n}")
        return dict(_DGX1)
    raise ValueError(f"unknown fake topology {name!r}; choose one of {TOPOLOGIES}")


def sine_curve(n: int, period_s: float = 60.0, base: float = 50.0, amp: float = 40.0) -> UtilCurve:
    phase = np.linspace(0.0, 2 * math.pi, n, endpoint=False)

    def curve(t: float) -> np.ndarray:
        return np.clip(base + amp * np.sin(2 * math.pi * t / period_s + phase), 0.0, 100.0)

    return curve


class FakeBackend:
    name = "fake"

    def __init__(
        self,
        n_gpus: int = 8,
        model: str = "A100-SXM4-80GB",
        memory_mib: int = 81920,
        topology: str | Mapping[int, Sequence[int]] = "two-quads",
        util_curve: UtilCurve | None = None,
        *,
        unavailable: bool = False,
        events_supported: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if n_gpus < 0:
            raise ValueError(f"n_gpus must be >= 0, got {n_gpus}")
        self.n = n_gpus
        self.model = model
        self.memory_mib = memory_mib
        peers = topology_peers(topology, n_gpus) if isinstance(topology, str) else {
            i: tuple(topology.get(i, ())) for i in range(n_gpus)}
        self.peers = peers
        self.unavailable = unavailable
        self.events_supported = events_supported
        self.util_curve = util_curve or sine_curve(n_gpus)
        self._clock = clock
        self._t0 = clock()
        self._events: queue.Queue[GPUEvent] = queue.Queue()
        self._lock = threading.Lock()
        self._present = np.ones(n_gpus, dtype=bool)
        self._failing: set[int] = set()
        self._watching = False
        self.initialised = False
        self.samples_taken = 0
        self._dbe = np.zeros(n_gpus)
        self._links = np.array([bool(peers[i]) for i in range(n_gpus)], dtype=bool)

    # --- scripting ------------------------------------------------------------------------
    def inject_xid(self, index: int, xid: int) -> None:
        self._emit(GPUEvent(index, EventKind.XID, xid, time.monotonic()))

    def inject_ecc_dbe(self, index: int) -> None:
        with self._lock:
            self._dbe[index] += 1  # the counter moves even when nobody watches events
        self._emit(GPUEvent(index, EventKind.ECC_DBE, 48, time.monotonic()))

    def set_check_failing(self, index: int, failing: bool = True) -> None:
        """Make the health probe fail (a GPU that has not recovered yet)."""
        with self._lock:
            (self._failing.add if failing else self._failing.discard)(index)

    def remove(self, index: int) -> None:
        """The GPU falls off the bus: readings become NaN, checks fail, a LOST event fires."""
        with self._lock:
            self._present[index] = False
        self._emit(GPUEvent(index, EventKind.LOST, 79, time.monotonic()))

    def restore(self, index: int) -> None:
        with self._lock:
            self._present[index] = True
            self._failing.discard(index)

    def _emit(self, ev: GPUEvent) -> None:
        if not 0 <= ev.index < self.n:
            raise IndexError(f"no GPU {ev.index} (have {self.n})")
        if self._watching:
            self._events.put(ev)

    # --- GPUBackend ---------------------------------------------------------------------
    def init(self) -> None:
        if self.unavailable:
            raise BackendUnavailable("fake backend configured as unavailable (no driver)")
        self.initialised = True

    def shutdown(self) -> None:
        self.initialised = False
        self._watching = False

    def devices(self) -> list[GPUInfo]:
        domains = nvlink_domains(self.peers)
        return [
            GPUInfo(
                uuid=f"GPU-fake{i:04d}-0000-0000-0000-{i:012d}",
                index=i,
                model=self.model,
                memory_total_mib=self.memory_mib,
                nvlink_domain=domains[i],
                nvlink_peers=tuple(sorted(self.peers[i])),
                pci_bus_id=f"00000000:{0x10 + i:02X}:00.0",
            )
            for i in range(self.n)
        ]

    def numa_node(self, index: int) -> int | None:
        return 0 if self.n < 2 else index // max(1, self.n // 2)

    def pcie_switch(self, index: int) -> int | None:
        return index // 2  # two GPUs per switch, as on DGX boards

    def sample(self, out: np.ndarray) -> None:
        # Vectorised over GPUs: one curve call, a handful of array ops.
        util = np.asarray(self.util_curve(self._clock() - self._t0), dtype=np.float64)
        load = util / 100.0
        out[:, COL["util"]] = util
        used = np.round(self.memory_mib * (0.05 + 0.8 * load))
        out[:, COL["memoryUsedMiB"]] = used
        out[:, COL["memoryFreeMiB"]] = self.memory_mib - used
        out[:, COL["powerW"]] = 60.0 + 340.0 * load
        out[:, COL["temperatureC"]] = 32.0 + 45.0 * load
        out[:, COL["smClockMHz"]] = np.where(util > 0, 1410.0, 210.0)
        out[:, COL["pcieTxKBps"]] = 2.0e5 * load
        out[:, COL["pcieRxKBps"]] = 6.0e5 * load
        out[:, COL["nvlinkKBps"]] = np.where(self._links, 5.0e6 * load, np.nan)
        with self._lock:
            out[:, COL["eccDbeVolatile"]] = self._dbe
            out[~self._present, :] = np.nan
        self.samples_taken += 1

    def watch_events(self) -> bool:
        self._watching = self.events_supported
        return self._watching

    def wait_events(self, timeout_s: float) -> list[GPUEvent]:
        try:
            first = self._events.get(timeout=max(0.0, timeout_s))
        except queue.Empty:
            return []
        out = [first]
        while True:
            try:
                out.append(self._events.get_nowait())
            except queue.Empty:
                return out

    def check(self, index: int) -> bool:
        with self._lock:
            return bool(self._present[index]) and index not in self._failing

