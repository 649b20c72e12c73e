"""The scenario's typed configuration, loaded from a versioned YAML file and validated.

Every knob has its default here; ``dsan/scenarios/seed-table1.yaml`` overrides them and says
where each calibrated value came from. Bad keys and values are refused by dotted path.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from dsan.core.configload import build
from dsan.sim.inputfile import InputFileError, read_text

#: Versions this code reads: 2 (Table 1 as published in docs/results/table1.md, kept
#: byte-identical) and 3 (always-on nodes, warm start, elastic backlog, measured usage).
SUPPORTED_VERSIONS = (2, 3)


@dataclass(frozen=True)
class NodeGroup:
    count: int
    cpu_milli: float
    mem_mib: float
    hourly_cost: float
    gpus: int = 0
    gpu_model: str = ""
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
    #: False: every node stays powered on and billed for the whole run (physical nodes).
    enabled: bool = True
    grace_s: float = 600.0


@dataclass(frozen=True)
class ScaleUpConfig:
    #: False: an off node is a candidate like any other (binding boots it). True:
    #: cluster-autoscaler semantics: Ready nodes first, then booting ones, then off ones.
    ready_nodes_first: bool = False


@dataclass(frozen=True)
class OverprovisioningConfig:
    """``pods`` placeholder pods holding warm CPU-node capacity
    (:mod:`dsan.sim.scenario.overprovision`); 0 turns it off."""

    pods: int = 0
    cpu_milli: float = 8000.0
    mem_mib: float = 30520.0


@dataclass(frozen=True)
class ContentionConfig:
    threshold: float = 0.7  # CPU demand/capacity above which co-located pods interfere
    beta: float = 1.5  # slowdown per unit of demand above the threshold
    train_sensitivity: float = 0.3


@dataclass(frozen=True)
class LocalityConfig:
    """Relative training speed by the widest level a gang spans."""

    node: float = 1.0
    nvlink: float = 0.95
    rack: float = 0.8
    cross_rack: float = 0.65


@dataclass(frozen=True)
class ElasticTrainingConfig:
    """Elastic training (version 3): a job starts as a gang of its ``min`` workers (the GPU
    count drawn from the trace) and grows by single extra workers, up to ``max_factor`` x
    ``min``, at ``priority`` (reclaimable). Its rate scales with running workers / ``min``;
    every resize (a worker added or reclaimed) stops the job for ``restart_s`` (checkpoint
    and restart). ``max_factor: 1`` turns it off."""

    max_factor: int = 1
    priority: int = 50
    restart_s: float = 60.0


@dataclass(frozen=True)
class TrainingConfig:
    jobs_per_h: float = 16.0
    diurnal_amplitude: float = 0.0  # daily swing of the arrival rate (0: homogeneous)
    peak_hour: float = 11.0
    gpu_count_probs: dict[str, float] = field(default_factory=lambda: {"1": 1.0})
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
    elastic: ElasticTrainingConfig = ElasticTrainingConfig()


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
    duration_median_s: float = 1200.0  # lognormal nominal duration at full width, speed 1
    duration_sigma: float = 0.8
    cpu_use_frac: float = 1.2
    deadline_slack: float = 2.0
    driver_priority: int = 400
    executor_priority: int = 100
    images: tuple[int, ...] = (2,)
    #: Spark dynamic allocation (version 3): the first ``min_executors`` executors are the
    #: job's core (``executor_priority``, not reclaimable); the rest, up to the drawn
    #: ``executors`` count, are elastic (``elastic_priority``, reclaimable). An evicted
    #: executor loses ``evict_loss_s`` seconds of its in-flight tasks. 0 (the default) keeps
    #: version 2's executors: all reclaimable at ``executor_priority``, no loss.
    min_executors: int = 0
    elastic_priority: int = 100
    evict_loss_s: float = 0.0


@dataclass(frozen=True)
class WebConfig:
    services: int = 20
    replicas: tuple[int, int] = (3, 10)
    cpu_milli: float = 2000.0
    mem_mib: float = 4096.0
    service_rate: float = 100.0  # requests/s one replica serves at speed 1
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
    """``version: 1``: training jobs drawn as the steady training class (whole-GPU gangs).
    ``version: 2``: one-pod ResNet50 jobs on a GPU share drawn from ``gpu_milli``, with
    ``cpu_milli`` and ``mem_mib``, running ``duration_s`` (uniform in [lo, hi]) at speed 1."""

    jobs: int = 200
    window_s: float = 600.0
    at_h: float = 2.0
    hours: float = 6.0
    version: int = 1
    gpu_milli: tuple[int, ...] = (250, 333)
    cpu_milli: float = 2000.0
    mem_mib: float = 8192.0
    duration_s: tuple[float, float] = (600.0, 1200.0)


@dataclass(frozen=True)
class MetricsConfig:
    queue_threshold_s: float = 30.0
    web_window_s: float = 300.0
    telemetry_interval_s: float = 10.0
    telemetry_len: int = 12


@dataclass(frozen=True)
class LoadTargets:
    """Offered-load targets the arrival rates are derived from (hack/scenario_offered.py):
    daily mean fraction of GPUs blocked, and of cores requested at the diurnal peak."""

    gpu_mean: float = 0.65
    cpu_peak: float = 0.60


@dataclass(frozen=True)
class ScenarioConfig:
    version: int = 2  # a file without ``version`` is read as version 2
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
    #: Version 3: hours simulated before the measured window (same arrival process, the
    #: clock ``warmup_h`` behind); nothing in them counts in the metrics.
    warmup_h: float = 0.0
    #: Score ties: ``random`` (kube-scheduler's selectHost) or ``name`` (the lowest node
    #: name, as the DSAN sidecar replies).
    tie_break: str = "random"

    def validate(self) -> ScenarioConfig:
        """Raise ``ValueError`` naming the first bad value; return self for chaining."""
        t, b, w, be = self.training, self.batch, self.web, self.besteffort
        op, lt = self.overprovisioning, self.load_targets
        bad: list[tuple[bool, str]] = [  # (is it bad, message), in the order they are checked
            (self.version not in SUPPORTED_VERSIONS,
             f"scenario version {self.version} unsupported (want one of "
             f"{', '.join(map(str, SUPPORTED_VERSIONS))})"),
            (self.hours <= 0, "hours must be > 0"),
            (self.tie_break not in ("random", "name"),
             f"tie_break must be random or name, got {self.tie_break!r}"),
            (not self.cluster.node_groups, "cluster.node_groups must list at least one group"),
        ]
        for i, g in enumerate(self.cluster.node_groups):
            bad += [(g.count <= 0 or g.cpu_milli <= 0 or g.mem_mib <= 0 or g.hourly_cost < 0,
                     f"cluster.node_groups[{i}]: count/cpu/mem must be > 0, cost >= 0"),
                    (not 0 <= g.gpus <= 8, f"cluster.node_groups[{i}].gpus must be within 0..8")]
        for name, probs in (("training.gpu_count_probs", t.gpu_count_probs),
                            ("besteffort.gpu_milli_probs", be.gpu_milli_probs)):
            bad.append((not probs or any(p < 0 for p in probs.values())
                        or sum(probs.values()) <= 0,
                        f"{name} must hold non-negative probabilities with a positive sum"))
        for k in t.gpu_count_probs:
            q = t.duration_quantiles_s.get(k)
            bad.append((q is None or len(q) != len(t.quantile_points) or list(q) != sorted(q),
                        f"training.duration_quantiles_s[{k}] must be sorted, one per "
                        "quantile_points"))
        n_images = len(self.startup.image_mib)
        for name, ids in (("training", t.images), ("batch", b.images), ("web", w.images),
                          ("besteffort", be.images)):
            bad.append((not ids or any(not 0 <= i < n_images for i in ids),
                        f"{name}.images must be ids within 0..{n_images - 1}"))
        bad += [
            (not 0 < w.trough_rho <= w.peak_rho < 1, "web: need 0 < trough_rho <= peak_rho < 1"),
            (w.replicas[0] < 1 or w.replicas[1] < w.replicas[0],
             "web.replicas must be [min, max] with 1 <= min <= max"),
            (t.jobs_per_h < 0, "training.jobs_per_h must be >= 0"),
            (b.jobs_per_h < 0, "batch.jobs_per_h must be >= 0"),
            (be.pods_per_h < 0, "besteffort.pods_per_h must be >= 0"),
            (not 0 <= t.diurnal_amplitude <= 1, "training.diurnal_amplitude must be within 0..1"),
            (not 0 <= b.diurnal_amplitude <= 1, "batch.diurnal_amplitude must be within 0..1"),
            (not 0 < lt.gpu_mean <= 1.5, "load_targets.gpu_mean must be within (0, 1.5]"),
            (not 0 < lt.cpu_peak <= 1.5, "load_targets.cpu_peak must be within (0, 1.5]"),
            (t.max_duration_s < t.min_duration_s,
             "training.max_duration_s must be >= min_duration_s"),
            (self.metrics.telemetry_len < 1 or self.metrics.telemetry_interval_s <= 0,
             "metrics.telemetry_len and telemetry_interval_s must be > 0"),
            (op.pods < 0 or op.cpu_milli <= 0 or op.mem_mib <= 0,
             "overprovisioning: need pods >= 0 and cpu_milli, mem_mib > 0"),
            # Else a pod that fits no Ready node boots an off node rather than evict a placeholder.
            (op.pods != 0 and not self.scale_up.ready_nodes_first,
             "overprovisioning.pods > 0 needs scale_up.ready_nodes_first: true"),
            (op.pods != 0 and not any(g.gpus == 0 and g.cpu_milli >= op.cpu_milli
                                      and g.mem_mib >= op.mem_mib
                                      for g in self.cluster.node_groups),
             "overprovisioning: no CPU node group fits one placeholder"),
        ]
        # Version 3's settings: refused in a version 2 file (its numbers must not move).
        bu, el = self.burst, t.elastic
        v3, need = self.version >= 3, "needs version: 3"
        bad += [
            (not v3 and not self.scale_down.enabled, f"scale_down.enabled: false {need}"),
            (not v3 and self.warmup_h != 0, f"warmup_h {need}"),
            (not v3 and el != ElasticTrainingConfig(), f"training.elastic {need}"),
            (not v3 and (b.min_executors, b.elastic_priority, b.evict_loss_s) != (0, 100, 0.0),
             f"batch.min_executors, elastic_priority and evict_loss_s {need}"),
            (not v3 and bu.version != 1, f"burst.version 2 {need}"),
            (self.scale_down.grace_s < 0, "scale_down.grace_s must be >= 0"),
            (not 0 <= self.warmup_h <= 48, "warmup_h must be within 0..48"),
            (el.max_factor < 1, "training.elastic.max_factor must be >= 1"),
            (el.restart_s < 0, "training.elastic.restart_s must be >= 0"),
            (el.max_factor > 1 and el.priority >= t.priority,
             "training.elastic.priority must be below training.priority (extra workers are "
             "reclaimable)"),
            (b.min_executors < 0 or b.min_executors > min(b.executors, default=0),
             "batch.min_executors must be within 0..min(batch.executors)"),
            (b.min_executors > 0 and b.elastic_priority >= b.executor_priority,
             "batch.elastic_priority must be below batch.executor_priority"),
            (b.evict_loss_s < 0, "batch.evict_loss_s must be >= 0"),
            (bu.version not in (1, 2), "burst.version must be 1 or 2"),
            (bu.jobs < 0 or bu.window_s <= 0 or bu.hours <= 0 or bu.at_h < 0,
             "burst: need jobs >= 0, window_s > 0, hours > 0, at_h >= 0"),
            (bu.version == 2 and (not bu.gpu_milli or any(not 0 < g <= 1000
                                                          for g in bu.gpu_milli)),
             "burst.gpu_milli must list shares within 1..1000"),
            (bu.version == 2 and (bu.cpu_milli <= 0 or bu.mem_mib <= 0),
             "burst.cpu_milli and burst.mem_mib must be > 0"),
            (bu.version == 2 and not 0 < bu.duration_s[0] <= bu.duration_s[1],
             "burst.duration_s must be [lo, hi] with 0 < lo <= hi"),
        ]
        for is_bad, message in bad:
            if is_bad:
                raise ValueError(message)
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
            raise ValueError(f"scenario file {exc}") from None
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

