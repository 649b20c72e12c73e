"""The CRD manifest agrees with dsan.api.types and declares every field to_dict writes
(the apiserver silently prunes undeclared fields, so a miss here loses data, not a request)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from dsan.api import telemetry as tm
from dsan.api import types as t

ROOT = Path(__file__).resolve().parents[3]
CRD = ROOT / "charts" / "dsan-scheduler" / "crds" / "gputelemetry.yaml"


def _crd() -> dict[str, Any]:
    return dict(yaml.safe_load(CRD.read_text()))


def test_names_come_from_api_types() -> None:
    crd = _crd()
    spec = crd["spec"]
    assert crd["metadata"]["name"] == f"{t.TELEMETRY_PLURAL}.{t.GROUP}"
    assert spec["group"] == t.GROUP and spec["scope"] == "Cluster"
    assert spec["names"]["kind"] == t.TELEMETRY_KIND
    assert spec["names"]["plural"] == t.TELEMETRY_PLURAL
    assert spec["names"]["singular"] == t.TELEMETRY_SINGULAR
    assert t.TELEMETRY_SHORT in spec["names"]["shortNames"]
    assert [v["name"] for v in spec["versions"]] == [t.VERSION]


def _undeclared(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    if isinstance(value, dict):
        props = schema.get("properties")
        if props is None:
            return []  # e.g. metadata: free-form object
        out = []
        for k, v in value.items():
            if k not in props:
                out.append(f"{path}.{k}")
            else:
                out += _undeclared(v, props[k], f"{path}.{k}")
        return out
    if isinstance(value, list):
        return [p for v in value for p in _undeclared(v, schema.get("items", {}), f"{path}[]")]
    return []


def test_every_written_field_is_declared_and_required_ones_present() -> None:
    gpus = (tm.GPUInfo("GPU-0", 0, "H100", 81559, nvlink_domain=0, nvlink_peers=(1,),
                       pci_bus_id="0000:17:00.0"),)
    status = (tm.GPUStatus("GPU-0", 0, tm.UNHEALTHY, "Xid 79", 2, 79,
                           {m: (1.0,) for m in tm.WINDOW_METRICS},
                           pods=(tm.PodRef("ns", "pod", "c"),)),)
    obj = tm.GPUTelemetry("n1", gpus, status, datetime.now(UTC), pod_attribution=True).to_dict()
    schema = _crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert _undeclared(obj, schema, "") == []
    windows = schema["properties"]["status"]["properties"]["gpus"]["items"]["properties"]["windows"]
    assert set(windows["properties"]) == set(tm.WINDOW_METRICS)
    health = schema["properties"]["status"]["properties"]["gpus"]["items"]["properties"]["health"]
    assert tuple(health["enum"]) == tm.HEALTH_VALUES


def test_checker_catches_an_undeclared_field() -> None:
    schema = {"properties": {"a": {"type": "object", "properties": {"b": {}}}}}
    assert _undeclared({"a": {"b": 1, "c": 2}}, schema, "") == [".a.c"]
