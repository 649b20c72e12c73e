"""Names that cross component boundaries (resources, labels, annotations, the telemetry CRD),
defined once, with parsers that return ``None`` (or the default) on a foreign value instead of
raising: a bad label on one node cannot take the scheduler down.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

GROUP: Final = "dsan.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
TELEMETRY_KIND: Final = "GPUTelemetry"
TELEMETRY_PLURAL: Final = "gputelemetries"
TELEMETRY_SINGULAR: Final = "gputelemetry"
TELEMETRY_SHORT: Final = "gput"

SCHEDULER_NAME: Final = "dsan-scheduler"

RESOURCE_GPU: Final = "nvidia.com/gpu"
#: Per-GPU share in thousandths (openb's ``gpu_milli``), requested by GPU-sharing pods.
RESOURCE_GPU_MILLI: Final = "dsan.io/gpu-milli"

LABEL_ZONE: Final = "topology.kubernetes.io/zone"
LABEL_RACK: Final = "dsan.io/rack"
LABEL_NVLINK_DOMAIN: Final = "dsan.io/nvlink-domain"
#: Same key as NVIDIA's GPU feature discovery, so real clusters need no relabelling.
LABEL_GPU_MODEL: Final = "nvidia.com/gpu.product"
LABEL_GPU_COUNT: Final = "nvidia.com/gpu.count"
LABEL_HOURLY_COST: Final = "dsan.io/hourly-cost"

#: Allowed GPU models, ``|``-separated like openb's ``gpu_spec``; empty or absent = any.
ANNOTATION_GPU_MODELS: Final = "dsan.io/gpu-models"
#: Per-GPU share in thousandths for a GPU-sharing pod (1..1000).
ANNOTATION_GPU_MILLI: Final = "dsan.io/gpu-milli"
#: Task type for the business-tier features: one of TASK_TYPES.
ANNOTATION_TASK_TYPE: Final = "dsan.io/task-type"
#: Written by the sidecar on every pod the dsan-scheduler bound: the policy and model
#: version that scored its candidates (:class:`ScoredBy`).
ANNOTATION_SCORED_BY: Final = "dsan.io/scored-by"

TASK_TYPES: Final = ("other", "train", "batch", "web")
#: Task types whose pods serve requests: never reclaimed by a protecting reclaimer, and
#: their nodes' CPU headroom is what DSAN's quota keeps (dsan.policies.dsan_actions).
LATENCY_SENSITIVE_TYPES: Final = ("web",)
#: The same, as indices into TASK_TYPES (PodSpec.task_type).
LATENCY_SENSITIVE_INDICES: Final = frozenset(
    TASK_TYPES.index(t) for t in LATENCY_SENSITIVE_TYPES)

# Reclamation (the extender's preempt verb, docs/sidecar.md "Preemption"): what a victim's
# eviction costs, and how an elastic workload shrinks instead of recreating what was evicted.
#: ``"true"`` on a pod its workload can lose and go on without (an executor or worker above
#: the job's minimum): evicting it shrinks the workload instead of stopping it.
ANNOTATION_ELASTIC: Final = "dsan.io/elastic"
#: Seconds of work an eviction of this pod throws away (e.g. its checkpoint interval), a
#: non-negative decimal; absent: everything since the pod started.
ANNOTATION_LOST_SECONDS: Final = "dsan.io/lost-seconds"
#: On an elastic member: the name of the pod in the same namespace that owns its workload (a
#: Spark-driver-like pod) and carries :data:`ANNOTATION_DESIRED_MEMBERS`.
ANNOTATION_WORKLOAD_OWNER: Final = "dsan.io/workload-owner"
#: On a workload owner: how many elastic members its own controller keeps running. When
#: members are evicted to make room, the sidecar lowers it by as many, so the controller does
#: not recreate them.
ANNOTATION_DESIRED_MEMBERS: Final = "dsan.io/desired-members"
#: On a workload owner (optional): the sidecar never lowers the desired count below it.
ANNOTATION_MIN_MEMBERS: Final = "dsan.io/min-members"
#: On a workload owner scheduled by dsan-scheduler, without a desired count yet: the most
#: members it can use (Spark's ``maxExecutors``); the served policy grants it a desired
#: count between the minimum and this (DSAN's learned share of the growth).
ANNOTATION_MAX_MEMBERS: Final = "dsan.io/max-members"

#: ``reportingController`` of the sidecar's Events (a qualified name, as the API requires).
EVENT_CONTROLLER: Final = "dsan.io/sidecar"
#: ``action`` of a decision's Event.
EVENT_ACTION: Final = "Score"
#: ``reason``: the sidecar scored the pod's candidates, or it did not (one feasible node, or
#: the decision was forgotten).
EVENT_REASON_SCORED: Final = "DSANScored"
EVENT_REASON_NOT_SCORED: Final = "DSANNotScored"


def parse_gpu_models(value: str | None) -> tuple[str, ...]:
    """``"V100M16|V100M32"`` -> ``("V100M16", "V100M32")``; empty or None -> ``()`` (any)."""
    if not value:
        return ()
    return tuple(sorted({m.strip() for m in value.split("|") if m.strip()}))


def parse_gpu_milli(value: str | None) -> int | None:
    """A per-GPU share in thousandths, 1..1000, or None when absent or malformed (only ASCII
    digits: ``int()`` would also take spaces, ``_`` and other scripts' digits)."""
    if value is None or not (0 < len(value) <= 4 and value.isascii() and value.isdigit()):
        return None
    milli = int(value)
    return milli if 0 < milli <= 1000 else None


def parse_task_type(value: str | None) -> str:
    """A known task type, ``"other"`` for anything else."""
    return value if value in TASK_TYPES else "other"


def parse_elastic(value: str | None) -> bool:
    """:data:`ANNOTATION_ELASTIC`: only ``"true"`` (any case) is elastic."""
    return isinstance(value, str) and value.lower() == "true"


def parse_lost_seconds(value: str | None) -> float | None:
    """:data:`ANNOTATION_LOST_SECONDS`: a finite, non-negative number of seconds, or None
    when absent or malformed (then the caller assumes all work since the start is lost)."""
    if not isinstance(value, str) or len(value) > 32:
        return None
    out = parse_float_label(value)
    return out if out is not None and out != float("inf") else None


def parse_member_count(value: str | None) -> int | None:
    """:data:`ANNOTATION_DESIRED_MEMBERS`, :data:`ANNOTATION_MIN_MEMBERS` or
    :data:`ANNOTATION_MAX_MEMBERS`: a count of
    ASCII digits, 0..1_000_000, or None when absent or malformed."""
    if not isinstance(value, str) or not (0 < len(value) <= 7 and value.isascii()
                                          and value.isdigit()):
        return None
    n = int(value)
    return n if n <= 1_000_000 else None


def parse_workload_owner(value: str | None) -> str | None:
    """:data:`ANNOTATION_WORKLOAD_OWNER`: a pod name (a DNS subdomain: at most 253 lowercase
    alphanumerics, ``-`` and ``.``), or None when absent or not a name."""
    if not isinstance(value, str) or not 0 < len(value) <= 253:
        return None
    ok = value.isascii() and all((c.isalnum() and not c.isupper()) or c in "-." for c in value)
    return value if ok and value[0].isalnum() and value[-1].isalnum() else None


def parse_float_label(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        out = float(value)
    except ValueError:
        return None
    return out if out == out and out >= 0 else None  # rejects NaN and negatives


@dataclass(frozen=True, slots=True)
class Topology:
    """Where a node sits: zone > rack > NVLink domain. ``None`` = unknown."""

    zone: str | None = None
    rack: str | None = None
    nvlink_domain: str | None = None

    @classmethod
    def from_labels(cls, labels: dict[str, str] | None) -> Topology:
        labels = labels or {}
        return cls(
            zone=labels.get(LABEL_ZONE) or None,
            rack=labels.get(LABEL_RACK) or None,
            nvlink_domain=labels.get(LABEL_NVLINK_DOMAIN) or None,
        )


#: :data:`ANNOTATION_SCORED_BY`'s value for a pod the sidecar did not score.
NOT_SCORED: Final = "none"


@dataclass(frozen=True, slots=True)
class ScoredBy:
    """Who scored a pod: a policy and its version (empty for a heuristic; ``policy`` "" = not
    scored), written as ``policy@version``, ``policy`` alone, or :data:`NOT_SCORED`."""

    policy: str
    version: str = ""

    def __str__(self) -> str:
        if not self.policy:
            return NOT_SCORED
        return f"{self.policy}@{self.version}" if self.version else self.policy

    @classmethod
    def of(cls, label: str) -> ScoredBy:
        """From the sidecar's policy label (``dsan@<version>`` or a heuristic's name)."""
        policy, _, version = label.partition("@")
        return cls(policy, version)
