"""Wires the agent from its config: backend -> resource manager -> health monitor, sampler,
/metrics, plugin server, CR writer. Each optional part degrades on its own:

- backend init fails (no driver) -> no devices served, health off, telemetry marked
  unavailable in /metrics and in the CR; exit non-zero only with ``fail_on_init_error``;
- health events unsupported -> devices stay Healthy (logged);
- no Kubernetes credentials -> no CR writer (logged).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from deviceplugin.backend import BackendUnavailable, GPUBackend
from deviceplugin.config import PluginConfig
from deviceplugin.crwriter import (
    KubernetesTelemetryStore,
    TelemetryStore,
    TelemetryWriter,
    build_summary,
)
from deviceplugin.health import HealthMonitor
from deviceplugin.kubelet import PluginServer
from deviceplugin.metrics import GPUCollector, MetricsServer
from deviceplugin.resources import ResourceManager
from deviceplugin.sampler import TelemetrySampler
from dsan.api.telemetry import GPUTelemetry

log = logging.getLogger(__name__)


def make_backend(config: PluginConfig) -> GPUBackend:
    if config.backend == "fake":
        from deviceplugin.fake import FakeBackend

        return FakeBackend(config.fake_gpus, config.fake_model, topology=config.fake_topology)
    from deviceplugin.nvml import NvmlBackend

    return NvmlBackend()


@dataclass
class Agent:
    config: PluginConfig
    backend: GPUBackend
    store: TelemetryStore | None = None
    available: bool = False
    reason: str = ""
    manager: ResourceManager | None = None
    sampler: TelemetrySampler | None = None
    health: HealthMonitor | None = None
    plugin: PluginServer | None = None
    metrics: MetricsServer | None = None
    writer: TelemetryWriter | None = None
    stopped: threading.Event = field(default_factory=threading.Event)

    def start(self) -> Agent:
        cfg = self.config.validate()
        try:
            self.backend.init()
            self.available, self.reason = True, ""
        except BackendUnavailable as exc:
            if cfg.fail_on_init_error:
                raise
            self.available, self.reason = False, str(exc)
            log.error("GPU backend unavailable, running degraded (no devices, no telemetry): %s",
                      exc)
        if self.available:
            infos = self.backend.devices()
            numa = [self.backend.numa_node(d.index) for d in infos]
            pcie = [self.backend.pcie_switch(d.index) for d in infos]
            self.manager = ResourceManager(infos, numa, cfg, pcie_switches=pcie)
            self.sampler = TelemetrySampler(self.backend, len(infos), cfg.sample_interval_s,
                                            cfg.window_s, cfg.horizon_s)
            self.sampler.sample_once()  # /metrics and the CR have data from the first scrape
            self.sampler.start()
            # Started even with health checking off: Xids are still counted for telemetry,
            # the tracker just never marks a device Unhealthy.
            self.health = HealthMonitor(self.backend, self.manager, cfg.health_poll_s)
            self.health.start()
            self.plugin = PluginServer(self.manager, cfg)
            self.plugin.start()
        if cfg.metrics_port >= 0:
            collector = GPUCollector(self.sampler, self.manager, cfg.node_name, self.available,
                                     self.reason)
            self.metrics = MetricsServer(collector, cfg.metrics_addr, cfg.metrics_port)
            log.info("/metrics on http://%s:%d/metrics", cfg.metrics_addr, self.metrics.port)
        if cfg.crd_enabled:
            store = self.store
            if store is None:
                try:
                    store = KubernetesTelemetryStore(cfg.kubeconfig)
                except Exception as exc:  # no kubeconfig / not in a cluster: degrade
                    log.error("no Kubernetes API access, GPUTelemetry not written: %s", exc)
            if store is not None:
                self.writer = TelemetryWriter(store, self.summary, cfg.crd_interval_s,
                                              cfg.crd_backoff_max_s)
                self.writer.start()
        return self

    def summary(self) -> GPUTelemetry:
        c = self.config
        return build_summary(c.node_name, self.manager, self.sampler, available=self.available,
                             reason=self.reason, window_s=c.window_s, horizon_s=c.horizon_s,
                             interval_s=c.sample_interval_s)

    def stop(self) -> None:
        for part in (self.writer, self.plugin, self.health, self.sampler, self.metrics):
            if part is not None:
                part.stop()
        self.backend.shutdown()
        self.stopped.set()
