"""Config validation names the field; the CLI maps flags onto the config one to one."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from deviceplugin.cli import add_parser, config_from_args
from deviceplugin.config import ConfigError, PluginConfig


@pytest.mark.parametrize(
    ("kw", "field"),
    [({"node_name": ""}, "node_name"), ({"resource_name": "gpu"}, "resource_name"),
     ({"backend": "cuda"}, "backend"), ({"allocate_modes": ("env",)}, "allocate_modes"),
     ({"allocate_modes": ()}, "allocate_modes"), ({"sample_interval_s": 0}, "sample_interval_s"),
     ({"window_s": 20, "horizon_s": 10}, "window_s/horizon_s"), ({"metrics_port": 70000},
                                                                  "metrics_port"),
     ({"plugin_dir": Path("/" + "x" * 120)}, "endpoint"), ({"endpoint": "a/b.sock"}, "endpoint"),
     ({"recovery_quiet_s": -1}, "recovery_quiet_s")],
)
def test_bad_config_names_the_field(kw: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        PluginConfig(**{"node_name": "n", **kw}).validate()  # type: ignore[arg-type]


def test_defaults_are_valid_and_follow_kubelet_conventions() -> None:
    c = PluginConfig(node_name="n").validate()
    assert str(c.kubelet_socket_path) == "/var/lib/kubelet/device-plugins/kubelet.sock"
    assert c.resource_name == "nvidia.com/gpu" and c.sample_interval_s == 1.0
    assert 13 in c.ignored_xids and 79 not in c.ignored_xids


def _parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_parser(p.add_subparsers())
    return p.parse_args(["deviceplugin", *argv])


def test_flags_map_onto_config() -> None:
    c = config_from_args(_parse("--node-name", "g1", "--backend", "fake", "--fake-gpus", "4",
                                "--allocate", "envvar,cdi", "--ignored-xids", "13,31",
                                "--recovery-quiet", "5", "--metrics-port", "-1", "--no-crd",
                                "--plugin-dir", "/tmp/x"))
    assert (c.node_name, c.backend, c.fake_gpus) == ("g1", "fake", 4)
    assert c.allocate_modes == ("envvar", "cdi") and c.ignored_xids == frozenset({13, 31})
    assert c.recovery_quiet_s == 5 and c.metrics_port == -1 and not c.crd_enabled
    assert c.plugin_socket_path == Path("/tmp/x/dsan-gpu.sock")


def test_bad_flag_value_is_rejected_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _parse("--ignored-xids", "13,abc")
    assert "Xids" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="allocate_modes"):
        config_from_args(_parse("--node-name", "g", "--allocate", "magic"))


def test_cli_exits_2_on_bad_config() -> None:
    from deviceplugin.__main__ import main

    assert main(["--node-name", "g", "--allocate", "magic", "--no-crd"]) == 2
