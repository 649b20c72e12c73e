"""The Helm chart's values map one to one onto the components' config dataclasses."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path
from typing import Any

import yaml

from deviceplugin.config import PluginConfig
from sidecar.config import SidecarConfig

CHART = Path(__file__).resolve().parents[2] / "charts" / "dsan-scheduler"
#: PluginConfig fields the chart does not set: node_name comes from the downward API,
#: kubeconfig is the in-cluster config.
NOT_IN_VALUES = {"node_name", "kubeconfig"}


def values() -> dict[str, Any]:
    return dict(yaml.safe_load((CHART / "values.yaml").read_text()))


def test_sidecar_values_are_exactly_the_sidecar_config_with_its_defaults() -> None:
    cfg = values()["sidecar"]["config"]
    assert set(cfg) == {f.name for f in fields(SidecarConfig)}
    # Validated exactly as `dsan serve --config` would, and no default silently forked.
    assert SidecarConfig.from_mapping(cfg) == SidecarConfig()


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
        default = getattr(defaults, key)
        if isinstance(default, (tuple, frozenset)):
            assert sorted(value) == sorted(default), key
        else:
            assert str(value) == str(default) or key == "metrics_addr", key


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
    assert ext["urlPrefix"].endswith(f":{SidecarConfig().http_port}{SidecarConfig().url_prefix}")


def test_the_sidecar_assumes_pods_of_the_scheduler_the_chart_deploys() -> None:
    v = values()
    assert v["sidecar"]["config"]["scheduler_name"] == v["scheduler"]["schedulerName"]
