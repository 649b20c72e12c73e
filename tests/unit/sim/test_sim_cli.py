"""`dsan sim openb` end to end on a small slice: JSON run, matrix outputs, bad input."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from dsan.cli import main
from dsan.sim import paths


@pytest.fixture(scope="module")
def slice_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    try:
        nodes = paths.openb_csv(paths.DEFAULT_NODES)
        pods = paths.openb_csv(paths.DEFAULT_PODS)
    except paths.TracesNotFound:
        pytest.skip("openb traces not available")
    tmp = tmp_path_factory.mktemp("cli")
    out = []
    for src, rows in ((nodes, 40), (pods, 300)):
        dst = tmp / src.name
        dst.write_text("\n".join(src.read_text().splitlines()[: rows + 1]) + "\n")
        out.append(dst)
    return out[0], out[1]


def test_single_run_json(
    slice_files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    nodes, pods = slice_files
    rc = main(
        [
            "sim",
            "openb",
            "--pods",
            str(pods),
            "--nodes",
            str(nodes),
            "--policy",
            "bestfit",
            "--json",
        ]
    )
    assert rc == 0
    res = json.loads(capsys.readouterr().out)
    assert set(res["frag_amount_pct"]) == {"50", "90", "100"} and set(res["frag_ratio_pct"]) == {
        "50",
        "90",
        "100",
    }
    assert len(res["alloc_gpu_pct_curve"]) == 131 and res["runtime_s"] > 0
    assert 0 <= res["unallocated_gpu_pct_at_100"] <= 100


def test_matrix_writes_csv_and_png(
    slice_files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes, pods = slice_files
    rc = main(
        [
            "sim",
            "openb",
            "--pods",
            str(pods),
            "--nodes",
            str(nodes),
            "--policy",
            "random,fgd",
            "--seeds",
            "1-2",
            "--jobs",
            "1",
            "--out",
            str(tmp_path),
        ]
    )
    assert rc == 0
    text = capsys.readouterr().out
    assert "fig9a_openb_pod_list_default.png" in text and "fgd" in text
    rows = list(csv.reader((tmp_path / "analysis_allo_discrete.csv").open()))
    assert (
        rows[0][:5] == ["workload", "sc_policy", "tune", "seed", "total_gpus"]
        and len(rows[0]) == 136
    )
    assert {r[1] for r in rows[1:]} == {"01-Random", "06-FGD"} and len(rows) == 5
    assert (tmp_path / "fig9a_openb_pod_list_default.png").stat().st_size > 1000


def test_bad_input_is_one_clear_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "pods.csv"
    bad.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,-5,1,0,0\n")
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1000,1,G2\n")
    rc = main(["sim", "openb", "--pods", str(bad), "--nodes", str(nodes), "--json"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("dsan sim openb: error: ") and "line 2, column 'cpu_milli'" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("extra", [[], ["--seeds", "1-2", "--json"]])
def test_a_tune_below_one_is_refused_where_the_100_percent_point_is_read(
        slice_files: tuple[Path, Path], extra: list[str],
        capsys: pytest.CaptureFixture[str]) -> None:
    nodes, pods = slice_files
    argv = ["sim", "openb", "--pods", str(pods), "--nodes", str(nodes), "--tune", "0.6"]
    assert main([*argv, *extra]) == 2
    err = capsys.readouterr().err
    assert "--tune 0.6 never reaches 100 % arrived" in err and "Traceback" not in err
    assert main([*argv, "--json"]) == 0  # one run's curves are still there
    assert json.loads(capsys.readouterr().out)["unallocated_gpu_pct_at_100"] is None


def test_unknown_policy(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "openb", "--policy", "nope"]) == 2
    assert "unknown policy 'nope'" in capsys.readouterr().err


def test_missing_traces_message(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DSAN_TRACES", str(tmp_path / "absent"))
    assert main(["sim", "openb"]) == 2
    assert "DSAN_TRACES" in capsys.readouterr().err


def test_a_directory_given_as_a_trace_is_named_a_directory(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1000,1,G2\n")
    (tmp_path / "traces").mkdir()
    rc = main(["sim", "openb", "--pods", str(tmp_path / "traces"), "--nodes", str(nodes)])
    err = capsys.readouterr().err
    assert rc == 2 and f"{tmp_path / 'traces'}: is a directory" in err
    assert "not found" not in err and "Traceback" not in err


def test_an_unusable_out_folder_fails_before_the_matrix(
        slice_files: tuple[Path, Path], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    nodes, pods = slice_files
    in_the_way = tmp_path / "a-file"
    in_the_way.write_text("")
    rc = main(["sim", "openb", "--pods", str(pods), "--nodes", str(nodes), "--policy", "fgd",
               "--seeds", "1-2", "--jobs", "1", "--out", str(in_the_way / "x")])
    captured = capsys.readouterr()
    assert rc == 2 and captured.out == ""
    assert captured.err.startswith(f"dsan sim openb: error: --out {in_the_way / 'x'}: ")
    assert "Traceback" not in captured.err
