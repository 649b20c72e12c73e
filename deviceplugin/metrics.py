"""``/metrics``, ``/healthz`` and ``/readyz`` on one small HTTP server.

``/metrics`` renders the newest sample per GPU under dcgm-exporter's metric names, labels and
TYPEs (its ``etc/default-counters.csv``: counters stay counters, named without ``_total``
exactly as dcgm-exporter names them), so existing Grafana dashboards and alerts work
unchanged, plus the agent's own series. client_python would append ``_total`` to every
counter, so the text format (0.0.4) is written here; nothing is updated per sample, the
collector reads the sampler, the resource manager and the pod attribution at scrape time.

Per-GPU series carry dcgm-exporter's Kubernetes labels ``pod``, ``namespace``, ``container``
(empty when no container holds the GPU or attribution is off). A GPU shared by several
containers keeps one series per metric, labelled with the first of them, as dcgm-exporter
does without its virtual-GPU mode; ``dsan_gpu_pod_info`` lists every holder.
"""

from __future__ import annotations

import logging
import math
import socket
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Final

from prometheus_client.utils import floatToGoString

from deviceplugin.attribution import PodAttribution
from deviceplugin.backend import COL
from deviceplugin.resources import ResourceManager
from deviceplugin.sampler import TOTAL_FIELDS, TelemetrySampler
from dsan.api.telemetry import PodRef

log = logging.getLogger(__name__)
GAUGE: Final = "gauge"
COUNTER: Final = "counter"

#: dcgm-exporter name -> (sample column, dcgm-exporter's TYPE, help). Types as in dcgm-exporter's
#: etc/default-counters.csv (ECC_DBE_VOL_TOTAL is listed there, commented out, as a counter).
#: Counter columns are running totals: the sampler integrates the PCIe / NVLink rates, the ECC
#: count is NVML's volatile total.
DCGM_FIELDS: Final = {
    "DCGM_FI_DEV_GPU_UTIL": ("util", GAUGE, "GPU utilization (in %)."),
    "DCGM_FI_DEV_FB_USED": ("memoryUsedMiB", GAUGE, "Framebuffer memory used (in MiB)."),
    "DCGM_FI_DEV_FB_FREE": ("memoryFreeMiB", GAUGE, "Framebuffer memory free (in MiB)."),
    "DCGM_FI_DEV_POWER_USAGE": ("powerW", GAUGE, "Power draw (in W)."),
    "DCGM_FI_DEV_GPU_TEMP": ("temperatureC", GAUGE, "GPU temperature (in C)."),
    "DCGM_FI_DEV_SM_CLOCK": ("smClockMHz", GAUGE, "SM clock frequency (in MHz)."),
    "DCGM_FI_DEV_PCIE_TX_THROUGHPUT": (
        "pcieTxKBps", COUNTER, "Total number of bytes transmitted through PCIe TX (in KB)."),
    "DCGM_FI_DEV_PCIE_RX_THROUGHPUT": (
        "pcieRxKBps", COUNTER, "Total number of bytes received through PCIe RX (in KB)."),
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": (
        "nvlinkKBps", COUNTER, "Total NVLink traffic over all links, both directions (in KB)."),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": (
        "eccDbeVolatile", COUNTER, "Total number of double-bit volatile ECC errors."),
}
#: The one dcgm field that comes from health events, not the sampler.
XID_FIELD: Final = ("DCGM_FI_DEV_XID_ERRORS", GAUGE, "Value of the last XID error encountered.")
#: dcgm-exporter's per-GPU labels, then its Kubernetes labels.
LABELS: Final = ("gpu", "UUID", "device", "modelName", "Hostname", "pci_bus_id")
POD_LABELS: Final = ("pod", "namespace", "container")
CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"


