"""The real GPU backend: NVIDIA's NVML through nvidia-ml-py's ``pynvml`` module.

``pynvml`` is imported in :meth:`NvmlBackend.init`, never at import time, so the agent,
its tests and ``--help`` run on machines without a driver. There ``nvmlInit`` raises
``NVMLError_LibraryNotFound``, which becomes :class:`BackendUnavailable` and the agent
degrades. Readings a GPU does not support come back as NaN rather than failing the sample.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Final

import numpy as np

from deviceplugin.backend import COL, BackendUnavailable, EventKind, GPUEvent
from deviceplugin.topology import nvlink_domains
from dsan.api.telemetry import GPUInfo

_MIB = 1024 * 1024


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _norm_bus(bus_id: str) -> str:
    # NVML reports 8-hex-digit domains ("00000000:17:00.0"); sysfs uses 4 ("0000:17:00.0").
    bus = bus_id.lower()
    return bus[-12:] if len(bus) > 12 else bus


#: Cumulative counters read through nvmlDeviceGetFieldValues (names resolved on the module,
#: so an older pynvml without them degrades to the fallback instead of failing at import).
_PCIE_BYTES: Final = ["NVML_FI_DEV_PCIE_COUNT_TX_BYTES", "NVML_FI_DEV_PCIE_COUNT_RX_BYTES"]
_NVLINK_KIB: Final = ["NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX",
                      "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX"]


class NvmlBackend:
    name = "nvml"

    def __init__(self) -> None:
        self._nvml: Any = None
        self._handles: list[Any] = []
        self._infos: list[GPUInfo] = []
        self._event_set: Any = None
        #: (kind, gpu) -> (when, counter values) of the last sample, for rates.
        self._counter_prev: dict[tuple[str, int], tuple[float, list[float]]] = {}
        self._pcie_groups: list[int | None] | None = None

    def init(self) -> None:
        try:
            import pynvml
        except ImportError as exc:  # pragma: no cover - it is a declared dependency
            raise BackendUnavailable(f"pynvml not importable: {exc}") from exc
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise BackendUnavailable(f"nvmlInit failed: {exc} ({type(exc).__name__})") from exc
        self._nvml = pynvml
        try:
            count = pynvml.nvmlDeviceGetCount()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            self._infos = self._discover()
        except pynvml.NVMLError as exc:
            # A driver that loads but a GPU that does not answer (fallen off the bus, no
            # permission) is the agent's degraded start too, not an error it does not expect.
            self._handles, self._infos = [], []
            self.shutdown()
            raise BackendUnavailable(
                f"GPU discovery failed: {exc} ({type(exc).__name__})") from exc

    def shutdown(self) -> None:
        if self._nvml is None:
            return
        try:
            if self._event_set is not None:
                self._nvml.nvmlEventSetFree(self._event_set)
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError:
            pass
        self._nvml = None

    # --- discovery --------------------------------------------------------------------------
    def _discover(self) -> list[GPUInfo]:
        n = self._nvml
        buses = [_norm_bus(_text(n.nvmlDeviceGetPciInfo(h).busId)) for h in self._handles]
        by_bus = {b: i for i, b in enumerate(buses)}
        peers: dict[int, tuple[int, ...]] = {}
        for i, h in enumerate(self._handles):
            linked: set[int] = set()
            for link in range(int(getattr(n, "NVML_NVLINK_MAX_LINKS", 18))):
                try:
                    if n.nvmlDeviceGetNvLinkState(h, link) != n.NVML_FEATURE_ENABLED:
                        continue
                    remote = _norm_bus(_text(n.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId))
                except n.NVMLError:
                    continue  # link absent or NVLink unsupported on this GPU
                j = by_bus.get(remote)
                if j is not None and j != i:
                    linked.add(j)
                # A link to an NVSwitch (remote not a GPU) connects this GPU to every other
                # GPU on the switch; treat all switch-attached GPUs as peers below.
                elif j is None:
                    linked.add(-1)
            peers[i] = tuple(sorted(linked))
        on_switch = [i for i, p in peers.items() if -1 in p]
        for i in on_switch:
            peers[i] = tuple(sorted({j for j in peers[i] if j >= 0} | set(on_switch) - {i}))
        domains = nvlink_domains(peers)
        out = []
        for i, h in enumerate(self._handles):
            out.append(GPUInfo(
                uuid=_text(n.nvmlDeviceGetUUID(h)),
                index=i,
                model=_text(n.nvmlDeviceGetName(h)),
                memory_total_mib=int(n.nvmlDeviceGetMemoryInfo(h).total // _MIB),
                nvlink_domain=domains[i],
                nvlink_peers=peers[i],
                pci_bus_id=_text(n.nvmlDeviceGetPciInfo(h).busId),
            ))
        return out

    def devices(self) -> list[GPUInfo]:
        return list(self._infos)

    def numa_node(self, index: int) -> int | None:
        bus = _norm_bus(self._infos[index].pci_bus_id)
        try:
            node = int(Path(f"/sys/bus/pci/devices/{bus}/numa_node").read_text().strip())
        except (OSError, ValueError):
            return None
        return node if node >= 0 else None

    def pcie_switch(self, index: int) -> int | None:
        if self._pcie_groups is None:
            self._pcie_groups = self._discover_pcie()
        return self._pcie_groups[index]

    def _discover_pcie(self) -> list[int | None]:
        # GPUs whose closest common ancestor is at most a tree of PCIe switches share one.
        n = self._nvml
        count = len(self._handles)
        near: dict[int, list[int]] = {i: [] for i in range(count)}
        known = [True] * count
        for i in range(count):
            for j in range(i + 1, count):
                try:
                    level = n.nvmlDeviceGetTopologyCommonAncestor(self._handles[i],
                                                                 self._handles[j])
                except n.NVMLError:
                    known[i] = known[j] = False
                    continue
                if level <= n.NVML_TOPOLOGY_MULTIPLE:
                    near[i].append(j)
                    near[j].append(i)
        groups = nvlink_domains(near)  # connected components, the same helper as NVLink
        # A GPU alone under its switch is its own group; one we could not place is unknown.
        return [None if not known[i] else i if groups[i] is None else groups[i]
                for i in range(count)]

    # --- sampling -------------------------------------------------------------------------
    def sample(self, out: np.ndarray) -> None:
        n = self._nvml
        now = time.monotonic()
        for i, h in enumerate(self._handles):
            row = out[i]
            row[:] = np.nan
            row[COL["util"]] = self._read(lambda h=h: n.nvmlDeviceGetUtilizationRates(h).gpu)
            mem = self._read(lambda h=h: n.nvmlDeviceGetMemoryInfo(h), raw=True)
            if mem is not None:
                row[COL["memoryUsedMiB"]] = mem.used / _MIB
                row[COL["memoryFreeMiB"]] = mem.free / _MIB
            row[COL["powerW"]] = self._read(lambda h=h: n.nvmlDeviceGetPowerUsage(h) / 1000.0)
            row[COL["temperatureC"]] = self._read(
                lambda h=h: n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU))
            row[COL["smClockMHz"]] = self._read(
                lambda h=h: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM))
            row[COL["pcieTxKBps"]], row[COL["pcieRxKBps"]] = self._pcie_rates(i, h, now)
            row[COL["nvlinkKBps"]] = self._nvlink_rate(i, h, now)
            row[COL["eccDbeVolatile"]] = self._read(lambda h=h: n.nvmlDeviceGetTotalEccErrors(
                h, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_VOLATILE_ECC))

    def _read(self, fn: Any, raw: bool = False) -> Any:
        try:
            v = fn()
        except self._nvml.NVMLError:
            return None if raw else np.nan
        return v if raw else float(v)

    def _counter_rates(self, kind: str, i: int, h: Any, fields: list[str],
                       now: float) -> list[float] | None:
        """Per-second rates of the cumulative NVML counters ``fields`` of GPU ``i`` since its
        last sample (NaN on the first); None where the driver or pynvml lacks one of them."""
        n = self._nvml
        try:
            values = n.nvmlDeviceGetFieldValues(h, [getattr(n, f) for f in fields])
        except (n.NVMLError, AttributeError):
            return None
        if any(v.nvmlReturn != 0 for v in values):
            return None
        total = [float(v.value.ullVal) for v in values]
        prev = self._counter_prev.get((kind, i))
        self._counter_prev[(kind, i)] = (now, total)
        if prev is None or now <= prev[0]:
            return [np.nan] * len(fields)
        dt = now - prev[0]
        return [max(0.0, (t - p) / dt) for t, p in zip(total, prev[1], strict=True)]

    def _pcie_rates(self, i: int, h: Any, now: float) -> tuple[float, float]:
        # Byte counters first: nvmlDeviceGetPcieThroughput measures over a 20 ms window per
        # call, so TX + RX block the sampler 40 ms per GPU (42 ms per sample measured on an
        # H200, docs/results/gpu.md). GPUs or drivers without the counters still get it.
        rates = self._counter_rates("pcie", i, h, _PCIE_BYTES, now)
        if rates is not None:
            return rates[0] / 1024, rates[1] / 1024
        return self._pcie_throughput(h)

    def _pcie_throughput(self, h: Any) -> tuple[float, float]:
        """TX and RX KB/s from nvmlDeviceGetPcieThroughput: 20 ms of blocking per call."""
        n = self._nvml
        return (self._read(lambda: n.nvmlDeviceGetPcieThroughput(h, n.NVML_PCIE_UTIL_TX_BYTES)),
                self._read(lambda: n.nvmlDeviceGetPcieThroughput(h, n.NVML_PCIE_UTIL_RX_BYTES)))

    def _nvlink_rate(self, i: int, h: Any, now: float) -> float:
        # NVLink throughput is a cumulative KiB counter per direction: the rate of both.
        if not self._infos[i].nvlink_peers:
            return np.nan
        rates = self._counter_rates("nvlink", i, h, _NVLINK_KIB, now)
        return np.nan if rates is None else sum(rates)

    # --- health ---------------------------------------------------------------------------
    def watch_events(self) -> bool:
        n = self._nvml
        try:
            self._event_set = n.nvmlEventSetCreate()
        except n.NVMLError:
            return False
        wanted = n.nvmlEventTypeXidCriticalError | n.nvmlEventTypeDoubleBitEccError
        registered = 0
        for h in self._handles:
            try:
                supported = n.nvmlDeviceGetSupportedEventTypes(h)
                n.nvmlDeviceRegisterEvents(h, wanted & supported, self._event_set)
                registered += 1
            except n.NVMLError:
                continue  # this GPU cannot report events; the others still can
        return registered > 0

    def wait_events(self, timeout_s: float) -> list[GPUEvent]:
        n = self._nvml
        if self._event_set is None:
            time.sleep(timeout_s)
            return []
        try:
            data = n.nvmlEventSetWait_v2(self._event_set, int(timeout_s * 1000))
        except n.NVMLError_Timeout:
            return []
        except n.NVMLError_GpuIsLost:
            return [GPUEvent(i, EventKind.LOST, 79, time.monotonic())
                    for i in range(len(self._handles)) if not self.check(i)]
        seen = time.monotonic()
        try:
            index = int(n.nvmlDeviceGetIndex(data.device))
        except n.NVMLError:
            return []
        if data.eventType & n.nvmlEventTypeDoubleBitEccError:
            return [GPUEvent(index, EventKind.ECC_DBE, 48, seen)]
        return [GPUEvent(index, EventKind.XID, int(data.eventData), seen)]

    def check(self, index: int) -> bool:
        n = self._nvml
        try:
            n.nvmlDeviceGetUUID(self._handles[index])
            n.nvmlDeviceGetTemperature(self._handles[index], n.NVML_TEMPERATURE_GPU)
        except n.NVMLError:
            return False
        return True
