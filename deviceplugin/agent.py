"""Wires the agent from its config: backend -> resource manager -> health monitor, sampler,
pod attribution, /metrics (with /healthz and /readyz), plugin server (device-plugin mode
only), CR writer. Each optional part degrades on its own:

- backend init fails (no driver) -> no devices served, health off, telemetry marked
  unavailable in /metrics and in the CR; exit non-zero only with ``fail_on_init_error``;
- health events unsupported -> devices stay Healthy (logged);
- no PodResources socket or API errors -> telemetry without pod attribution (logged once,
  ``dsan_deviceplugin_pod_attribution_available 0``);
- no Kubernetes credentials -> no CR writer (logged).

In the default ``telemetry`` mode nothing registers with kubelet, so the agent runs beside
NVIDIA's device plugin; ``device-plugin`` mode registers ``resource_name`` and replaces it.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from deviceplugin.attribution import PodAttribution
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
from deviceplugin.podresources import KubeletPodResources, PodResourcesClient
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
    #: The PodResources API client; None = kubelet's, on ``config.pod_resources_socket``.
    pod_resources: PodResourcesClient | None = None
    available: bool = False
    reason: str = ""
    manager: ResourceManager | None = None
    sampler: TelemetrySampler | None = None
    health: HealthMonitor | None = None
    attribution: PodAttribution | None = None
    plugin: PluginServer | None = None
    metrics: MetricsServer | None = None
    writer: TelemetryWriter | None = None
    started: bool = False
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
            self.sampler.try_sample()  # /metrics and the CR have data from the first scrape
            self.sampler.start()
            # Started even with health checking off: Xids are still counted for telemetry,
            # the tracker just never marks a device Unhealthy.
            self.health = HealthMonitor(self.backend, self.manager, cfg.health_poll_s)
            self.health.start()
            if cfg.pod_attribution:
                client = self.pod_resources or KubeletPodResources(cfg.pod_resources_socket)
                self.attribution = PodAttribution(client, infos, cfg.resource_name,
                                                  cfg.pod_resources_interval_s)
                self.attribution.poll()  # the first scrape and CR already attributed
                self.attribution.start()
            if cfg.mode == "device-plugin":
                self.plugin = PluginServer(self.manager, cfg)
                self.plugin.start()
        if cfg.metrics_port >= 0:
            collector = GPUCollector(
                self.sampler, self.manager, cfg.node_name, self.available, self.reason,
                self.attribution,
                attribution_off_reason="disabled" if not cfg.pod_attribution else "no GPUs")
            self.metrics = MetricsServer(collector, cfg.metrics_addr, cfg.metrics_port,
                                         healthy=self.healthy, ready=self.ready)
            log.info("/metrics, /healthz, /readyz on http://%s:%d", cfg.metrics_addr,
                     self.metrics.port)
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
        self.started = True
        return self

    def healthy(self) -> tuple[bool, str]:
        """Liveness: every thread the agent started is still running (each catches its own
        errors, so a dead one is a bug that a container restart fixes)."""
        parts = {"sampler": self.sampler, "health monitor": self.health,
                 "plugin server": self.plugin, "pod attribution": self.attribution,
                 "GPUTelemetry writer": self.writer}
        dead = [name for name, part in parts.items() if part is not None and part.crashed]
        return (not dead, f"stopped: {', '.join(dead)}" if dead else "")

    def ready(self) -> tuple[bool, str]:
        """Readiness: started and, in device-plugin mode, registered with the kubelet that is
        there now. Degraded telemetry (no driver, no attribution) is still ready: it is
        reported through /metrics and the CR, and a not-ready agent would stall rollouts."""
        if not self.started:
            return False, "starting"
        if self.plugin is not None and not self.plugin.registered:
            return False, f"not registered with kubelet ({self.plugin.last_error or 'waiting'})"
        return True, ""

    def summary(self) -> GPUTelemetry:
        c = self.config
        return build_summary(c.node_name, self.manager, self.sampler, available=self.available,
                             reason=self.reason, window_s=c.window_s, horizon_s=c.horizon_s,
                             interval_s=c.sample_interval_s, attribution=self.attribution)

    def stop(self) -> None:
        for part in (self.writer, self.plugin, self.attribution, self.health, self.sampler,
                     self.metrics):
            if part is not None:
                part.stop()
        self.backend.shutdown()
        self.stopped.set()
