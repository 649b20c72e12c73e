"""The seed scenario's typed configuration, loaded from a versioned YAML file and validated.

Every knob of the scenario lives here with its default; ``dsan/scenarios/seed-table1.yaml``
overrides them and says where each calibrated value came from. Unknown keys, wrong types
and out-of-range values are rejected at load time with the dotted path of the bad key.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from dsan.core.configload import build
from dsan.sim.inputfile import InputFileError, read_text

#: Version 2 (calibration pass of issue 3) added ``load_targets``; version-1 files still load
#: (the section then takes its defaults), so old copies stay runnable.
CONFIG_VERSION = 2
SUPPORTED_VERSIONS = (1, 2)


@dataclass(frozen=True)
class NodeGroup:
    count: int
    cpu_milli: float
    mem_mib: float
    hourly_cost: float
    gpus: int = 0
    gpu_model: str = ""
    #: GPU nodes per NVLink domain (NVSwitch-connected nodes); 0 for CPU nodes.
    nvlink_domain_nodes: int = 0


@dataclass(frozen=True)
class ClusterConfig:
    racks: int = 10
    zones: int = 2
    node_groups: tuple[NodeGroup, ...] = ()


@dataclass(frozen=True)
class StartupConfig:
    container_start_s: float = 2.0
    pull_mib_per_s: float = 200.0
    node_boot_s: float = 90.0
    #: Image sizes (MiB) indexed by image id; workload classes refer to ids.
    image_mib: tuple[float, ...] = (8000.0, 6000.0, 1500.0, 600.0, 3000.0)


@dataclass(frozen=True)
class ScaleDownConfig:
    grace_s: float = 600.0


@dataclass(frozen=True)
class ScaleUpConfig:
    #: False (the shipped scenario): a powered-off node is a candidate like any other and
    #: binding a pod there boots it. True: cluster-autoscaler semantics, where the scheduler
    #: sees only Ready nodes; a pod that fits none waits for a booting node that fits, and
    #: only when none does is an off node booted for it (the policy picks which, as CA's
    #: expander would).
    ready_nodes_first: bool = False


@dataclass(frozen=True)
class OverprovisioningConfig:
    """Cluster-autoscaler over-provisioning: ``pods`` placeholder pods (pause containers at a
    priority below every workload pod) that hold ``cpu_milli`` / ``mem_mib`` each on the CPU
    nodes, so warm capacity exists that no workload pod holds. A pod that fits no Ready node
    evicts placeholders on one; the evicted placeholders go pending, and the booting node
    they trigger is theirs to wait for (:mod:`dsan.sim.scenario.overprovision`). 0 (the
    shipped scenario) turns it off; on, it needs ``scale_up.ready_nodes_first``."""

    pods: int = 0
    cpu_milli: float = 8000.0
    mem_mib: float = 30520.0


@dataclass(frozen=True)
class ContentionConfig:
    #: CPU demand/capacity above which co-located pods interfere.
    threshold: float = 0.7
    #: Slowdown per unit of demand above the threshold.
    beta: float = 1.5
    #: Exponent damping how much CPU contention slows GPU training (data loading only).
    train_sensitivity: float = 0.3


@dataclass(frozen=True)
class LocalityConfig:
    """Relative training speed by the widest level a gang spans."""

    node: float = 1.0
    nvlink: float = 0.95
    rack: float = 0.8
    cross_rack: float = 0.65


@dataclass(frozen=True)
class TrainingConfig:
    jobs_per_h: float = 16.0
    #: Daily swing of the arrival rate (0 = homogeneous Poisson) and the hour of its peak.
    diurnal_amplitude: float = 0.0
    peak_hour: float = 11.0
    gpu_count_probs: dict[str, float] = field(default_factory=lambda: {"1": 1.0})
    #: Placeholder table (uniform in log between 10 min and 1 h); the YAML ships Philly's.
    duration_quantiles_s: dict[str, list[float]] = field(
        default_factory=lambda: {"1": [600.0, 3600.0]}
    )
    quantile_points: tuple[float, ...] = (0.0, 100.0)
    min_duration_s: float = 60.0
    max_duration_s: float = 28800.0
    worker_cpu_milli: float = 11300.0
    worker_mem_mib: float = 48128.0
    cpu_use_frac: float = 0.6
    gpu_activity: float = 0.9
    priority: int = 500
    start_delay_limit_s: float = 600.0
    images: tuple[int, ...] = (0, 1)


@dataclass(frozen=True)
class BatchConfig:
    jobs_per_h: float = 20.0
    diurnal_amplitude: float = 0.0
    peak_hour: float = 11.0
    executors: tuple[int, ...] = (4, 8, 16)
    executor_cpu_milli: tuple[float, ...] = (4000.0, 8000.0)
    mem_mib_per_core: float = 3815.0
    driver_cpu_milli: float = 1000.0
    driver_mem_mib: float = 4096.0
    stages: tuple[int, ...] = (2, 5)
    #: Median and log-sd of the job's nominal duration at full parallelism and speed 1.
    duration_median_s: float = 1200.0
    duration_sigma: float = 0.8
    #: Executors burst above their request (Burstable QoS): actual CPU = request * this.
    cpu_use_frac: float = 1.2
    deadline_slack: float = 2.0
    driver_priority: int = 400
    executor_priority: int = 100
    images: tuple[int, ...] = (2,)


@dataclass(frozen=True)
class WebConfig:
    services: int = 20
    replicas: tuple[int, int] = (3, 10)
    cpu_milli: float = 2000.0
    mem_mib: float = 4096.0
    #: Requests/s one replica serves at speed 1.
    service_rate: float = 100.0
    #: Per-replica utilisation at the diurnal peak and trough (before contention).
    peak_rho: float = 0.7
    trough_rho: float = 0.2
    peak_hour: float = 14.0
    slo_p99_s: float = 0.25
    priority: int = 1000
    images: tuple[int, ...] = (3,)


@dataclass(frozen=True)
class BestEffortConfig:
    """GPU-sharing notebooks/inference (openb's sharing tasks): reclaimable, no SLA."""

    pods_per_h: float = 6.0
    gpu_milli_probs: dict[str, float] = field(default_factory=lambda: {"500": 1.0})
    cpu_milli: float = 4000.0
    mem_mib: float = 15258.0
    duration_mean_s: float = 3600.0
    gpu_activity: float = 0.5
    priority: int = 0
    images: tuple[int, ...] = (4,)


@dataclass(frozen=True)
class BurstConfig:
    jobs: int = 200
    window_s: float = 600.0
    at_h: float = 2.0
    hours: float = 6.0


@dataclass(frozen=True)
class MetricsConfig:
    queue_threshold_s: float = 30.0
    web_window_s: float = 300.0
    telemetry_interval_s: float = 10.0
    telemetry_len: int = 12


@dataclass(frozen=True)
class LoadTargets:
    """Offered-load targets the arrival rates are derived from (dsan.sim.scenario.offered).

    ``gpu_mean``: daily mean GPUs held by training plus best effort, a GPU-sharing pod
    counting as the whole GPU it blocks for whole-GPU jobs, as a fraction of all GPUs.
    ``cpu_peak``: requested cores at the diurnal peak, as a fraction of all cores.
    """

    gpu_mean: float = 0.65
    cpu_peak: float = 0.60


@dataclass(frozen=True)
class ScenarioConfig:
    version: int = CONFIG_VERSION
    name: str = "seed-table1"
    hours: float = 24.0
    cluster: ClusterConfig = ClusterConfig()
    startup: StartupConfig = StartupConfig()
    scale_down: ScaleDownConfig = ScaleDownConfig()
    scale_up: ScaleUpConfig = ScaleUpConfig()
    overprovisioning: OverprovisioningConfig = OverprovisioningConfig()
    contention: ContentionConfig = ContentionConfig()
    locality: LocalityConfig = LocalityConfig()
    training: TrainingConfig = TrainingConfig()
    batch: BatchConfig = BatchConfig()
    web: WebConfig = WebConfig()
    besteffort: BestEffortConfig = BestEffortConfig()
    burst: BurstConfig = BurstConfig()
    metrics: MetricsConfig = MetricsConfig()
    load_targets: LoadTargets = LoadTargets()
    #: Score ties: ``random`` (stock kube-scheduler's selectHost, every policy's default
    #: here) or ``name`` (the lowest node name, what the DSAN sidecar replies with:
    #: sidecar/tiebreak.py), so a policy can be evaluated as the deployed sidecar serves it.
    tie_break: str = "random"

    def validate(self) -> ScenarioConfig:
        """Raise ``ValueError`` naming the first bad value; return self for chaining."""
        if self.version not in SUPPORTED_VERSIONS:
            raise ValueError(
                f"scenario version {self.version} unsupported (want one of {SUPPORTED_VERSIONS})"
            )
        if self.hours <= 0:
            raise ValueError("hours must be > 0")
        if self.tie_break not in ("random", "name"):
            raise ValueError(f"tie_break must be random or name, got {self.tie_break!r}")
        if not self.cluster.node_groups:
            raise ValueError("cluster.node_groups must list at least one group")
        for i, g in enumerate(self.cluster.node_groups):
            if g.count <= 0 or g.cpu_milli <= 0 or g.mem_mib <= 0 or g.hourly_cost < 0:
                raise ValueError(f"cluster.node_groups[{i}]: count/cpu/mem must be > 0, cost >= 0")
            if not 0 <= g.gpus <= 8:
                raise ValueError(f"cluster.node_groups[{i}].gpus must be within 0..8")
        for name, probs in (
            ("training.gpu_count_probs", self.training.gpu_count_probs),
            ("besteffort.gpu_milli_probs", self.besteffort.gpu_milli_probs),
        ):
            if not probs or any(p < 0 for p in probs.values()) or sum(probs.values()) <= 0:
                raise ValueError(f"{name} must hold non-negative probabilities with a positive sum")
        t = self.training
        for k in t.gpu_count_probs:
            q = t.duration_quantiles_s.get(k)
            if q is None or len(q) != len(t.quantile_points) or list(q) != sorted(q):
                raise ValueError(
                    f"training.duration_quantiles_s[{k}] must be sorted, one per quantile_points"
                )
        n_images = len(self.startup.image_mib)
        for name, ids in (
            ("training", t.images),
            ("batch", self.batch.images),
            ("web", self.web.images),
            ("besteffort", self.besteffort.images),
        ):
            if not ids or any(not 0 <= i < n_images for i in ids):
                raise ValueError(f"{name}.images must be ids within 0..{n_images - 1}")
        if not 0 < self.web.trough_rho <= self.web.peak_rho < 1:
            raise ValueError("web: need 0 < trough_rho <= peak_rho < 1")
        if self.web.replicas[0] < 1 or self.web.replicas[1] < self.web.replicas[0]:
            raise ValueError("web.replicas must be [min, max] with 1 <= min <= max")
        for name, rate in (
            ("training.jobs_per_h", t.jobs_per_h),
            ("batch.jobs_per_h", self.batch.jobs_per_h),
            ("besteffort.pods_per_h", self.besteffort.pods_per_h),
        ):
            if rate < 0:
                raise ValueError(f"{name} must be >= 0")
        for name, amp in (
            ("training", t.diurnal_amplitude),
            ("batch", self.batch.diurnal_amplitude),
        ):
            if not 0 <= amp <= 1:
                raise ValueError(f"{name}.diurnal_amplitude must be within 0..1")
        for name, frac in (
            ("load_targets.gpu_mean", self.load_targets.gpu_mean),
            ("load_targets.cpu_peak", self.load_targets.cpu_peak),
        ):
            if not 0 < frac <= 1.5:
                raise ValueError(f"{name} must be within (0, 1.5]")
        if self.training.max_duration_s < self.training.min_duration_s:
            raise ValueError("training.max_duration_s must be >= min_duration_s")
        if self.metrics.telemetry_len < 1 or self.metrics.telemetry_interval_s <= 0:
            raise ValueError("metrics.telemetry_len and telemetry_interval_s must be > 0")
        op = self.overprovisioning
        if op.pods < 0 or op.cpu_milli <= 0 or op.mem_mib <= 0:
            raise ValueError("overprovisioning: need pods >= 0 and cpu_milli, mem_mib > 0")
        if op.pods and not self.scale_up.ready_nodes_first:
            # Without it a pod that fits no Ready node boots an off node instead of evicting
            # a placeholder: the placeholders would hold capacity and never hand it over.
            raise ValueError("overprovisioning.pods > 0 needs scale_up.ready_nodes_first: true")
        if op.pods and not any(
            g.gpus == 0 and g.cpu_milli >= op.cpu_milli and g.mem_mib >= op.mem_mib
            for g in self.cluster.node_groups
        ):
            raise ValueError("overprovisioning: no CPU node group fits one placeholder")
        return self


def from_dict(data: dict[str, Any]) -> ScenarioConfig:
    return build(ScenarioConfig, data, what="scenario").validate()


def with_settings(data: dict[str, Any], settings: Sequence[str]) -> dict[str, Any]:
    """``data`` with each ``dotted.key=value`` of ``settings`` set, the value read as YAML
    (``32``, ``true``, ``[8, 16]``); sections are created as needed, and validation then names
    an unknown key or a bad value as for the file itself."""
    out = copy.deepcopy(data)
    for item in settings:
        key, sep, text = item.partition("=")
        path = key.strip().split(".")
        if not sep or not all(path):
            raise ValueError(f"--set {item!r}: want dotted.key=value")
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ValueError(f"--set {item!r}: value is not YAML: {exc}") from None
        node = out
        for part in path[:-1]:
            nxt = node.setdefault(part, {})
            if not isinstance(nxt, dict):
                raise ValueError(f"--set {item!r}: {part} is not a section")
            node = nxt
        node[path[-1]] = value
    return out


def load(name_or_path: str, settings: Sequence[str] = ()) -> ScenarioConfig:
    """Load a shipped scenario by name (``seed-table1``) or a YAML file by path, with
    ``settings`` (``dotted.key=value``, :func:`with_settings`) applied on top."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        try:
            text = read_text(path)
        except InputFileError as exc:
            line = "" if exc.line is None else f", line {exc.line}"
            raise ValueError(f"scenario file {path}{line}: {exc.message}") from None
        where = str(path)
    else:
        res = resources.files("dsan").joinpath("scenarios", f"{name_or_path}.yaml")
        if not res.is_file():
            raise ValueError(
                f"unknown scenario {name_or_path!r} (no dsan/scenarios/{name_or_path}.yaml)"
            )
        text = res.read_text()
        where = f"dsan/scenarios/{name_or_path}.yaml"
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"{where}: not valid YAML: {exc}") from None
    if settings:
        if not isinstance(data, dict):
            raise ValueError(f"{where}: expected a mapping")
        data = with_settings(data, settings)
        where += " with --set " + " ".join(settings)
    try:
        return from_dict(data)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def replace(cfg: ScenarioConfig, **changes: Any) -> ScenarioConfig:
    return dataclasses.replace(cfg, **changes).validate()
