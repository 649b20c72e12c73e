"""``dsan explain`` end to end on a slice of the openb CSVs, and its errors on bad input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dsan.cli import main
from dsan.sim import paths


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> tuple[Path, Path]:
    try:
        nodes_csv = paths.openb_csv(paths.DEFAULT_NODES)
        pods_csv = paths.openb_csv(paths.DEFAULT_PODS)
    except paths.TracesNotFound as exc:
        pytest.skip(str(exc))
    out = tmp_path_factory.mktemp("openb-slice")
    node_lines = nodes_csv.read_text().splitlines()
    pod_lines = pods_csv.read_text().splitlines()
    (out / "nodes.csv").write_text("\n".join([node_lines[0], *node_lines[1::30]]) + "\n")
    (out / "pods.csv").write_text("\n".join(pod_lines[:301]) + "\n")
    return out / "nodes.csv", out / "pods.csv"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    import torch

    from dsan.model.export import save
    from dsan.model.net import DSANNet, ModelConfig

    torch.manual_seed(0)
    return save(
        DSANNet(ModelConfig(hidden=8)),
        tmp_path_factory.mktemp("model"),
        "test-random",
        exports=False,
    )


def _run(traces, tmp_path, *extra: str) -> list[str]:
    nodes, pods = traces
    return [
        "explain",
        "openb",
        "--nodes",
        str(nodes),
        "--pods",
        str(pods),
        "--out",
        str(tmp_path),
        *extra,
    ]


@pytest.mark.parametrize("policy", ["fgd", "k8s-default", "dsan"])
def test_end_to_end_writes_markdown_and_png(traces, model_dir, tmp_path, capsys, policy) -> None:
    args = _run(
        traces,
        tmp_path,
        "--policy",
        policy,
        "--decision",
        "25",
        "--model-dir",
        str(model_dir),
        "--background",
        "8",
        "--permutations",
        "2",
    )
    assert main(args) == 0
    md = Path(capsys.readouterr().out.strip())
    assert md == tmp_path / f"openb-pods-{policy}-seed42-decision25.md"
    text = md.read_text()
    assert "## Additivity check: PASS" in text and f"({policy}, decision 25)" in text
    assert ("SHAP" in text) == (policy == "dsan")
    assert md.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_replay_follows_the_protocol(traces) -> None:
    from dsan.core.filtering import allocate
    from dsan.explain.decision import replay_openb
    from dsan.sim.protocol import OpenbConfig

    nodes, pods = traces
    cfg = OpenbConfig(pods=pods, nodes=nodes, policy="fgd")
    a, b = replay_openb(cfg, 10), replay_openb(cfg, 11)
    assert a.index == 10 and a.pod.name != b.pod.name
    # binding decision 10's winner gives exactly the cluster decision 11 sees
    allocate(a.snap, a.pod, a.chosen_node, a.scorer.select_gpus(a.pod, a.snap, a.chosen_node))
    np.testing.assert_array_equal(a.snap.cpu_used, b.snap.cpu_used)
    np.testing.assert_array_equal(a.snap.gpu_free, b.snap.gpu_free)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--policy", "fgd", "--decision", "100000"), "out of range"),
        (("--policy", "fgd", "--decision", "-1"), "--decision must be >= 0"),
        (("--policy", "nope", "--decision", "3"), "cannot explain policy 'nope'"),
        (
            ("--policy", "tetris", "--decision", "3"),
            "explainable policies are dsan, k8s-default, fgd",
        ),
        (("--policy", "fgd", "--decision", "3", "--top-k", "0"), "--top-k"),
    ],
)
def test_bad_input_is_a_clear_error(traces, tmp_path, capsys, extra, message) -> None:
    assert main(_run(traces, tmp_path, *extra)) == 2
    err = capsys.readouterr().err
    assert err.startswith("dsan explain openb: error:") and message in err


def test_missing_model_and_missing_csv(traces, tmp_path, capsys) -> None:
    args = _run(
        traces,
        tmp_path,
        "--policy",
        "dsan",
        "--decision",
        "3",
        "--model-dir",
        str(tmp_path / "none"),
    )
    assert main(args) == 2
    assert "no DSAN model" in capsys.readouterr().err
    assert (
        main(
            [
                "explain",
                "openb",
                "--pods",
                str(tmp_path / "x.csv"),
                "--policy",
                "fgd",
                "--decision",
                "1",
            ]
        )
        == 2
    )
    assert "pod CSV not found" in capsys.readouterr().err


def test_seed_scenario_end_to_end(tmp_path, capsys) -> None:
    args = [
        "explain",
        "seed-table1",
        "--policy",
        "k8s-default",
        "--seed",
        "1",
        "--hours",
        "0.5",
        "--decision",
        "40",
        "--out",
        str(tmp_path),
    ]
    assert main(args) == 0
    md = Path(capsys.readouterr().out.strip())
    assert md.name == "seed-table1-k8s-default-seed1-decision40.md"
    assert "## Additivity check: PASS" in md.read_text()
    assert main([*args[:-4], "--decision", "10000000", "--out", str(tmp_path)]) == 2
    assert "out of range" in capsys.readouterr().err


@pytest.mark.parametrize("where", ["file", "under-a-file"])
def test_an_unusable_out_folder_is_a_clear_error_before_the_replay(
        traces, tmp_path, capsys, monkeypatch, where) -> None:
    import dsan.explain.cli as explain_cli

    in_the_way = tmp_path / "a-file"
    in_the_way.write_text("")
    out = in_the_way if where == "file" else in_the_way / "x"

    def no_replay(*_a, **_k):
        raise AssertionError("replayed before checking --out")

    monkeypatch.setattr(explain_cli, "replay_openb", no_replay)
    args = _run(traces, tmp_path, "--policy", "fgd", "--decision", "3")
    assert main([*args, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"dsan explain openb: error: --out {out}: ") and "Traceback" not in err


@pytest.mark.parametrize("hours", ["0", "-1", "nan", "inf"])
def test_seed_scenario_hours_must_be_a_positive_finite_number(tmp_path, capsys, hours) -> None:
    args = ["explain", "seed-table1", "--policy", "fgd", "--hours", hours, "--decision", "3",
            "--out", str(tmp_path)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("dsan explain seed-table1: error: --hours must be") and hours in err
