"""``dsan deviceplugin``: --config file and flags -> :class:`PluginConfig`; run the agent."""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from dataclasses import fields
from pathlib import Path
from typing import Any

from deviceplugin.config import (
    ALLOCATE_MODES,
    BACKENDS,
    MODES,
    ConfigError,
    PluginConfig,
)
from deviceplugin.fake import TOPOLOGIES


def _modes(value: str) -> tuple[str, ...]:
    return tuple(m.strip() for m in value.split(",") if m.strip())


def _xids(value: str) -> frozenset[int]:
    try:
        return frozenset(int(x) for x in value.split(",") if x.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of Xids: {value!r}") from exc


def _log_level(value: str) -> str:
    # checked here: logging.basicConfig would raise on it, a traceback before any config check
    if not isinstance(logging.getLevelName(value.upper()), int):
        raise argparse.ArgumentTypeError(f"unknown level {value!r}")
    return value


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    d = PluginConfig(node_name="-")
    p: argparse.ArgumentParser = subparsers.add_parser(
        "deviceplugin", help="run the GPU device plugin and telemetry agent",
        description="GPU telemetry agent: dcgm-compatible /metrics (with /healthz, /readyz), "
                    "the GPUTelemetry custom resource, per-pod attribution through kubelet's "
                    "PodResources API. --mode telemetry (default) runs beside NVIDIA's device "
                    "plugin; --mode device-plugin registers with kubelet (v1beta1: health, "
                    "topology-aware allocation) and REPLACES NVIDIA's plugin. Every "
                    "PluginConfig field has a flag; flags override --config.")
    # Every config flag defaults to None (= "not given"), so a flag overrides --config only
    # when it is on the command line; the defaults live in PluginConfig alone.
    def opt(flag: str, dest: str, **kw: Any) -> None:
        default = getattr(d, dest)
        shown = ",".join(map(str, sorted(default))) if isinstance(default, (tuple, frozenset)) \
            else default
        help_ = kw.pop("help", "")
        p.add_argument(flag, dest=dest, default=None,
                       help=f"{help_} (PluginConfig.{dest}, default: {shown})".strip(), **kw)

    def flag(name: str, dest: str, help_: str = "") -> None:
        opt(name, dest, action=argparse.BooleanOptionalAction, help=help_)

    p.add_argument("--config", default=None, metavar="FILE",
                   help="YAML file whose keys are PluginConfig field names")
    p.add_argument("--node-name", dest="node_name", default=None,
                   help="(PluginConfig.node_name, default: $NODE_NAME or the host name)")
    opt("--resource-name", "resource_name")
    opt("--mode", "mode", choices=MODES,
        help="telemetry: no kubelet registration (beside NVIDIA's plugin); device-plugin: "
             "register resource_name with kubelet (replaces NVIDIA's plugin)")
    opt("--plugin-dir", "plugin_dir", type=Path)
    opt("--kubelet-socket", "kubelet_socket")
    opt("--endpoint", "endpoint", help="this plugin's socket file name")
    opt("--register-backoff-max", "register_backoff_max_s", type=float,
        help="max seconds between kubelet registration retries")
    opt("--socket-check", "socket_check_s", type=float,
        help="seconds between checks that the kubelet socket was not recreated")
    flag("--pre-start-required", "pre_start_required")
    opt("--allocate", "allocate_modes", type=_modes,
        help=f"comma-separated subset of {ALLOCATE_MODES}")
    opt("--cdi-kind", "cdi_kind")
    opt("--max-watch-streams", "max_watch_streams", type=int,
        help="concurrent ListAndWatch streams served; more are refused")
    flag("--pod-attribution", "pod_attribution",
         "attribute GPUs to pods through kubelet's PodResources API")
    opt("--pod-resources-socket", "pod_resources_socket", type=Path)
    opt("--pod-resources-interval", "pod_resources_interval_s", type=float,
        help="seconds between PodResources List calls")
    opt("--backend", "backend", choices=BACKENDS)
    flag("--fail-on-init-error", "fail_on_init_error",
         "exit instead of degrading when NVML cannot start")
    opt("--fake-gpus", "fake_gpus", type=int)
    opt("--fake-model", "fake_model")
    opt("--fake-topology", "fake_topology", choices=TOPOLOGIES)
    flag("--health", "health_enabled", "health checking (--no-health disables it)")
    opt("--ignored-xids", "ignored_xids", type=_xids,
        help="application Xids that do not mark a GPU Unhealthy")
    opt("--recovery-quiet", "recovery_quiet_s", type=float,
        help="seconds without errors before an Unhealthy GPU may recover")
    opt("--health-poll", "health_poll_s", type=float, help="seconds between health polls")
    opt("--sample-interval", "sample_interval_s", type=float)
    opt("--window", "window_s", type=int)
    opt("--horizon", "horizon_s", type=int)
    opt("--metrics-addr", "metrics_addr")
    opt("--metrics-port", "metrics_port", type=int, help="0 = any free port, -1 = no /metrics")
    flag("--crd", "crd_enabled", "write GPUTelemetry (--no-crd disables it)")
    opt("--crd-interval", "crd_interval_s", type=float)
    opt("--crd-backoff-max", "crd_backoff_max_s", type=float,
        help="max seconds between GPUTelemetry write retries")
    p.add_argument("--kubeconfig", default=None,
                   help="(PluginConfig.kubeconfig, default: in-cluster config)")
    p.add_argument("--run-for", type=float, default=None,
                   help="stop after this many seconds (demos, smoke tests)")
    p.add_argument("--log-level", default="INFO", type=_log_level)
    p.set_defaults(func=run)
    return p


def config_from_args(a: argparse.Namespace) -> PluginConfig:
    """PluginConfig defaults, then the --config file, then the flags given; validated."""
    given = {f.name: getattr(a, f.name) for f in fields(PluginConfig)
             if getattr(a, f.name, None) is not None}
    if getattr(a, "config", None):
        return PluginConfig.from_yaml(a.config, **given).validate()
    return PluginConfig.from_mapping({}, **given).validate()


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
    attr = agent.attribution
    pods = "off" if attr is None else ("on" if attr.available else attr.reason)
    print(f"deviceplugin ready: node={cfg.node_name} gpus={n_gpus} "
          f"socket={cfg.plugin_socket_path if agent.plugin else 'off'} metrics={metrics} "
          f"available={str(agent.available).lower()} mode={cfg.mode} pods={pods}", flush=True)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    done.wait(a.run_for)
    agent.stop()
    return 0
