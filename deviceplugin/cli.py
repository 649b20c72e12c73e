"""``dsan deviceplugin``: parse flags into :class:`PluginConfig`, start the agent, wait."""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from pathlib import Path
from typing import Any

from deviceplugin.config import (
    ALLOCATE_MODES,
    BACKENDS,
    DEFAULT_IGNORED_XIDS,
    DEFAULT_PLUGIN_DIR,
    ConfigError,
    PluginConfig,
)
from deviceplugin.fake import TOPOLOGIES


def _xids(value: str) -> frozenset[int]:
    try:
        return frozenset(int(x) for x in value.split(",") if x.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of Xids: {value!r}") from exc


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    d = PluginConfig(node_name="-")
    p: argparse.ArgumentParser = subparsers.add_parser(
        "deviceplugin", help="run the GPU device plugin and telemetry agent",
        description="kubelet device plugin (v1beta1) with health, topology-aware allocation, "
                    "dcgm-compatible /metrics and the GPUTelemetry custom resource")
    p.add_argument("--node-name", default=None, help="default: $NODE_NAME or the host name")
    p.add_argument("--resource-name", default=d.resource_name)
    p.add_argument("--plugin-dir", type=Path, default=DEFAULT_PLUGIN_DIR)
    p.add_argument("--kubelet-socket", default=d.kubelet_socket)
    p.add_argument("--endpoint", default=d.endpoint, help="this plugin's socket file name")
    p.add_argument("--backend", choices=BACKENDS, default=d.backend)
    p.add_argument("--fail-on-init-error", action="store_true",
                   help="exit instead of degrading when NVML cannot start")
    p.add_argument("--fake-gpus", type=int, default=d.fake_gpus)
    p.add_argument("--fake-model", default=d.fake_model)
    p.add_argument("--fake-topology", choices=TOPOLOGIES, default=d.fake_topology)
    p.add_argument("--allocate", default=",".join(d.allocate_modes),
                   help=f"comma-separated subset of {ALLOCATE_MODES}")
    p.add_argument("--cdi-kind", default=d.cdi_kind)
    p.add_argument("--pre-start-required", action="store_true")
    p.add_argument("--no-health", action="store_true", help="disable health checking")
    p.add_argument("--ignored-xids", type=_xids, default=DEFAULT_IGNORED_XIDS,
                   help="application Xids that do not mark a GPU Unhealthy")
    p.add_argument("--recovery-quiet", type=float, default=d.recovery_quiet_s,
                   help="seconds without errors before an Unhealthy GPU may recover")
    p.add_argument("--sample-interval", type=float, default=d.sample_interval_s)
    p.add_argument("--window", type=int, default=d.window_s)
    p.add_argument("--horizon", type=int, default=d.horizon_s)
    p.add_argument("--metrics-addr", default=d.metrics_addr)
    p.add_argument("--metrics-port", type=int, default=d.metrics_port,
                   help="0 = any free port, -1 = no /metrics")
    p.add_argument("--no-crd", action="store_true", help="do not write GPUTelemetry")
    p.add_argument("--crd-interval", type=float, default=d.crd_interval_s)
    p.add_argument("--kubeconfig", default=None, help="default: in-cluster config")
    p.add_argument("--run-for", type=float, default=None,
                   help="stop after this many seconds (demos, smoke tests)")
    p.add_argument("--log-level", default="INFO")
    p.set_defaults(func=run)
    return p


def config_from_args(a: argparse.Namespace) -> PluginConfig:
    kw: dict[str, Any] = {}
    if a.node_name:
        kw["node_name"] = a.node_name
    return PluginConfig(
        resource_name=a.resource_name, plugin_dir=a.plugin_dir, kubelet_socket=a.kubelet_socket,
        endpoint=a.endpoint, backend=a.backend, fail_on_init_error=a.fail_on_init_error,
        fake_gpus=a.fake_gpus, fake_model=a.fake_model, fake_topology=a.fake_topology,
        allocate_modes=tuple(m.strip() for m in a.allocate.split(",") if m.strip()),
        cdi_kind=a.cdi_kind, pre_start_required=a.pre_start_required,
        health_enabled=not a.no_health, ignored_xids=a.ignored_xids,
        recovery_quiet_s=a.recovery_quiet, sample_interval_s=a.sample_interval,
        window_s=a.window, horizon_s=a.horizon, metrics_addr=a.metrics_addr,
        metrics_port=a.metrics_port, crd_enabled=not a.no_crd, crd_interval_s=a.crd_interval,
        kubeconfig=a.kubeconfig, **kw,
    ).validate()


def run(a: argparse.Namespace) -> int:
    from deviceplugin.agent import Agent, make_backend
    from deviceplugin.backend import BackendUnavailable

    logging.basicConfig(level=a.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        cfg = config_from_args(a)
    except ConfigError as exc:
        logging.getLogger("deviceplugin").error("%s", exc)
        return 2
    try:
        agent = Agent(cfg, make_backend(cfg)).start()
    except BackendUnavailable as exc:
        logging.getLogger("deviceplugin").error("GPU backend unavailable: %s", exc)
        return 1
    # One stable line on stdout once everything listens (scripts and tests wait for it).
    metrics = (f"http://{cfg.metrics_addr}:{agent.metrics.port}/metrics"
               if agent.metrics is not None else "off")
    n_gpus = len(agent.manager.infos) if agent.manager is not None else 0
    print(f"deviceplugin ready: node={cfg.node_name} gpus={n_gpus} "
          f"socket={cfg.plugin_socket_path if agent.plugin else 'off'} metrics={metrics} "
          f"available={str(agent.available).lower()}", flush=True)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    done.wait(a.run_for)
    agent.stop()
    return 0
