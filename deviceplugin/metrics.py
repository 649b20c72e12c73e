"""``/metrics``: the newest sample per GPU under dcgm-exporter's metric names and labels, so
existing Grafana dashboards and alerts work unchanged, plus the agent's own health series.

A custom collector renders the sampler's latest row at scrape time (no per-sample metric
updates on the hot path). Every DCGM series is a gauge here: dcgm-exporter declares a few as
counters, but client_python would append ``_total`` to a counter and break the names.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Final

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import start_http_server

from deviceplugin.backend import COL
from deviceplugin.resources import ResourceManager
from deviceplugin.sampler import TelemetrySampler

#: dcgm-exporter name -> (sample column, help)
DCGM_FIELDS: Final = {
    "DCGM_FI_DEV_GPU_UTIL": ("util", "GPU utilization (in %)."),
    "DCGM_FI_DEV_FB_USED": ("memoryUsedMiB", "Framebuffer memory used (in MiB)."),
    "DCGM_FI_DEV_FB_FREE": ("memoryFreeMiB", "Framebuffer memory free (in MiB)."),
    "DCGM_FI_DEV_POWER_USAGE": ("powerW", "Power draw (in W)."),
    "DCGM_FI_DEV_GPU_TEMP": ("temperatureC", "GPU temperature (in C)."),
    "DCGM_FI_DEV_SM_CLOCK": ("smClockMHz", "SM clock frequency (in MHz)."),
    "DCGM_FI_DEV_PCIE_TX_THROUGHPUT": ("pcieTxKBps", "PCIe transmit throughput (in KB/s)."),
    "DCGM_FI_DEV_PCIE_RX_THROUGHPUT": ("pcieRxKBps", "PCIe receive throughput (in KB/s)."),
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": ("nvlinkKBps",
                                           "NVLink bandwidth, all links (in KB/s)."),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("eccDbeVolatile",
                                      "Double-bit ECC errors since the driver loaded."),
}
#: dcgm-exporter's per-GPU labels.
LABELS: Final = ("gpu", "UUID", "device", "modelName", "Hostname", "pci_bus_id")


class GPUCollector:
    def __init__(self, sampler: TelemetrySampler | None, manager: ResourceManager | None,
                 hostname: str, available: bool, reason: str = "") -> None:
        self.sampler = sampler
        self.manager = manager
        self.available = available
        self.reason = reason
        infos = manager.infos if manager is not None else []
        self._labels = [
            [str(d.index), d.uuid, f"nvidia{d.index}", d.model, hostname, d.pci_bus_id]
            for d in infos
        ]

    def collect(self) -> Iterator[Metric]:
        avail = GaugeMetricFamily("dsan_deviceplugin_telemetry_available",
                                  "1 when GPU telemetry is being sampled, 0 when degraded.",
                                  labels=["reason"])
        avail.add_metric([self.reason], 1.0 if self.available else 0.0)
        yield avail
        if self.sampler is not None:
            yield CounterMetricFamily("dsan_deviceplugin_samples", "Telemetry samples taken.",
                                      value=self.sampler.samples)
            yield CounterMetricFamily("dsan_deviceplugin_sample_errors",
                                      "Telemetry samples that failed.", value=self.sampler.errors)
            yield CounterMetricFamily("dsan_deviceplugin_sample_cpu_seconds",
                                      "CPU time spent sampling.", value=self.sampler.cpu_seconds)
        latest = self.sampler.latest() if self.sampler is not None else None
        if latest is not None:
            _, row = latest
            for name, (col, help_text) in DCGM_FIELDS.items():
                fam = GaugeMetricFamily(name, help_text, labels=list(LABELS))
                values = row[:, COL[col]]
                for labels, v in zip(self._labels, values, strict=True):
                    if not math.isnan(v):  # unsupported on this GPU: no series, not a 0
                        fam.add_metric(labels, float(v))
                yield fam
        if self.manager is not None:
            xid = GaugeMetricFamily("DCGM_FI_DEV_XID_ERRORS",
                                    "Value of the last XID error encountered.",
                                    labels=list(LABELS))
            healthy = GaugeMetricFamily("dsan_gpu_healthy",
                                        "1 when the device plugin reports the GPU Healthy.",
                                        labels=list(LABELS))
            count = CounterMetricFamily("dsan_gpu_xid_errors", "Xid events seen, any kind.",
                                        labels=list(LABELS))
            for labels, (ok, _reason, n_xid, last) in zip(
                    self._labels, self.manager.health_snapshot(), strict=True):
                xid.add_metric(labels, float(last or 0))
                healthy.add_metric(labels, 1.0 if ok else 0.0)
                count.add_metric(labels, float(n_xid))
            yield xid
            yield healthy
            yield count


class MetricsServer:
    """A private registry served over HTTP on ``addr:port`` (port 0 = any free port)."""

    def __init__(self, collector: GPUCollector, addr: str, port: int) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(collector)
        self._server, self._thread = start_http_server(port, addr=addr, registry=self.registry)
        self.port = int(self._server.server_port)
        self.addr = addr

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
