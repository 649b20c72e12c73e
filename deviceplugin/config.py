"""The agent's one typed config, defaults in one place, validated at start.

Helm values under ``devicePlugin.config:`` map one to one onto these fields, by the same names.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from dsan.api.types import RESOURCE_GPU
from dsan.core.configload import build

#: Xids caused by the application, not the GPU (NVIDIA's device plugin skips the same set):
#: 13 graphics engine exception, 31 memory page fault, 43 GPU stopped processing,
#: 45 preemptive cleanup, 68 video processor exception, 109 context switch timeout.
DEFAULT_IGNORED_XIDS: Final = frozenset({13, 31, 43, 45, 68, 109})
ALLOCATE_MODES: Final = ("envvar", "device-specs", "cdi")
BACKENDS: Final = ("nvml", "fake")
#: ``telemetry``: beside NVIDIA's device plugin, never registers with kubelet.
#: ``device-plugin``: registers ``resource_name`` with kubelet, i.e. REPLACES NVIDIA's plugin.
MODES: Final = ("telemetry", "device-plugin")
DEFAULT_PLUGIN_DIR: Final = Path("/var/lib/kubelet/device-plugins")
#: Where kubelet serves its PodResources API v1 (a local, read-only socket).
DEFAULT_POD_RESOURCES_SOCKET: Final = Path("/var/lib/kubelet/pod-resources/kubelet.sock")


class ConfigError(ValueError):
    """A config value is out of range; the message names the field."""


def default_node_name() -> str:
    # The DaemonSet passes spec.nodeName as NODE_NAME; outside Kubernetes use the host name.
    return os.environ.get("NODE_NAME") or socket.gethostname()


@dataclass(frozen=True)
class PluginConfig:
    node_name: str = field(default_factory=default_node_name)
    resource_name: str = RESOURCE_GPU
    mode: str = "telemetry"
    # --- kubelet device-plugin API (mode device-plugin) ---
    plugin_dir: Path = DEFAULT_PLUGIN_DIR
    kubelet_socket: str = "kubelet.sock"
    endpoint: str = "dsan-gpu.sock"
    register_backoff_max_s: float = 30.0
    socket_check_s: float = 0.5
    pre_start_required: bool = False
    allocate_modes: tuple[str, ...] = ("envvar",)
    cdi_kind: str = "nvidia.com/gpu"
    #: Concurrent ListAndWatch streams served; more are refused with RESOURCE_EXHAUSTED.
    #: kubelet holds one (two for a moment while it re-registers); the gRPC pool has this
    #: many threads plus a fixed few for unary calls, so streams never starve Allocate.
    max_watch_streams: int = 4
    # --- per-pod attribution (kubelet PodResources API v1, both modes) ---
    pod_attribution: bool = True
    pod_resources_socket: Path = DEFAULT_POD_RESOURCES_SOCKET
    pod_resources_interval_s: float = 5.0
    # --- backend ---
    backend: str = "nvml"
    fail_on_init_error: bool = False
    fake_gpus: int = 8
    fake_model: str = "A100-SXM4-80GB"
    fake_topology: str = "two-quads"
    # --- health ---
    health_enabled: bool = True
    ignored_xids: frozenset[int] = DEFAULT_IGNORED_XIDS
    recovery_quiet_s: float = 30.0
    health_poll_s: float = 0.2
    # --- telemetry ---
    sample_interval_s: float = 1.0
    window_s: int = 10
    horizon_s: int = 300
    metrics_addr: str = "127.0.0.1"
    metrics_port: int = 9400  # 0 = any free port, -1 = no /metrics
    # --- custom resource ---
    crd_enabled: bool = True
    crd_interval_s: float = 5.0
    crd_backoff_max_s: float = 60.0
    kubeconfig: str | None = None

    @classmethod
    def from_mapping(cls, data: Any, **overrides: Any) -> PluginConfig:
        """Build from a YAML mapping of field names (``--config``), then apply ``overrides``
        (flags given on the command line). Unknown keys and wrongly typed values are errors
        naming the key: a typo in a Helm value must not be silently ignored."""
        return build(cls, data, what="deviceplugin config", error=ConfigError,
                     overrides=overrides)

    @classmethod
    def from_yaml(cls, path: str | Path, **overrides: Any) -> PluginConfig:
        try:
            data = yaml.safe_load(Path(path).read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"deviceplugin config: cannot read {path}: {exc}") from exc
        return cls.from_mapping({} if data is None else data, **overrides)

    @property
    def kubelet_socket_path(self) -> Path:
        return self.plugin_dir / self.kubelet_socket

    @property
    def plugin_socket_path(self) -> Path:
        return self.plugin_dir / self.endpoint

    def validate(self) -> PluginConfig:
        """Return self, or raise :class:`ConfigError` naming the first bad field."""
        def bad(name: str, why: str) -> ConfigError:
            return ConfigError(f"deviceplugin config: {name}: {why}")

        if not self.node_name:
            raise bad("node_name", "empty (set NODE_NAME or --node-name)")
        if self.mode not in MODES:
            raise bad("mode", f"{self.mode!r} is not one of {MODES}")
        if "/" not in self.resource_name:
            raise bad("resource_name", f"{self.resource_name!r} is not of the form vendor/name")
        if "/" in self.endpoint or "/" in self.kubelet_socket:
            raise bad("endpoint", "socket names are file names inside plugin_dir")
        # Unix socket paths are limited to 107 bytes by sun_path.
        for name, path in (("endpoint", self.plugin_socket_path),
                           ("kubelet_socket", self.kubelet_socket_path)):
            if len(str(path).encode()) > 107:
                raise bad(name, f"socket path {str(path)!r} longer than 107 bytes")
        if self.backend not in BACKENDS:
            raise bad("backend", f"{self.backend!r} is not one of {BACKENDS}")
        unknown = [m for m in self.allocate_modes if m not in ALLOCATE_MODES]
        if unknown or not self.allocate_modes:
            raise bad("allocate_modes", f"{list(self.allocate_modes)} must be a non-empty "
                                        f"subset of {ALLOCATE_MODES}")
        if self.fake_gpus < 0:
            raise bad("fake_gpus", f"{self.fake_gpus} < 0")
        if not 1 <= self.max_watch_streams <= 64:
            raise bad("max_watch_streams", f"{self.max_watch_streams} is not 1..64")
        if len(str(self.pod_resources_socket).encode()) > 107:
            raise bad("pod_resources_socket", f"socket path {str(self.pod_resources_socket)!r} "
                                              "longer than 107 bytes")
        for name in ("sample_interval_s", "health_poll_s", "socket_check_s", "crd_interval_s",
                     "register_backoff_max_s", "crd_backoff_max_s", "pod_resources_interval_s"):
            if not getattr(self, name) > 0:
                raise bad(name, f"{getattr(self, name)} must be > 0")
        if self.recovery_quiet_s < 0:
            raise bad("recovery_quiet_s", f"{self.recovery_quiet_s} must be >= 0")
        if self.window_s <= 0 or self.horizon_s < self.window_s:
            raise bad("window_s/horizon_s", f"need 0 < window_s <= horizon_s, got "
                                            f"{self.window_s}/{self.horizon_s}")
        if self.window_s < self.sample_interval_s:
            raise bad("window_s", f"{self.window_s} s is shorter than one sample interval")
        if not -1 <= self.metrics_port <= 65535:
            raise bad("metrics_port", f"{self.metrics_port} is not -1..65535")
        return self
