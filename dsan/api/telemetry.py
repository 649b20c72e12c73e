"""The GPUTelemetry custom resource: typed dataclasses with ``to_dict`` / ``from_dict``.

One object per GPU node, named after the node, written by the device plugin every few
seconds and informed on by the scoring sidecar. Shape (camelCase on the wire)::

    apiVersion: dsan.io/v1alpha1
    kind: GPUTelemetry
    metadata: {name: <node>}
    spec:                       # what the node has; changes only when hardware changes
      nodeName, windowSeconds, horizonSeconds, sampleIntervalSeconds
      gpus: [{uuid, index, model, memoryTotalMiB, nvlinkDomain, nvlinkPeers, pciBusId}]
    status:                     # what the node is doing
      available, reason, sampledAt (RFC 3339 UTC), podAttribution
      gpus: [{uuid, index, health, healthReason, xidErrors, lastXid,
              pods: [{namespace, name, container}],
              windows: {util, memoryUsedMiB, powerW, temperatureC, smClockMHz,
                        pcieTxKBps, pcieRxKBps}}]

Each ``windows`` series (all of one GPU the same length) holds the means of consecutive
``windowSeconds`` windows, oldest first, the last ending at ``sampledAt``; at most
``horizonSeconds / windowSeconds``. ``available: false``: no telemetry (series absent, not
zeros). ``pods``: the containers kubelet gave the GPU to; ``podAttribution: false``: unknown.
``from_dict`` raises :class:`TelemetryError` naming the field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from dsan.api.types import API_VERSION, TELEMETRY_KIND

#: Series names inside ``status.gpus[].windows``, in this order everywhere (feature columns).
WINDOW_METRICS: Final = ("util", "memoryUsedMiB", "powerW", "temperatureC", "smClockMHz",
                         "pcieTxKBps", "pcieRxKBps")
HEALTHY: Final = "Healthy"
UNHEALTHY: Final = "Unhealthy"
HEALTH_VALUES: Final = (HEALTHY, UNHEALTHY)
DEFAULT_WINDOW_S: Final = 10
DEFAULT_HORIZON_S: Final = 300


class TelemetryError(ValueError):
    """A GPUTelemetry object that does not match the schema; the message names the field."""


def format_time(t: datetime) -> str:
    """RFC 3339 in UTC with millisecond precision, the way the apiserver round-trips strings."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def parse_time(value: str, where: str = "sampledAt") -> datetime:
    try:
        out = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except (AttributeError, ValueError) as exc:
        raise TelemetryError(f"{where}: not an RFC 3339 timestamp: {value!r}") from exc
    if out.tzinfo is None:
        raise TelemetryError(f"{where}: timestamp without a time zone: {value!r}")
    return out.astimezone(UTC)


@dataclass(frozen=True, slots=True)
class GPUInfo:
    """One GPU's identity and place in the node's topology (``spec.gpus[]``)."""

    uuid: str
    index: int
    model: str
    memory_total_mib: int
    #: GPUs with the same domain id are connected by NVLink; ``None`` = no NVLink.
    nvlink_domain: int | None = None
    nvlink_peers: tuple[int, ...] = ()
    pci_bus_id: str = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"uuid": self.uuid, "index": self.index, "model": self.model,
                               "memoryTotalMiB": self.memory_total_mib,
                               "nvlinkPeers": list(self.nvlink_peers)}
        if self.nvlink_domain is not None:
            out["nvlinkDomain"] = self.nvlink_domain
        if self.pci_bus_id:
            out["pciBusId"] = self.pci_bus_id
        return out

    @classmethod
    def from_dict(cls, d: Any, where: str = "spec.gpus[]") -> GPUInfo:
        d = _mapping(d, where)
        domain = d.get("nvlinkDomain")
        return cls(
            uuid=_str(d, "uuid", where),
            index=_int(d, "index", where),
            model=_str(d, "model", where),
            memory_total_mib=_int(d, "memoryTotalMiB", where),
            nvlink_domain=None if domain is None else _int(d, "nvlinkDomain", where),
            nvlink_peers=tuple(_numbers(d.get("nvlinkPeers", []), f"{where}.nvlinkPeers", int)),
            pci_bus_id=str(d.get("pciBusId", "")),
        )


