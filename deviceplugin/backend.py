"""The GPU backend contract: what the agent needs from NVML, as a small Protocol.

:class:`~deviceplugin.nvml.NvmlBackend` implements it with pynvml, and
:class:`~deviceplugin.fake.FakeBackend` with scriptable numbers; both pass
``tests/unit/deviceplugin/test_backend_contract.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Final, Protocol

import numpy as np

from dsan.api.telemetry import GPUInfo

#: Columns of one sample row, in this order (``sample`` fills ``out[gpu, column]``).
#: NaN means "not supported on this GPU" and is never exported as a number.
SAMPLE_FIELDS: Final = (
    "util",           # GPU utilisation, percent
    "memoryUsedMiB",
    "memoryFreeMiB",
    "powerW",
    "temperatureC",
    "smClockMHz",
    "pcieTxKBps",
    "pcieRxKBps",
    "nvlinkKBps",     # NVLink traffic, all links, both directions
    "eccDbeVolatile",  # uncorrectable (double-bit) ECC errors since the driver loaded
)
N_FIELDS: Final = len(SAMPLE_FIELDS)
COL: Final = {name: i for i, name in enumerate(SAMPLE_FIELDS)}


class BackendUnavailable(RuntimeError):
    """The backend cannot start here (e.g. no NVIDIA driver: ``NVMLError_LibraryNotFound``)."""


class EventKind(Enum):
    XID = "xid"
    ECC_DBE = "ecc-double-bit"
    LOST = "gpu-lost"  # fell off the bus or was removed


@dataclass(frozen=True, slots=True)
class GPUEvent:
    index: int
    kind: EventKind
    xid: int = 0
    #: time.monotonic() when the backend saw the event (for latency accounting).
    seen_at: float = 0.0


class GPUBackend(Protocol):
    """What the agent needs from a GPU driver. Implementations must be thread-safe for
    ``sample`` / ``check`` from one thread concurrently with ``wait_events`` from another."""

    name: str

    def init(self) -> None:
        """Open the driver; raise :class:`BackendUnavailable` when there is none."""

    def shutdown(self) -> None: ...

    def devices(self) -> list[GPUInfo]:
        """Every GPU with identity and NVLink topology, ordered by index."""

    def numa_node(self, index: int) -> int | None:
        """The GPU's NUMA node (for kubelet's topology hints), ``None`` if unknown."""

    def pcie_switch(self, index: int) -> int | None:
        """An id shared by GPUs under the same PCIe switch, ``None`` if unknown."""

    def sample(self, out: np.ndarray) -> None:
        """Fill ``out`` (shape ``(len(devices()), N_FIELDS)``, float64) with current readings."""

    def watch_events(self) -> bool:
        """Start delivering health events; ``False`` when the driver cannot (health off)."""

    def wait_events(self, timeout_s: float) -> list[GPUEvent]:
        """Block up to ``timeout_s`` for Xid / ECC / lost events; ``[]`` on timeout."""

    def check(self, index: int) -> bool:
        """A device health probe: ``True`` when the GPU answers normally."""
