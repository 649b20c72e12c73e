"""`dsan sim seed-table1` / `dsan sim burst`: JSON on stdout, PNG written, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsan.cli import main


def test_seed_table1_json_and_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "u.png"
    rc = main(
        [
            "sim",
            "seed-table1",
            "--policies",
            "k8s-default,tetris",
            "--hours",
            "0.2",
            "--seed",
            "4",
            "--json",
            "--png",
            str(png),
        ]
    )
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"k8s-default", "tetris"}
    for row in out.values():
        for key in (
            "utilization_pct",
            "p99_task_latency_s",
            "sla_violation_pct",
            "jct_s",
            "cost",
            "queueing_events",
            "mean_wait_s",
        ):
            assert isinstance(row[key], int | float)
        assert row["seed"] == 4 and row["sim_hours"] == pytest.approx(0.2)
    assert png.stat().st_size > 1000


def test_burst_reports_the_burst(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        [
            "sim",
            "burst",
            "--policies",
            "k8s-default",
            "--hours",
            "2.2",
            "--json",
            "--png",
            str(tmp_path / "b.png"),
        ]
    )
    assert rc == 0
    row = json.loads(capsys.readouterr().out)["k8s-default"]
    assert row["burst"]["jobs"] == 200
    assert "burst" in row["queueing_by_kind"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policies", "k8s-default,nope"], "unknown policy"),
        (["--hours", "0"], "--hours must be > 0"),
        (["--seeds", "5-3"], "empty seed range"),
        (["--scenario", "missing"], "unknown scenario"),
        (["--policies", "k8s-default", "--jobs", "0"], "--jobs must be >= 1"),
        (["--set", "overprovisioning.podz=4"], "unknown keys ['podz']"),
        (["--set", "overprovisioning.pods=4"], "needs scale_up.ready_nodes_first"),
        (["--set", "hours"], "want dotted.key=value"),
        (["--set", "hours.x=1"], "hours is not a section"),
    ],
)
def test_bad_input_is_a_clear_error(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sim", "seed-table1", *args]) == 2
    assert message in capsys.readouterr().err


def test_version_3_is_selected_by_scenario_name(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["sim", "burst", "--scenario", "seed-table1-v3", "--policies", "k8s-default",
               "--seeds", "1,2", "--hours", "2.2", "--json", "--png", str(tmp_path / "b.png")])
    assert rc == 0
    row = json.loads(capsys.readouterr().out)["k8s-default"]
    for key in ("utilization_pct", "alloc_utilization_pct", "p99_besteffort_latency_s",
                "mean_wait_queued_s"):
        assert isinstance(row[key], float) and f"{key}_sd" in row
    for run in row["runs"]:
        assert run["warmup_h"] == pytest.approx(6.0)
        assert run["burst"]["jobs"] == 200 and "reclaim_cost" in run["burst"]
    rc = main(["sim", "seed-table1", "--scenario", "seed-table1-v3", "--set", "warmup_h=99",
               "--hours", "0.1"])
    assert rc == 2
    assert "warmup_h must be within 0..48" in capsys.readouterr().err


@pytest.mark.parametrize("hours", ["nan", "inf"])
def test_a_hours_that_is_not_a_finite_number_is_a_clear_error(
        hours: str, capsys: pytest.CaptureFixture[str]) -> None:
    # nan slipped past `hours <= 0` into the engine (a traceback); inf never ends
    assert main(["sim", "seed-table1", "--policies", "fgd", "--hours", hours]) == 2
    err = capsys.readouterr().err
    assert f"--hours must be a finite number, got {hours}" in err and "Traceback" not in err


def test_an_unusable_png_path_fails_before_the_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    in_the_way = tmp_path / "a-file"
    in_the_way.write_text("")
    rc = main(["sim", "seed-table1", "--policies", "fgd", "--hours", "0.05",
               "--png", str(in_the_way / "u.png")])
    captured = capsys.readouterr()
    assert rc == 2 and captured.out == ""
    assert captured.err.startswith(f"dsan sim seed-table1: --png {in_the_way / 'u.png'}: ")
    assert "Traceback" not in captured.err


def test_a_plot_that_cannot_be_written_keeps_the_results(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a folder where the PNG should go: only savefig finds out, after the runs
    png = tmp_path / "u.png"
    png.mkdir()
    rc = main(["sim", "seed-table1", "--policies", "fgd", "--hours", "0.05", "--json",
               "--png", str(png)])
    captured = capsys.readouterr()
    assert rc == 1
    assert set(json.loads(captured.out)) == {"fgd"}
    assert f"dsan sim seed-table1: cannot write the plot {png}: " in captured.err
