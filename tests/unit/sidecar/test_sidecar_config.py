from __future__ import annotations

from pathlib import Path

import pytest

from sidecar.cli import add_parser, config_from_args
from sidecar.config import ConfigError, SidecarConfig


def test_defaults_are_valid_and_loopback() -> None:
    cfg = SidecarConfig()
    assert cfg.bind_address == "127.0.0.1"
    assert cfg.policy == "dsan" and cfg.fallback_policy == "fgd"


@pytest.mark.parametrize(
    ("field", "value"),
    [("http_port", 70000), ("grpc_port", -2), ("url_prefix", "dsan"), ("url_prefix", "/x/"),
     ("telemetry_window", 0), ("telemetry_stale_s", 0.0), ("assume_ttl_s", -1.0),
     ("backoff_initial_s", 60.0), ("max_body_bytes", 10), ("log_level", "LOUD"), ("policy", ""),
     ("embed_refresh_s", -1.0), ("torch_threads", 257), ("blas_threads", -1),
     ("blas_threads", 257), ("metrics_port", -2), ("metrics_port", 65536),
     ("metrics_address", ""), ("record_qps", 0.0), ("record_burst", 0), ("record_queue", 0),
     ("decisions_kept", 0), ("explain_background", 0), ("explain_permutations", 0),
     ("explain_cpu_budget_s", 0.0), ("max_grpc_message_bytes", 2**31),
     ("bind_address", "")],
)
def test_bad_values_name_the_field(field: str, value: object) -> None:
    with pytest.raises(ConfigError, match=field):
        SidecarConfig(**{field: value})  # type: ignore[arg-type]


def test_mapping_rejects_unknown_keys_and_wrong_types() -> None:
    with pytest.raises(ConfigError, match=r"unknown keys.*http_prot"):
        SidecarConfig.from_mapping({"http_prot": 1})
    with pytest.raises(ConfigError, match="http_port: expected an integer, got '80'"):
        SidecarConfig.from_mapping({"http_port": "80"})
    with pytest.raises(ConfigError, match="strict_node_names"):
        SidecarConfig.from_mapping({"strict_node_names": 1})
    cfg = SidecarConfig.from_mapping({"telemetry_stale_s": 5, "kubeconfig": "/k"})
    assert cfg.telemetry_stale_s == 5.0 and isinstance(cfg.telemetry_stale_s, float)


def test_flags_override_yaml_which_overrides_defaults(tmp_path: Path) -> None:
    import argparse

    path = tmp_path / "sidecar.yaml"
    path.write_text("http_port: 9000\ngrpc_port: 9001\npolicy: tetris\n")
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = parser.parse_args(["serve", "--config", str(path), "--grpc-port", "9100",
                              "--strict-node-names", "true"])
    cfg = config_from_args(args)
    assert (cfg.http_port, cfg.grpc_port, cfg.policy) == (9000, 9100, "tetris")
    assert cfg.strict_node_names is True
    assert cfg.telemetry_window == SidecarConfig().telemetry_window


def test_unreadable_yaml_is_a_config_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("http_port: [unclosed\n")
    with pytest.raises(ConfigError, match="cannot read"):
        SidecarConfig.from_yaml(bad)
    with pytest.raises(ConfigError, match="expected a mapping"):
        SidecarConfig.from_mapping([1, 2])  # type: ignore[arg-type]


def test_unloadable_dsan_falls_back_and_unknown_policies_are_config_errors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dsan.policies import registry
    from sidecar.app import load_policies

    real = registry.make_scorer
    seen: dict[str, object] = {}

    def fake(name: str, **kw: object) -> object:
        if name == "dsan":  # no model exported
            seen.update(kw)
            raise FileNotFoundError("no DSAN model")
        return real(name)

    monkeypatch.setattr(registry, "make_scorer", fake)
    scorer, fallback, info = load_policies(SidecarConfig(model_dir="/m", embed_refresh_s=2.5))
    assert seen == {"model_dir": "/m", "embed_refresh_s": 2.5, "runtime": "numpy"}
    assert scorer.name == "fgd" and fallback.name == "fgd" and info.name == "fgd"
    with pytest.raises(ConfigError, match="policy"):
        load_policies(SidecarConfig(policy="no-such-policy"))
    with pytest.raises(ConfigError, match="fallback_policy"):
        load_policies(SidecarConfig(fallback_policy="nope"))
    # A fallback that needs a model could fail the same way as the policy it stands in for.
    with pytest.raises(ConfigError, match="fallback_policy: 'dsan' is not one of the policies "
                                          "without a model: k8s-default"):
        load_policies(SidecarConfig(fallback_policy="dsan"))


@pytest.mark.parametrize("content", [None, "", "clusters: [unclosed\n"])
def test_a_kubeconfig_that_cannot_be_loaded_is_one_line_and_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None) -> None:
    from dsan.cli import main

    kubeconfig = tmp_path / "kubeconfig"
    if content is not None:
        kubeconfig.write_text(content)
    assert main(["serve", "--kubeconfig", str(kubeconfig)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"dsan serve: cannot load kubeconfig {kubeconfig}: ")
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
