"""A stand-in ``pynvml`` module: 4 GPUs, GPU0<->GPU1 on a direct NVLink, GPU2 and GPU3 on an
NVSwitch, GPU3 without power readings, a queue of events. Used to run NvmlBackend's own code
on machines without a GPU."""

from __future__ import annotations

import queue
import types
from types import SimpleNamespace
from typing import Any

GIB = 1024**3
SWITCH_BUS = "00000000:AA:00.0"


def _bus(h: int) -> str:
    return f"00000000:1{h}:00.0"


def make_pynvml(n: int = 4, init_error: bool = False, counters: bool = False,
                lost_at_init: int | None = None) -> Any:
    """``lost_at_init``: nvmlInit works but that GPU's handle cannot be had (``GpuIsLost``), as
    when a GPU fell off the bus before the agent started. ``counters``: the driver keeps
    cumulative PCIe byte and NVLink KiB counters (Hopper and newer); each GPU h moves
    ``m.pcie_bps[h]`` bytes/s TX, twice that RX, on the stub's clock ``m.now``, and the 20 ms
    ``nvmlDeviceGetPcieThroughput`` then fails the test if called."""
    m: Any = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    class NotSupported(NVMLError):
        pass

    class Timeout(NVMLError):
        pass

    class GpuIsLost(NVMLError):
        pass

    class LibraryNotFound(NVMLError):
        pass

    m.NVMLError, m.NVMLError_Timeout, m.NVMLError_GpuIsLost = NVMLError, Timeout, GpuIsLost
    m.NVMLError_NotSupported, m.NVMLError_LibraryNotFound = NotSupported, LibraryNotFound
    m.NVML_NVLINK_MAX_LINKS, m.NVML_FEATURE_ENABLED = 4, 1
    m.NVML_TEMPERATURE_GPU, m.NVML_CLOCK_SM = 0, 1
    m.NVML_PCIE_UTIL_TX_BYTES, m.NVML_PCIE_UTIL_RX_BYTES = 0, 1
    m.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, m.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 138, 139
    m.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, m.NVML_FI_DEV_PCIE_COUNT_RX_BYTES = 197, 198
    m.now = 0.0
    m.pcie_bps = [1024.0 * (h + 1) for h in range(n)]
    m.nvmlEventTypeXidCriticalError, m.nvmlEventTypeDoubleBitEccError = 8, 2
    m.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, m.NVML_VOLATILE_ECC = 1, 0
    m.NVML_TOPOLOGY_SINGLE, m.NVML_TOPOLOGY_MULTIPLE, m.NVML_TOPOLOGY_SYSTEM = 10, 20, 50
    m.events = queue.Queue()
    m.lost = set()
    # GPU0 <-> GPU1 directly; GPU2 and GPU3 each have one link to an NVSwitch.
    links = {(0, 0): _bus(1), (1, 0): _bus(0), (2, 0): SWITCH_BUS, (3, 0): SWITCH_BUS}

    m.initialised = 0

    def init() -> None:
        if init_error:
            raise LibraryNotFound("NVML Shared Library Not Found")
        m.initialised += 1

    def shutdown() -> None:
        m.initialised -= 1

    def handle(i: int) -> int:
        if i == lost_at_init:
            raise GpuIsLost()
        return i

    def link_remote(h: int, link: int) -> Any:
        if (h, link) not in links:
            raise NotSupported()
        return SimpleNamespace(busId=links[(h, link)].encode())

    def power(h: int) -> int:
        if h == 3:
            raise NotSupported()
        return 70_000 + h

    def temp(h: int, kind: int) -> int:
        if h in m.lost:
            raise GpuIsLost()
        return 40 + h

    def wait(s: Any, ms: int) -> Any:
        try:
            return m.events.get(timeout=ms / 1000)
        except queue.Empty:
            raise Timeout() from None

    m.nvmlInit, m.nvmlShutdown = init, shutdown
    m.nvmlDeviceGetCount = lambda: n
    m.nvmlDeviceGetHandleByIndex = handle
    m.nvmlDeviceGetIndex = lambda h: h
    # GPUs 0 and 1 share a PCIe switch, 2 and 3 another; the pairs meet only at the CPU.
    m.nvmlDeviceGetTopologyCommonAncestor = lambda a, b: 10 if a // 2 == b // 2 else 50
    m.nvmlDeviceGetPciInfo = lambda h: SimpleNamespace(busId=_bus(h).encode())
    m.nvmlDeviceGetNvLinkState = lambda h, link: 1 if (h, link) in links else 0
    m.nvmlDeviceGetNvLinkRemotePciInfo = link_remote
    m.nvmlDeviceGetUUID = lambda h: f"GPU-{h:08d}"
    m.nvmlDeviceGetName = lambda h: b"Tesla T4"
    m.nvmlDeviceGetMemoryInfo = lambda h: SimpleNamespace(total=16 * GIB, used=GIB, free=15 * GIB)
    m.nvmlDeviceGetUtilizationRates = lambda h: SimpleNamespace(gpu=10 * h)
    m.nvmlDeviceGetPowerUsage = power
    m.nvmlDeviceGetTemperature = temp
    m.nvmlDeviceGetClockInfo = lambda h, c: 1500
    m.nvmlDeviceGetTotalEccErrors = lambda h, kind, counter: (
        h if (kind, counter) == (1, 0) else -1)
    def counter(h: int, field: int) -> float:
        rate = {197: m.pcie_bps[h], 198: 2 * m.pcie_bps[h], 138: 10.0, 139: 30.0}[field]
        return rate * m.now

    def field_values(h: int, fields: list[int]) -> list[Any]:
        if not counters:
            raise NotSupported()
        return [SimpleNamespace(nvmlReturn=0, value=SimpleNamespace(ullVal=int(counter(h, f))))
                for f in fields]

    def pcie_throughput(h: int, c: int) -> int:
        assert not counters, "the 20 ms PCIe throughput call was used despite the counters"
        return 100 * (c + 1)

    m.nvmlDeviceGetPcieThroughput = pcie_throughput
    m.nvmlDeviceGetFieldValues = field_values
    m.nvmlEventSetCreate = lambda: "set"
    m.nvmlEventSetFree = lambda s: None
    m.nvmlDeviceGetSupportedEventTypes = lambda h: 0xFF
    m.nvmlDeviceRegisterEvents = lambda h, types_, s: None
    m.nvmlEventSetWait_v2 = wait
    return m
