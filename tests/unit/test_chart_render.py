"""``helm template`` of charts/dsan-scheduler for values the schema lets through: what renders
must work, what cannot work is refused at render time with the value named. Uses the helm
binary hack/helm-build.sh builds (a no-op when cached; the e2e tier runs the chart against a
real apiserver, tests/e2e/test_chart.py)."""

from __future__ import annotations

import argparse
import subprocess
from typing import Any

import pytest
import yaml

from deviceplugin.cli import add_parser, config_from_args
from tests.support.helm import CHART, ChartTools, Helm


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm(ChartTools.resolve().helm, tmp_path_factory.mktemp("helm-home"))


def render(helm: Helm, *sets: str) -> subprocess.CompletedProcess[str]:
    """``helm template`` with ``--set`` each, ``--set-string`` for a ``str:`` one."""
    args = [a for s in sets for a in ("--set-string" if s.startswith("str:") else "--set",
                                      s.removeprefix("str:"))]
    return helm.run("template", "r", str(CHART), *args)


def objects(helm: Helm, *sets: str) -> list[dict[str, Any]]:
    out = render(helm, *sets)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def find(objs: list[dict[str, Any]], kind: str, suffix: str = "") -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind and o["metadata"]["name"].endswith(suffix)]


def test_deviceplugin_flags_keep_every_string_value_verbatim(helm: Helm) -> None:
    # "::" (the IPv6 wildcard the agent's metrics server binds) and a "#" are plain YAML's
    # mapping and comment markers: an unquoted flag becomes a mapping or loses its tail.
    plugin_dir = "/var/lib/kubelet/dp #2"
    objs = objects(helm, "str:devicePlugin.config.metrics_addr=::",
                   "str:devicePlugin.config.fake_model=A100 #2: lab",
                   f"str:devicePlugin.config.plugin_dir={plugin_dir}",
                   "devicePlugin.config.mode=device-plugin")
    (ds,) = find(objs, "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    assert {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}["device-plugins"] == \
        plugin_dir
    command = pod["containers"][0]["command"]
    assert all(isinstance(a, str) for a in command), command
    assert command[:2] == ["dsan", "deviceplugin"]
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    cfg = config_from_args(parser.parse_args([*command[1:], "--node-name=n1"]))
    assert (cfg.metrics_addr, cfg.fake_model, str(cfg.plugin_dir)) == (
        "::", "A100 #2: lab", plugin_dir)


@pytest.mark.parametrize(("sets", "message"), [
    # kube-scheduler would call http://127.0.0.1:0/dsan: every pod scored without DSAN.
    (["sidecar.config.http_port=0"],
     "scheduler.scoreVia: extender needs the sidecar's HTTP server on a fixed port"),
    # Two active schedulers of one profile race for the same pods and nodes.
    (["scheduler.leaderElect=false"],
     "scheduler.replicas: 2 needs scheduler.leaderElect"),
])
def test_values_that_cannot_work_are_refused(helm: Helm, sets: list[str],
                                             message: str) -> None:
    out = render(helm, *sets)
    assert out.returncode != 0 and message in out.stderr, out.stderr


def test_what_those_checks_still_render(helm: Helm) -> None:
    # gRPC scoring needs no HTTP port; one replica needs no election.
    for sets in (["scheduler.scoreVia=grpc", "sidecar.config.http_port=0"],
                 ["scheduler.leaderElect=false", "scheduler.replicas=1"]):
        out = render(helm, *sets)
        assert out.returncode == 0, (sets, out.stderr)


def test_leases_are_granted_only_to_a_scheduler_that_elects_a_leader(helm: Helm) -> None:
    def lease_rules(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [r for o in objs if o["kind"] in ("Role", "ClusterRole")
                for r in o["rules"] if "leases" in r["resources"]]

    elected = objects(helm)
    assert lease_rules(elected) and find(elected, "RoleBinding", "-scheduler-lease")
    alone = objects(helm, "scheduler.leaderElect=false", "scheduler.replicas=1")
    assert not lease_rules(alone) and not find(alone, "RoleBinding", "-scheduler-lease")
    (cm,) = find(alone, "ConfigMap", "-config")
    assert yaml.safe_load(cm["data"]["scheduler-config.yaml"])["leaderElection"][
        "leaderElect"] is False

