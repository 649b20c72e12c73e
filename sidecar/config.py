"""The sidecar's one config dataclass: defaults in one place, validated at start.

``dsan serve`` flags (with dashes), ``--config`` YAML keys and Helm values map one to one
onto these fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dsan.core.configload import build


class ConfigError(ValueError):
    """A config value that cannot work; the message names the field."""


@dataclass(frozen=True, slots=True)
class SidecarConfig:
    #: Path of a kubeconfig; None = in-cluster config, else ~/.kube/config.
    kubeconfig: str | None = None
    #: Address both servers listen on. Loopback by default: the extender is not authenticated.
    bind_address: str = "127.0.0.1"
    #: Extender HTTP port (also /healthz, /readyz, /metrics); 0 picks a free port.
    http_port: int = 8888
    #: gRPC Score + health port; 0 picks a free port, -1 disables gRPC.
    grpc_port: int = 50051
    #: Extender URL prefix: POST <prefix>/prioritize and <prefix>/filter.
    url_prefix: str = "/dsan"
    #: Policy served (a dsan.policies.registry name). "dsan" falls back to fallback_policy
    #: when the model cannot be loaded.
    policy: str = "dsan"
    #: Heuristic used when `policy` cannot be loaded and for nodes with stale telemetry.
    fallback_policy: str = "fgd"
    #: DSAN model directory; None = $DSAN_MODEL_DIR, else the model in dsan/model/default/.
    model_dir: str | None = None
    #: How DSAN runs: "numpy" (no torch) or "torchscript" (model.ts; needs torch).
    runtime: str = "numpy"
    #: Extender requests with a larger body are refused with 413.
    max_body_bytes: int = 8 * 1024 * 1024
    #: Listen backlog of the extender's HTTP server (capped at net.core.somaxconn); Python's
    #: default of 5 makes bursts of new connections wait in SYN retries, or be reset.
    http_backlog: int = 1024
    #: On SIGTERM (or SIGINT): how long the requests in flight may take to finish before the
    #: sidecar exits; new connections are refused meanwhile.
    drain_timeout_s: float = 5.0
    #: gRPC messages larger than this are refused by the gRPC server.
    max_grpc_message_bytes: int = 8 * 1024 * 1024
    #: Telemetry history kept per node (windows), the temporal stream's length.
    telemetry_window: int = 16
    #: Telemetry older than this counts as stale: the node is scored by the fallback.
    telemetry_stale_s: float = 60.0
    #: GPU power at which gpu_power_frac is 1.0 when the CR carries no power limit.
    gpu_power_ref_w: float = 400.0
    #: Only pods the informer has seen pending with this spec.schedulerName are charged to
    #: their best node after a score ("assumed"). The Helm scheduler.schedulerName.
    scheduler_name: str = "dsan-scheduler"
    #: Pods we scored best stay charged to that node this long unless an informer event for
    #: the pod (bound, deleted or updated while pending) comes first.
    assume_ttl_s: float = 30.0
    #: Most pods remembered as assumed at once (oldest dropped first).
    assume_max: int = 100_000
    #: A published snapshot is reused for at most this long even if nothing changed,
    #: so telemetry ages in it stay current.
    snapshot_max_age_s: float = 1.0
    #: Server-side timeout of one watch request; the informer re-watches after it.
    watch_timeout_s: int = 300
    #: Backoff between failed list/watch attempts: doubles from initial up to max.
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 5.0
    #: Watch the GPUTelemetry custom resource (skipped quietly while its CRD is absent).
    watch_telemetry: bool = True
    #: Threads of the gRPC server.
    grpc_workers: int = 4
    #: Reject a request naming any unknown node (400 / NOT_FOUND) instead of scoring it 0.
    strict_node_names: bool = False
    #: Address of the metrics listener: /metrics, /healthz and /readyz only, so it may face
    #: the pod network while the extender and gRPC stay on bind_address.
    metrics_address: str = "0.0.0.0"
    #: Its port; -1 = no metrics listener (the extender port serves the same three paths),
    #: 0 = any free port. The Helm chart turns it on (9402).
    metrics_port: int = -1
    #: torch intra-op threads with runtime "torchscript"; 0 = torch's default (a thread per
    #: online CPU, whose spinning costs more than it gives on per-pod inference).
    torch_threads: int = 1
    #: Threads of every BLAS library numpy loaded; 0 = the library's default, one per online
    #: CPU of the node whatever the sidecar's CPU set (sidecar/threadlimits.py).
    blas_threads: int = 1
    #: DSAN: telemetry and static node columns reach the node embeddings at most this late
    #: (allocations are always current); 0 refreshes on every change.
    embed_refresh_s: float = 1.0
    #: Move everything alive once the informers have synced into Python's permanent GC
    #: generation (gc.freeze), so collections stop rescanning the initial cluster state.
    gc_freeze_after_sync: bool = True
    #: Write an events.k8s.io/v1 Event and the dsan.io/scored-by annotation on every pod the
    #: pods informer saw pending for scheduler_name and then bound (sidecar/recorder.py).
    record_decisions: bool = True
    #: API writes a second for those (one Event and one annotation patch per pod), and the
    #: writes a token bucket lets through at once after a quiet spell.
    record_qps: float = 20.0
    record_burst: int = 40
    #: Bindings waiting to be recorded; a binding past it is dropped and counted.
    record_queue: int = 1000
    #: Scored pods remembered for their Event and for GET /explain (most recent kept).
    decisions_kept: int = 512
    #: /explain of a DSAN decision: candidates in the SHAP background, antithetic
    #: permutation pairs, and the CPU seconds one explanation may spend sampling them.
    explain_background: int = 32
    explain_permutations: int = 8
    explain_cpu_budget_s: float = 1.0
    #: Chooses which preemption candidate's victims kube-scheduler evicts (the preempt verb):
    #: "" = the served policy's own reclaimer, else a dsan.policies.reclaim.RECLAIMERS name
    #: ("kubernetes": kube-scheduler's own pick; "protect-latency": never a web pod).
    reclaimer: str = ""
    #: When the chosen victims include elastic members (dsan.io/elastic), lower their
    #: workload owner's dsan.io/desired-members by as many (a pod patch; docs/sidecar.md).
    elastic_shrink: bool = True
    #: Write the served policy's grant into a workload owner's dsan.io/desired-members when it
    #: shows up for this scheduler with a dsan.io/max-members and no count (a pod patch).
    elastic_grant: bool = True
    #: Log level of the sidecar's logger.
    log_level: str = "INFO"

    def __post_init__(self) -> None:
        def need(ok: bool, name: str, why: str) -> None:
            if not ok:
                raise ConfigError(f"sidecar config: {name}={getattr(self, name)!r}: {why}")

        for name, (lo, hi) in _RANGES.items():
            need(lo <= getattr(self, name) <= hi, name, f"must be within {lo}..{hi}")
        # An empty address would listen on every interface, unauthenticated.
        for name in ("bind_address", "metrics_address", "policy", "fallback_policy",
                     "scheduler_name"):
            need(bool(getattr(self, name)), name, "must not be empty")
        for name in ("telemetry_stale_s", "gpu_power_ref_w", "assume_ttl_s",
                     "snapshot_max_age_s"):
            need(getattr(self, name) > 0, name, "must be positive")
        need(self.url_prefix == "" or (self.url_prefix.startswith("/")
                                      and not self.url_prefix.endswith("/")),
             "url_prefix", "must be empty or start with '/' and not end with '/'")
        need(self.max_body_bytes >= 1024, "max_body_bytes", "must be at least 1024")
        need(self.max_grpc_message_bytes >= 1024, "max_grpc_message_bytes",
             "must be at least 1024")
        # grpcio takes channel options as C ints: a larger value is an OverflowError at start.
        need(self.max_grpc_message_bytes < 2**31, "max_grpc_message_bytes",
             "must be below 2^31 (gRPC's int32 limit)")
        need(self.assume_max >= 1, "assume_max", "must be at least 1")
        need(self.watch_timeout_s >= 1, "watch_timeout_s", "must be at least 1")
        need(0 < self.backoff_initial_s <= self.backoff_max_s, "backoff_initial_s",
             "must be positive and at most backoff_max_s")
        need(self.runtime in ("numpy", "torchscript"), "runtime",
             "must be numpy or torchscript")
        need(0 < self.record_qps <= 10_000, "record_qps", "must be within (0, 10000]")
        need(0 < self.explain_cpu_budget_s <= 600, "explain_cpu_budget_s",
             "must be within (0, 600]")
        from dsan.policies.reclaim import RECLAIMERS

        need(self.reclaimer == "" or self.reclaimer in RECLAIMERS, "reclaimer",
             f"must be empty (the policy's own) or one of {sorted(RECLAIMERS)}")
        need(self.log_level.upper() in ("DEBUG", "INFO", "WARNING", "ERROR"), "log_level",
             "must be DEBUG, INFO, WARNING or ERROR")

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> SidecarConfig:
        """Build from a YAML mapping; unknown keys are an error (a typo must not be ignored)."""
        return build(cls, data, what="sidecar config", error=ConfigError)

    @classmethod
    def from_yaml(cls, path: str | Path) -> SidecarConfig:
        try:
            data = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"sidecar config: cannot read {path}: {exc}") from exc
        return cls.from_mapping(data)


#: Fields that must lie within [lo, hi].
_RANGES: dict[str, tuple[float, float]] = {
    "http_port": (0, 65535), "grpc_port": (-1, 65535), "metrics_port": (-1, 65535),
    "http_backlog": (1, 65535), "drain_timeout_s": (0, 600), "telemetry_window": (1, 1024),
    "grpc_workers": (1, 256), "torch_threads": (0, 256), "blas_threads": (0, 256),
    "embed_refresh_s": (0, 3600), "record_burst": (1, 100_000), "record_queue": (1, 1_000_000),
    "decisions_kept": (1, 1_000_000), "explain_background": (1, 4096),
    "explain_permutations": (1, 10_000),
}
