"""GPUTelemetry round-trips, and malformed objects fail naming the field."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from dsan.api import telemetry as tm
from dsan.api.types import API_VERSION, TELEMETRY_KIND


def _sample() -> tm.GPUTelemetry:
    gpus = tuple(
        tm.GPUInfo(uuid=f"GPU-{i}", index=i, model="A100-SXM4-80GB", memory_total_mib=81920,
                   nvlink_domain=0 if i < 2 else None, nvlink_peers=(1 - i,) if i < 2 else ())
        for i in range(3)
    )
    statuses = tuple(
        tm.GPUStatus(uuid=f"GPU-{i}", index=i,
                     health=tm.UNHEALTHY if i == 2 else tm.HEALTHY,
                     health_reason="Xid 79" if i == 2 else "", xid_errors=i,
                     last_xid=79 if i == 2 else None,
                     windows={m: (float(i), 2.5 + i) for m in tm.WINDOW_METRICS},
                     pods=(tm.PodRef("ml", "train-0", "worker"),
                           tm.PodRef("ml", "train-1", "")) if i == 1 else ())
        for i in range(3)
    )
    return tm.GPUTelemetry(node_name="node-a", gpus=gpus, statuses=statuses,
                           sampled_at=datetime(2026, 12, 2, 10, 0, 1, 250000, tzinfo=UTC),
                           pod_attribution=True)


def test_round_trip_preserves_every_field() -> None:
    obj = _sample()
    d = obj.to_dict()
    assert d["apiVersion"] == API_VERSION and d["kind"] == TELEMETRY_KIND
    assert d["metadata"]["name"] == "node-a"
    assert d["status"]["sampledAt"] == "2026-12-02T10:00:01.250Z"
    back = tm.GPUTelemetry.from_dict(d)
    assert back == obj
    assert back.status_of("GPU-2") is not None and back.status_of("GPU-2").last_xid == 79  # type: ignore[union-attr]
    assert back.status_of("nope") is None
    assert d["status"]["podAttribution"] is True and "pods" not in d["status"]["gpus"][0]
    assert d["status"]["gpus"][1]["pods"][0] == {"namespace": "ml", "name": "train-0",
                                                 "container": "worker"}


def test_object_without_pods_reads_as_unattributed() -> None:
    """Objects written before per-pod attribution still parse: no pods, attribution unknown."""
    d = _sample().to_dict()
    del d["status"]["podAttribution"]
    del d["status"]["gpus"][1]["pods"]
    back = tm.GPUTelemetry.from_dict(d)
    assert back.pod_attribution is False and back.statuses[1].pods == ()


def test_gpu_without_nvlink_omits_domain() -> None:
    d = _sample().to_dict()
    assert "nvlinkDomain" not in d["spec"]["gpus"][2]
    assert d["spec"]["gpus"][0]["nvlinkDomain"] == 0


def test_unknown_metric_is_ignored_for_forward_compatibility() -> None:
    d = _sample().to_dict()
    d["status"]["gpus"][0]["windows"]["futureMetric"] = [1.0, 2.0]
    assert tm.GPUTelemetry.from_dict(d).statuses[0].series("util") == (0.0, 2.5)


def _break(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    d = copy.deepcopy(_sample().to_dict())
    cur: Any = d
    for p in path[:-1]:
        cur = cur[p]
    cur[path[-1]] = value
    return d


@pytest.mark.parametrize(
    ("path", "value", "msg"),
    [
        (("status", "sampledAt"), "yesterday", "status.sampledAt"),
        (("status", "sampledAt"), "2026-12-02T10:00:00", "time zone"),
        (("spec", "gpus", 1, "uuid"), "", "spec.gpus[1].uuid"),
        (("spec", "gpus", 0, "memoryTotalMiB"), "lots", "spec.gpus[0].memoryTotalMiB"),
        (("status", "gpus", 2, "health"), "Sick", "status.gpus[2].health"),
        (("status", "gpus", 0, "windows", "util"), [1.0, float("nan")],
         "status.gpus[0].windows.util[1]"),
        (("status", "gpus", 0, "windows", "powerW"), [1.0], "different lengths"),
        (("spec", "windowSeconds"), 0, "windowSeconds"),
        (("kind",), "Pod", "kind"),
        (("spec", "gpus"), {"a": 1}, "spec.gpus"),
        (("status", "gpus", 1, "pods"), "ml/train-0", "status.gpus[1].pods"),
        (("status", "gpus", 1, "pods", 0, "name"), "", "status.gpus[1].pods[0].name"),
    ],
)
def test_malformed_object_names_the_field(path: tuple[Any, ...], value: Any, msg: str) -> None:
    bad = _break(path, value)
    with pytest.raises(tm.TelemetryError, match=msg.replace("[", r"\[").replace("]", r"\]")):
        tm.GPUTelemetry.from_dict(bad)


def test_from_dict_accepts_good_object() -> None:
    assert tm.GPUTelemetry.from_dict(_sample().to_dict()) == _sample()
