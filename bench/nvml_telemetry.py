"""The device plugin's telemetry path on real NVML: what one sample of every GPU costs.

`bench/test_deviceplugin.py` measures the agent with fake GPUs (it runs everywhere, CI too);
this script measures the same path over ``pynvml`` on a machine with an NVIDIA driver, beside
the fake backend and the PCIe readings as they were before the byte counters, in the same
process: discovery, one ``NvmlBackend.sample`` of every GPU (wall
and process CPU), a full ``TelemetrySampler.sample_once`` (sample + ring write + window
summaries), the health probe, and whether NVML delivers Xid events here. The readings of one
sample are printed so a reader can see what the H200 reported.

Run: ``python bench/nvml_telemetry.py --json out/nvml_telemetry.json``; exits 3 when NVML is
unavailable (no driver), so a caller can tell "no GPU" from a failure.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from deviceplugin.backend import COL, N_FIELDS, SAMPLE_FIELDS, BackendUnavailable, GPUBackend
from deviceplugin.fake import FakeBackend
from deviceplugin.nvml import NvmlBackend
from deviceplugin.sampler import TelemetrySampler


class LegacyPcieBackend(NvmlBackend):
    """NvmlBackend with the older PCIe readings: ``nvmlDeviceGetPcieThroughput`` per
    direction (20 ms each), for the side-by-side row."""

    def _pcie_rates(self, i: int, h: Any, now: float) -> tuple[float, float]:
        return self._pcie_throughput(h)


def _stats(fn: Callable[[], Any], reps: int) -> dict[str, float]:
    fn()
    wall: list[float] = []
    c0 = time.process_time()
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        wall.append(time.perf_counter() - t0)
    cpu = (time.process_time() - c0) / reps
    wall.sort()
    p99 = wall[min(reps - 1, math.ceil(0.99 * reps) - 1)]
    return {"wall_p50_us": statistics.median(wall) * 1e6, "wall_p99_us": p99 * 1e6,
            "cpu_us": cpu * 1e6, "reps": reps}


def measure(name: str, backend: GPUBackend, reps: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    backend.init()
    init_s = time.perf_counter() - t0
    devs = backend.devices()
    n = len(devs)
    out = np.full((n, N_FIELDS), np.nan)
    sampler = TelemetrySampler(backend, n, interval_s=1.0, window_s=10, horizon_s=300)
    for _ in range(sampler.capacity):  # a full ring, as at steady state
        sampler.sample_once()
    backend.sample(out)
    res: dict[str, Any] = {
        "backend": name, "gpus": n, "init_ms": init_s * 1e3,
        "devices": [{"index": d.index, "uuid": d.uuid, "model": d.model,
                     "memory_total_mib": d.memory_total_mib, "pci_bus_id": d.pci_bus_id,
                     "nvlink_peers": list(d.nvlink_peers)} for d in devs],
        "reading": {f: [None if math.isnan(v) else float(v) for v in out[:, COL[f]]]
                    for f in SAMPLE_FIELDS},
        "sample": _stats(lambda: backend.sample(out), reps),
        "sample_once": _stats(sampler.sample_once, reps),
        "check": _stats(lambda: [backend.check(d.index) for d in devs], reps),
        "numa": [backend.numa_node(d.index) for d in devs],
        "xid_events_supported": backend.watch_events(),
    }
    t0 = time.perf_counter()
    res["wait_events_0.1s"] = [str(e) for e in backend.wait_events(0.1)]
    res["wait_events_wall_ms"] = (time.perf_counter() - t0) * 1e3
    backend.shutdown()
    return res


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=500)
    p.add_argument("--json", help="write the results here")
    a = p.parse_args()
    try:
        real = measure("nvml", NvmlBackend(), a.reps)
    except BackendUnavailable as exc:
        print(f"NVML unavailable: {exc}", file=sys.stderr)
        return 3
    legacy = measure("nvml-legacy-pcie", LegacyPcieBackend(), max(20, a.reps // 10))
    fake = measure("fake", FakeBackend(real["gpus"]), a.reps)
    for r in (real, legacy, fake):
        print(f"{r['backend']}: {r['gpus']} GPU(s) init {r['init_ms']:.1f} ms; "
              + "; ".join(f"{k} p50 {r[k]['wall_p50_us']:.1f} us p99 {r[k]['wall_p99_us']:.1f} us "
                          f"cpu {r[k]['cpu_us']:.1f} us" for k in ("sample", "sample_once",
                                                                   "check"))
              + f"; xid events {r['xid_events_supported']}")
    print("nvml reading:", json.dumps(real["reading"]))
    print("nvml devices:", json.dumps(real["devices"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"nvml": real, "nvml_legacy_pcie": legacy, "fake": fake}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
