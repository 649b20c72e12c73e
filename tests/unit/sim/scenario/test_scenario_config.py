"""The versioned scenario config: shipped file loads, bad input names the bad key."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsan.sim.scenario.config import from_dict, load, with_settings
from hack import scenario_calibrate as calibrate


def test_shipped_seed_table1_matches_the_article_cluster() -> None:
    cfg = load("seed-table1")
    groups = cfg.cluster.node_groups
    assert sum(g.count for g in groups) == 200
    assert sum(g.count * g.gpus for g in groups) == 40
    assert cfg.hours == 24


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"cluster": {"racks": 2, "bogus": 1}}, r"cluster: unknown keys \['bogus'\]"),
        ({"hours": "soon"}, "hours: expected a number"),
        ({"version": 9}, "version 9 unsupported"),
        ({"web": {"trough_rho": 0.9, "peak_rho": 0.5}}, "trough_rho <= peak_rho"),
        ({"batch": {"images": [42]}}, "batch.images must be ids"),
        ({"training": {"gpu_count_probs": {"1": 0.5, "16": 0.5}}}, r"duration_quantiles_s\[16\]"),
        ({"cluster": {"node_groups": [{"count": 1}]}},
         r"cluster.node_groups\[0\]: missing keys \['cpu_milli', 'mem_mib', 'hourly_cost'\]"),
        ({"web": {"replicas": [3]}}, r"web.replicas: expected a list of 2, got \[3\]"),
    ],
)
def test_bad_config_names_the_key(data: dict[str, object], message: str) -> None:
    base = {
        "cluster": {
            "node_groups": [{"count": 1, "cpu_milli": 1000, "mem_mib": 1024, "hourly_cost": 1.0}]
        }
    }
    merged = {**base, **data}
    if "cluster" in data:
        merged["cluster"] = {**base["cluster"], **data["cluster"]}  # type: ignore[dict-item]
    if "training" in data:
        merged["training"] = {
            "quantile_points": [0, 100],
            "duration_quantiles_s": {"1": [1, 2]},
            **data["training"],  # type: ignore[dict-item]
        }
    with pytest.raises(ValueError, match=message):
        from_dict(merged)


def test_unknown_scenario_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown scenario 'nope'"):
        load("nope")
    bad = tmp_path / "x.yaml"
    bad.write_text("cluster: [1, 2\n")
    with pytest.raises(ValueError, match="not valid YAML"):
        load(str(bad))


def test_shipped_calibration_matches_the_traces() -> None:
    try:
        from dsan.sim.paths import TracesNotFound, traces_root

        root = traces_root()
    except (ImportError, TracesNotFound):
        pytest.skip("public traces not available")
    cfg = load("seed-table1")
    got = calibrate.philly(root)
    assert got["gpu_count_probs"] == pytest.approx(cfg.training.gpu_count_probs, abs=1e-5)
    for k, q in got["duration_quantiles_s"].items():  # type: ignore[attr-defined]
        assert q == pytest.approx(cfg.training.duration_quantiles_s[k], abs=0.1)
    ob = calibrate.openb(root)
    assert ob["worker_cpu_milli_per_gpu"] == cfg.training.worker_cpu_milli
    assert ob["worker_mem_mib_per_gpu"] == cfg.training.worker_mem_mib


def test_settings_override_the_file_by_dotted_key() -> None:
    cfg = load("seed-table1", ["scale_up.ready_nodes_first=true", "overprovisioning.pods=32",
                               "batch.executors=[8, 16]", "hours=2.5"])
    assert cfg.scale_up.ready_nodes_first is True and cfg.overprovisioning.pods == 32
    assert cfg.batch.executors == (8, 16) and cfg.hours == 2.5
    assert cfg.training == load("seed-table1").training  # the rest is the file's
    data = {"batch": {"jobs_per_h": 1.0}}
    assert with_settings(data, ["batch.jobs_per_h=2"]) == {"batch": {"jobs_per_h": 2}}
    assert data == {"batch": {"jobs_per_h": 1.0}}  # the input is not changed


def test_a_bad_setting_is_named() -> None:
    with pytest.raises(ValueError, match=r"with --set hours=-1: hours must be > 0"):
        load("seed-table1", ["hours=-1"])
    with pytest.raises(ValueError, match="value is not YAML"):
        load("seed-table1", ["hours=[1"])


def test_scenario_files_name_a_directory_a_bad_byte_s_line_and_accept_a_bom(
        tmp_path: Path) -> None:
    """Issue 34, defect 9, for scenario files."""
    (tmp_path / "dir.yaml").mkdir()
    with pytest.raises(ValueError, match=r"dir\.yaml: is a directory"):
        load(str(tmp_path / "dir.yaml"))
    shipped = (Path(__file__).resolve().parents[4] / "dsan" / "scenarios"
               / "seed-table1.yaml").read_bytes()
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(shipped.replace(b"\n", b"\n# caf\xe9\n", 1))  # a Latin-1 comment, line 2
    with pytest.raises(ValueError, match=r"bad\.yaml, line 2: not UTF-8 text: byte 0xe9"):
        load(str(bad))
    bom = tmp_path / "bom.yaml"
    bom.write_bytes(b"\xef\xbb\xbf" + shipped)
    assert load(str(bom)) == load("seed-table1")