@dataclass(frozen=True, slots=True, order=True)
class PodRef:
    """A container that holds a GPU (``status.gpus[].pods[]``)."""

    namespace: str
    name: str
    container: str

    def to_dict(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "name": self.name, "container": self.container}

    @classmethod
    def from_dict(cls, d: Any, where: str = "pods[]") -> PodRef:
        d = _mapping(d, where)
        return cls(namespace=_str(d, "namespace", where), name=_str(d, "name", where),
                   container=str(d.get("container", "")))


@dataclass(frozen=True, slots=True)
class GPUStatus:
    """One GPU's health and recent windows (``status.gpus[]``)."""

    uuid: str
    index: int
    health: str = HEALTHY
    health_reason: str = ""
    xid_errors: int = 0
    last_xid: int | None = None
    #: metric name (one of WINDOW_METRICS) -> window means, oldest first.
    windows: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    pods: tuple[PodRef, ...] = ()

    def series(self, metric: str) -> tuple[float, ...]:
        return tuple(self.windows.get(metric, ()))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "uuid": self.uuid,
            "index": self.index,
            "health": self.health,
            "xidErrors": self.xid_errors,
            # Rounded so a 30-window x 7-metric x 8-GPU object stays a few KB.
            "windows": {m: [round(float(v), 3) for v in self.windows.get(m, ())]
                        for m in WINDOW_METRICS},
        }
        if self.health_reason:
            out["healthReason"] = self.health_reason
        if self.last_xid is not None:
            out["lastXid"] = self.last_xid
        if self.pods:
            out["pods"] = [p.to_dict() for p in self.pods]
        return out

    @classmethod
    def from_dict(cls, d: Any, where: str = "status.gpus[]") -> GPUStatus:
        d = _mapping(d, where)
        health = d.get("health", HEALTHY)
        if health not in HEALTH_VALUES:
            raise TelemetryError(f"{where}.health: {health!r} is not one of {HEALTH_VALUES}")
        raw = _mapping(d.get("windows", {}), f"{where}.windows")
        windows: dict[str, tuple[float, ...]] = {}
        for name, values in raw.items():
            if name in WINDOW_METRICS:  # a newer writer's metric: ignored, the node kept
                windows[name] = tuple(_numbers(values, f"{where}.windows.{name}", float))
        lengths = {len(s) for s in windows.values()}
        if len(lengths) > 1:
            raise TelemetryError(f"{where}.windows: series have different lengths "
                                 f"{sorted(lengths)}")
        last = d.get("lastXid")
        return cls(
            uuid=_str(d, "uuid", where),
            index=_int(d, "index", where),
            health=health,
            health_reason=str(d.get("healthReason", "")),
            xid_errors=_int(d, "xidErrors", where, default=0),
            last_xid=None if last is None else _int(d, "lastXid", where),
            windows=windows,
            pods=tuple(PodRef.from_dict(p, f"{where}.pods[{i}]")
                       for i, p in enumerate(_list(d.get("pods", []), f"{where}.pods"))),
        )