@dataclass
class Family:
    """One metric family as it goes on the wire: ``name`` is also every sample's name."""

    name: str
    help: str
    type: str
    samples: list[tuple[Sequence[tuple[str, str]], float]] = field(default_factory=list)

    def add(self, labels: Sequence[tuple[str, str]], value: float) -> None:
        self.samples.append((labels, value))


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def render(families: Iterable[Family]) -> bytes:
    """Prometheus text format 0.0.4."""
    out: list[str] = []
    for f in families:
        help_text = f.help.replace("\\", r"\\").replace("\n", r"\n")
        out.append(f"# HELP {f.name} {help_text}\n# TYPE {f.name} {f.type}\n")
        for labels, value in f.samples:
            lbl = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
            out.append(f"{f.name}{{{lbl}}} {floatToGoString(value)}\n" if lbl
                       else f"{f.name} {floatToGoString(value)}\n")
    return "".join(out).encode()


class GPUCollector:
    def __init__(self, sampler: TelemetrySampler | None, manager: ResourceManager | None,
                 hostname: str, available: bool, reason: str = "",
                 attribution: PodAttribution | None = None,
                 attribution_off_reason: str = "disabled") -> None:
        self.sampler = sampler
        self.manager = manager
        self.available = available
        self.reason = reason
        self.attribution = attribution
        self.attribution_off_reason = attribution_off_reason
        infos = manager.infos if manager is not None else []
        self._labels = [
            tuple(zip(LABELS, (str(d.index), d.uuid, f"nvidia{d.index}", d.model, hostname,
                               d.pci_bus_id), strict=True))
            for d in infos
        ]

    def _gpu_labels(self) -> list[tuple[tuple[str, str], ...]]:
        pods = self.attribution.pods if self.attribution is not None else ()
        out = []
        for i, base in enumerate(self._labels):
            first = pods[i][0] if i < len(pods) and pods[i] else PodRef("", "", "")
            out.append((*base, ("pod", first.name), ("namespace", first.namespace),
                        ("container", first.container)))
        return out

    def collect(self) -> Iterator[Family]:
        avail = Family("dsan_deviceplugin_telemetry_available",
                       "1 when GPU telemetry is being sampled, 0 when degraded.", GAUGE)
        avail.add((("reason", self.reason),), 1.0 if self.available else 0.0)
        yield avail
        yield from self._attribution_families()
        if self.sampler is not None:
            s = self.sampler
            for name, help_text, value in (
                    ("dsan_deviceplugin_samples_total", "Telemetry samples taken.", s.samples),
                    ("dsan_deviceplugin_sample_errors_total", "Telemetry samples that failed.",
                     s.errors),
                    ("dsan_deviceplugin_sample_cpu_seconds_total", "CPU time spent sampling.",
                     s.cpu_seconds)):
                fam = Family(name, help_text, COUNTER)
                fam.add((), float(value))
                yield fam
        latest = self.sampler.latest() if self.sampler is not None else None
        labels = self._gpu_labels()
        if latest is not None and self.sampler is not None:
            _, row = latest
            totals = self.sampler.totals()
            for name, (col, typ, help_text) in DCGM_FIELDS.items():
                fam = Family(name, help_text, typ)
                # A reading the GPU does not support (NaN now) has no series, not a 0.
                values = row[:, COL[col]]
                out = (totals[:, TOTAL_FIELDS.index(col)] if col in TOTAL_FIELDS else values)
                for lbl, now, v in zip(labels, values, out, strict=True):
                    if not math.isnan(now):
                        fam.add(lbl, float(v))
                yield fam
        if self.manager is not None:
            xid_name, xid_type, xid_help = XID_FIELD
            xid = Family(xid_name, xid_help, xid_type)
            healthy = Family("dsan_gpu_healthy",
                             "1 when the agent's health checks find the GPU Healthy.", GAUGE)
            count = Family("dsan_gpu_xid_errors_total", "Xid events seen, any kind.", COUNTER)
            for lbl, (ok, _reason, n_xid, last) in zip(labels, self.manager.health_snapshot(),
                                                       strict=True):
                xid.add(lbl, float(last or 0))
                healthy.add(lbl, 1.0 if ok else 0.0)
                count.add(lbl, float(n_xid))
            yield xid
            yield healthy
            yield count

    def _attribution_families(self) -> Iterator[Family]:
        a = self.attribution
        on = Family("dsan_deviceplugin_pod_attribution_available",
                    "1 when GPUs are attributed to pods through kubelet's PodResources API; "
                    "reason says why not.", GAUGE)
        if a is None:
            on.add((("reason", self.attribution_off_reason),), 0.0)
            yield on
            return
        on.add((("reason", a.reason),), 1.0 if a.available else 0.0)
        yield on
        polls = Family("dsan_deviceplugin_pod_resources_polls_total",
                       "PodResources List calls made.", COUNTER)
        polls.add((), float(a.polls))
        fails = Family("dsan_deviceplugin_pod_resources_failures_total",
                       "PodResources calls that failed.", COUNTER)
        fails.add((), float(a.failures))
        unmatched = Family("dsan_deviceplugin_pod_resources_unmatched_devices",
                           "Device IDs of the GPU resource that match no GPU here.", GAUGE)
        unmatched.add((), float(a.unmatched))
        yield from (polls, fails, unmatched)
        info = Family("dsan_gpu_pod_info", "1 per container holding the GPU.", GAUGE)
        for i, base in enumerate(self._labels):
            for p in a.pods[i] if i < len(a.pods) else ():
                info.add((*base, ("pod", p.name), ("namespace", p.namespace),
                          ("container", p.container)), 1.0)
        yield info
        if a.allocatable is not None:
            alloc = Family("dsan_gpu_kubelet_allocatable",
                           "1 when kubelet lists the GPU as allocatable (a device plugin, "
                           "ours or NVIDIA's, advertises it).", GAUGE)
            for base, flag in zip(self._labels, a.allocatable, strict=True):
                alloc.add(base, 1.0 if flag else 0.0)
            yield alloc

    def render(self) -> bytes:
        return render(self.collect())


