"""The Helm chart's values map one to one onto the components' config dataclasses, and its
values.schema.json (hack/chartschema.py) is generated from the same dataclasses."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import yaml

from deviceplugin.config import PluginConfig
from sidecar.config import SidecarConfig

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "dsan-scheduler"
_spec = importlib.util.spec_from_file_location("chartschema", ROOT / "hack" / "chartschema.py")
assert _spec is not None and _spec.loader is not None
chartschema = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(chartschema)
NOT_IN_VALUES = set(chartschema.DEVICEPLUGIN_NOT_IN_VALUES)


def values() -> dict[str, Any]:
    return dict(yaml.safe_load((CHART / "values.yaml").read_text()))


def schema() -> dict[str, Any]:
    return dict(json.loads((CHART / "values.schema.json").read_text()))


def test_sidecar_values_are_exactly_the_sidecar_config_with_its_defaults() -> None:
    cfg = values()["sidecar"]["config"]
    assert set(cfg) == {f.name for f in fields(SidecarConfig)}
    # Validated exactly as `dsan serve --config` would, and no default silently forked: the
    # chart's own values are the named, documented ones.
    assert SidecarConfig.from_mapping(cfg) == replace(SidecarConfig(),
                                                      **chartschema.SIDECAR_CHART_DEFAULTS)


def test_the_values_schema_is_generated_from_the_dataclasses_and_current() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "hack" / "chartschema.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    props = schema()["properties"]
    sc = props["sidecar"]["properties"]["config"]["properties"]
    dp = props["devicePlugin"]["properties"]["config"]["properties"]
    assert set(sc) == {f.name for f in fields(SidecarConfig)}
    assert set(dp) == {f.name for f in fields(PluginConfig)} - NOT_IN_VALUES
    # The schema's defaults are what values.yaml ships.
    for name, prop in sc.items():
        assert prop["default"] == values()["sidecar"]["config"][name], name
    for name, prop in dp.items():
        got = values()["devicePlugin"]["config"][name]
        assert (sorted(got) if isinstance(got, list) else got) == prop["default"], name


def _paths(v: Any, prefix: str = "") -> set[str]:
    """The dotted key paths of a values mapping, down to the leaves."""
    if not isinstance(v, dict) or not v:
        return {prefix}
    return set().union(*(_paths(x, f"{prefix}.{k}" if prefix else str(k)) for k, x in v.items()))


def test_every_value_is_in_the_schema() -> None:
    def find(s: dict[str, Any], path: str) -> bool:
        for key in path.split("."):
            if s.get("type") != "object" or "properties" not in s:
                return s.get("type") == "object"  # a free-form map (nodeSelector, resources)
            if key not in s["properties"]:
                return False
            s = s["properties"][key]
        return True

    missing = [p for p in _paths(values()) if not find(schema(), p)]
    assert not missing, f"values.yaml keys without a schema: {missing}"


def test_deviceplugin_values_are_plugin_config_fields_each_rendered_as_a_flag() -> None:
    cfg = values()["devicePlugin"]["config"]
    names = {f.name for f in fields(PluginConfig)}
    assert set(cfg) <= names, set(cfg) - names
    assert names - set(cfg) == NOT_IN_VALUES
    template = (CHART / "templates" / "deviceplugin-daemonset.yaml").read_text()
    used = set(re.findall(r"\$c\.(\w+)", template))
    assert used == set(cfg), f"values without a flag: {set(cfg) - used}; unknown: {used - set(cfg)}"
    defaults = PluginConfig(node_name="-")
    for key, value in cfg.items():
        default = chartschema.DEVICEPLUGIN_CHART_DEFAULTS.get(key, getattr(defaults, key))
        if isinstance(default, (tuple, frozenset)):
            assert sorted(value) == sorted(default), key
        else:
            assert str(value) == str(default), key


def test_scheduler_values_match_the_shipped_scheduler_config() -> None:
    shipped = yaml.safe_load(
        (CHART.parents[1] / "scheduler-config" / "dsan-scheduler.yaml").read_text()
    )
    v = values()["scheduler"]
    ext = shipped["extenders"][0]
    assert (v["extender"]["weight"], v["extender"]["httpTimeout"], v["extender"]["ignorable"]) == (
        ext["weight"],
        ext["httpTimeout"],
        ext["ignorable"],
    )
    assert (v["qps"], v["burst"]) == (
        shipped["clientConnection"]["qps"],
        shipped["clientConnection"]["burst"],
    )
    assert v["schedulerName"] == shipped["profiles"][0]["schedulerName"]
    # The sidecar routes POST <url_prefix>/preempt (sidecar/extender.py).
    assert (ext["prioritizeVerb"], ext["preemptVerb"]) == ("prioritize", "preempt")
    assert ("filterVerb" in ext) == v["extender"]["filter"]
    # The gRPC profile ships the quota off too (the chart adds DSANScore's PreFilter/Filter).
    grpc = yaml.safe_load(
        (CHART.parents[1] / "scheduler-config" / "dsan-scheduler-grpc.yaml").read_text()
    )["profiles"][0]["plugins"]
    assert ("preFilter" in grpc or "filter" in grpc) == v["extender"]["filter"]
    assert ext["urlPrefix"].endswith(f":{SidecarConfig().http_port}{SidecarConfig().url_prefix}")


def test_the_sidecar_assumes_pods_of_the_scheduler_the_chart_deploys() -> None:
    v = values()
    assert v["sidecar"]["config"]["scheduler_name"] == v["scheduler"]["schedulerName"]
