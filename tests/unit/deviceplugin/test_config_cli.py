"""Config validation names the field; the CLI maps flags onto the config one to one."""

from __future__ import annotations

import argparse
import dataclasses
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
     ({"recovery_quiet_s": -1}, "recovery_quiet_s"), ({"mode": "both"}, "mode"),
     ({"max_watch_streams": 0}, "max_watch_streams"),
     ({"pod_resources_socket": Path("/" + "p" * 120)}, "pod_resources_socket"),
     ({"pod_resources_interval_s": 0}, "pod_resources_interval_s")],
)
def test_bad_config_names_the_field(kw: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        PluginConfig(**{"node_name": "n", **kw}).validate()  # type: ignore[arg-type]


def test_defaults_are_valid_and_follow_kubelet_conventions() -> None:
    c = PluginConfig(node_name="n").validate()
    assert str(c.kubelet_socket_path) == "/var/lib/kubelet/device-plugins/kubelet.sock"
    assert c.resource_name == "nvidia.com/gpu" and c.sample_interval_s == 1.0
    assert 13 in c.ignored_xids and 79 not in c.ignored_xids
    # Beside NVIDIA's plugin by default: no kubelet registration, attribution on.
    assert c.mode == "telemetry" and c.pod_attribution
    assert str(c.pod_resources_socket) == "/var/lib/kubelet/pod-resources/kubelet.sock"


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


def _write(tmp_path: Path, text: str) -> str:
    f = tmp_path / "dp.yaml"
    f.write_text(text)
    return str(f)


def test_config_file_sets_every_field_and_flags_override_it(tmp_path: Path) -> None:
    path = _write(tmp_path, """
node_name: from-file
plugin_dir: /tmp/dp
register_backoff_max_s: 7
socket_check_s: 0.25
health_poll_s: 1.5
crd_backoff_max_s: 90
allocate_modes: [envvar, cdi]
ignored_xids: [13, 79]
health_enabled: false
crd_enabled: false
fake_gpus: 2
kubeconfig: /etc/kube.conf
""")
    c = config_from_args(_parse("--config", path))
    assert (c.node_name, c.plugin_dir, c.fake_gpus) == ("from-file", Path("/tmp/dp"), 2)
    assert (c.register_backoff_max_s, c.socket_check_s, c.health_poll_s,
            c.crd_backoff_max_s) == (7.0, 0.25, 1.5, 90.0)
    assert isinstance(c.register_backoff_max_s, float)
    assert c.allocate_modes == ("envvar", "cdi") and c.ignored_xids == frozenset({13, 79})
    assert not c.health_enabled and not c.crd_enabled and c.kubeconfig == "/etc/kube.conf"
    # Flags on the command line win over the file, both ways for booleans; the rest stays.
    o = config_from_args(_parse("--config", path, "--node-name", "flag", "--health-poll", "3",
                                "--crd-backoff-max", "5", "--health", "--fake-gpus", "6"))
    assert (o.node_name, o.health_poll_s, o.crd_backoff_max_s) == ("flag", 3.0, 5.0)
    assert o.health_enabled and o.fake_gpus == 6 and not o.crd_enabled
    assert o.register_backoff_max_s == 7.0 and o.plugin_dir == Path("/tmp/dp")


def test_every_field_has_a_flag_that_reaches_the_config() -> None:
    c = config_from_args(_parse(
        "--node-name", "n", "--resource-name", "x.io/gpu", "--plugin-dir", "/tmp/p",
        "--kubelet-socket", "k.sock", "--endpoint", "e.sock", "--register-backoff-max", "3",
        "--socket-check", "2", "--pre-start-required", "--allocate", "cdi",
        "--cdi-kind", "x.io/gpu", "--backend", "fake", "--fail-on-init-error",
        "--fake-gpus", "3", "--fake-model", "M", "--fake-topology", "nvswitch", "--no-health",
        "--ignored-xids", "1", "--recovery-quiet", "4", "--health-poll", "0.5",
        "--sample-interval", "2", "--window", "20", "--horizon", "40", "--metrics-addr", "::1",
        "--metrics-port", "0", "--no-crd", "--crd-interval", "6", "--crd-backoff-max", "8",
        "--kubeconfig", "/k", "--mode", "device-plugin", "--max-watch-streams", "2",
        "--no-pod-attribution", "--pod-resources-socket", "/tmp/pr.sock",
        "--pod-resources-interval", "9"))
    defaults = PluginConfig(node_name="-")
    same = [f.name for f in dataclasses.fields(PluginConfig)
            if getattr(c, f.name) == getattr(defaults, f.name)]
    assert same == [], f"fields no flag changed: {same}"


def test_no_config_and_no_flags_gives_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "env-node")
    assert config_from_args(_parse()) == PluginConfig(node_name="env-node")


@pytest.mark.parametrize(
    ("text", "match"),
    [("health_pol_s: 1\n", r"unknown keys \['health_pol_s'\]"),
     ("health_poll_s: fast\n", "health_poll_s: expected a number, got 'fast'"),
     ("fake_gpus: 2.5\n", "fake_gpus: expected an integer, got 2.5"),
     ("crd_enabled: 'no'\n", "crd_enabled: expected true or false, got 'no'"),
     ("ignored_xids: 13\n", "ignored_xids: expected a list, got 13"),
     ("ignored_xids: [13, x]\n", r"ignored_xids\[1\]: expected an integer, got 'x'"),
     ("allocate_modes: envvar\n", "allocate_modes: expected a list, got 'envvar'"),
     ("plugin_dir: ''\n", "plugin_dir: expected a non-empty path"),
     ("socket_check_s: 0\n", "socket_check_s: 0.0 must be > 0"),
     ("register_backoff_max_s: -1\n", "register_backoff_max_s: -1.0 must be > 0"),
     ("- a list\n", "expected a mapping"),
     ("a: [unclosed\n", "cannot read")],
)
def test_bad_config_file_is_rejected_naming_the_key(
    tmp_path: Path, text: str, match: str
) -> None:
    with pytest.raises(ConfigError, match=match):
        config_from_args(_parse("--node-name", "n", "--config", _write(tmp_path, text)))


def test_missing_config_file_and_bad_file_exit_2(tmp_path: Path) -> None:
    from deviceplugin.__main__ import main

    with pytest.raises(ConfigError, match="cannot read"):
        config_from_args(_parse("--config", str(tmp_path / "nope.yaml")))
    assert main(["--config", _write(tmp_path, "crd_backof_max_s: 1\n")]) == 2


def test_an_unknown_log_level_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    from deviceplugin.__main__ import main

    # logging.basicConfig raised ValueError: a traceback and exit 1
    with pytest.raises(SystemExit) as exc:
        main(["--backend", "fake", "--no-crd", "--log-level", "bogus", "--run-for", "0"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "argument --log-level: unknown level 'bogus'" in err and "Traceback" not in err