@dataclass(frozen=True, slots=True)
class GPUTelemetry:
    """The whole per-node object."""

    node_name: str
    gpus: tuple[GPUInfo, ...]
    statuses: tuple[GPUStatus, ...]
    sampled_at: datetime
    available: bool = True
    reason: str = ""
    window_seconds: int = DEFAULT_WINDOW_S
    horizon_seconds: int = DEFAULT_HORIZON_S
    sample_interval_seconds: float = 1.0
    #: The per-GPU ``pods`` lists come from kubelet now (False: unknown, not empty).
    pod_attribution: bool = False

    def __post_init__(self) -> None:
        if not self.node_name:
            raise TelemetryError("metadata.name / spec.nodeName: empty node name")
        if self.window_seconds <= 0 or self.horizon_seconds < self.window_seconds:
            raise TelemetryError(f"spec: need 0 < windowSeconds <= horizonSeconds, got "
                                 f"{self.window_seconds} and {self.horizon_seconds}")

    def status_of(self, uuid: str) -> GPUStatus | None:
        return next((s for s in self.statuses if s.uuid == uuid), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "apiVersion": API_VERSION,
            "kind": TELEMETRY_KIND,
            "metadata": {"name": self.node_name},
            "spec": {
                "nodeName": self.node_name,
                "windowSeconds": self.window_seconds,
                "horizonSeconds": self.horizon_seconds,
                "sampleIntervalSeconds": self.sample_interval_seconds,
                "gpus": [g.to_dict() for g in self.gpus],
            },
            "status": {
                "available": self.available,
                "reason": self.reason,
                "sampledAt": format_time(self.sampled_at),
                "podAttribution": self.pod_attribution,
                "gpus": [s.to_dict() for s in self.statuses],
            },
        }

    @classmethod
    def from_dict(cls, obj: Any) -> GPUTelemetry:
        obj = _mapping(obj, "object")
        if obj.get("kind", TELEMETRY_KIND) != TELEMETRY_KIND:
            raise TelemetryError(f"kind: expected {TELEMETRY_KIND}, got {obj.get('kind')!r}")
        meta = _mapping(obj.get("metadata", {}), "metadata")
        spec = _mapping(obj.get("spec", {}), "spec")
        status = _mapping(obj.get("status", {}), "status")
        name = str(meta.get("name") or spec.get("nodeName") or "")
        sampled = status.get("sampledAt")
        if not isinstance(sampled, str):
            raise TelemetryError(f"status.sampledAt: missing or not a string: {sampled!r}")
        return cls(
            node_name=name,
            gpus=tuple(GPUInfo.from_dict(g, f"spec.gpus[{i}]")
                       for i, g in enumerate(_list(spec.get("gpus", []), "spec.gpus"))),
            statuses=tuple(GPUStatus.from_dict(g, f"status.gpus[{i}]")
                           for i, g in enumerate(_list(status.get("gpus", []), "status.gpus"))),
            sampled_at=parse_time(sampled, "status.sampledAt"),
            available=bool(status.get("available", True)),
            reason=str(status.get("reason", "")),
            window_seconds=_int(spec, "windowSeconds", "spec", default=DEFAULT_WINDOW_S),
            horizon_seconds=_int(spec, "horizonSeconds", "spec", default=DEFAULT_HORIZON_S),
            sample_interval_seconds=_number(spec.get("sampleIntervalSeconds", 1.0),
                                            "spec.sampleIntervalSeconds", float),
            pod_attribution=bool(status.get("podAttribution", False)),
        )


# --- small typed readers; each error names the field path -----------------------------------
def _mapping(v: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(v, Mapping):
        raise TelemetryError(f"{where}: expected an object, got {type(v).__name__}")
    return v


def _list(v: Any, where: str) -> Sequence[Any]:
    if not isinstance(v, list | tuple):
        raise TelemetryError(f"{where}: expected a list, got {type(v).__name__}")
    return v


def _str(d: Mapping[str, Any], key: str, where: str) -> str:
    v = d.get(key)
    if not isinstance(v, str) or not v:
        raise TelemetryError(f"{where}.{key}: expected a non-empty string, got {v!r}")
    return v


_MISSING: Any = object()


def _int(d: Mapping[str, Any], key: str, where: str, default: Any = _MISSING) -> int:
    v = d.get(key, default)
    if v is _MISSING or isinstance(v, bool) or not isinstance(v, int | float) or v != int(v):
        raise TelemetryError(f"{where}.{key}: expected an integer, got {d.get(key)!r}")
    return int(v)


def _number(x: Any, where: str, kind: type[int] | type[float]) -> Any:
    """``x`` as an integer (``kind`` int) or a finite number (as a float)."""
    ok = int if kind is int else int | float
    if isinstance(x, bool) or not isinstance(x, ok) or (kind is float and not math.isfinite(x)):
        want = "an integer" if kind is int else "a finite number"
        raise TelemetryError(f"{where}: expected {want}, got {x!r}")
    return kind(x)


def _numbers(v: Any, where: str, kind: type[int] | type[float]) -> list[Any]:
    """The list ``v`` of :func:`_number` ``kind``."""
    return [_number(x, f"{where}[{i}]", kind) for i, x in enumerate(_list(v, where))]