Check = Callable[[], tuple[bool, str]]


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    # One write per response (with Nagle off): otherwise a keep-alive scraper waits ~40 ms
    # on delayed ACKs per request.
    wbufsize = 1 << 16
    disable_nagle_algorithm = True
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        try:
            if path == "/metrics":
                self._reply(200, self.server.render(), CONTENT_TYPE)
            elif path in ("/healthz", "/readyz"):
                ok, why = (self.server.healthy if path == "/healthz" else self.server.ready)()
                self._reply(200 if ok else 503, (why or "ok").encode() + b"\n")
            else:
                self._reply(404, b"not found: /metrics, /healthz, /readyz\n")
        except Exception:  # a failing collector must not kill the server or hang the client
            log.exception("%s failed", path)
            self._reply(500, b"internal error, see the agent's log\n")

    def _reply(self, code: int, body: bytes, ctype: str = "text/plain; charset=utf-8") -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass  # probes every few seconds would flood the log


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # listen backlog: a burst of scrapers and probes is not refused

    def __init__(self, addr: tuple[str, int], render: Callable[[], bytes], healthy: Check,
                 ready: Check) -> None:
        self.render, self.healthy, self.ready = render, healthy, ready
        super().__init__(addr, _Handler)


class _Server6(_Server):
    address_family = socket.AF_INET6


def _always() -> tuple[bool, str]:
    return True, ""


class MetricsServer:
    """HTTP on ``addr:port`` (port 0 = any free port): ``/metrics``; ``/healthz`` and
    ``/readyz`` answer 200 ``ok`` or 503 with the reason, for kubelet's httpGet probes."""

    def __init__(self, collector: GPUCollector, addr: str, port: int,
                 healthy: Check = _always, ready: Check = _always) -> None:
        cls = _Server6 if ":" in addr else _Server
        self._server = cls((addr, port), collector.render, healthy, ready)
        self._thread = threading.Thread(target=self._server.serve_forever, name="metrics",
                                        daemon=True)
        self._thread.start()
        self.port = int(self._server.server_address[1])
        self.addr = addr

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
