"""Bad trace input: a clear error naming file, line and column; never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsan.sim.openb import TraceError, load_nodes, load_pods

NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,P100\nn1,96000,393216,8,G2\n"
PODS = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
    "p0,4000,1024,1,500,\np1,8000,2048,2,1000,G2\n"
)


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_good_files_load(tmp_path: Path) -> None:
    nodes = load_nodes(write(tmp_path, "n.csv", NODES))
    pods = load_pods(write(tmp_path, "p.csv", PODS), nodes.gpu_models)
    assert nodes.gpu_models == ["G2", "P100"]
    assert pods.num_gpu.tolist() == [1, 2] and pods.gpu_spec == [(), ("G2",)]
    assert pods.gpu_request_milli().tolist() == [500, 2000]
    specs = pods.pod_specs(nodes.gpu_models)
    assert specs[1].gpu_models == (0,)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "empty file"),
        ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n", "no data rows"),
        ("name,cpu_milli,num_gpu,gpu_milli\np0,1,1,500\n", "missing column(s) memory_mib"),
        (
            PODS.replace("p0,4000", "p0,-4000"),
            "line 2, column 'cpu_milli': -4000 is below 0 (negative request)",
        ),
        (
            PODS.replace("p1,8000,2048,2,1000,G2", "p1,8000,2048,2"),
            "line 3, column 'gpu_milli': truncated row",
        ),
        (PODS.replace("1,500,", "1,abc,"), "line 2, column 'gpu_milli': 'abc' is not a number"),
        (PODS.replace("1,500,", "1,1500,"), "1500 is above 1000"),
        (PODS.replace("2,1000,G2", "2,500,G2"), "must ask for whole GPUs"),
        (PODS.replace("G2\n", "H100\n"), "line 3, column 'gpu_spec': unknown GPU model 'H100'"),
    ],
)
def test_bad_pod_files(tmp_path: Path, text: str, needle: str) -> None:
    path = write(tmp_path, "pods.csv", text)
    with pytest.raises(TraceError) as err:
        load_pods(path, ["G2", "P100"])
    assert str(path) in str(err.value)
    assert needle in str(err.value)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (NODES.replace("2,P100", "2,"), "line 2, column 'model': node has 2 GPUs but no GPU model"),
        (NODES.replace("8,G2", "9,G2"), "line 3, column 'gpu': 9 is above 8"),
        (NODES + "n0,1,1,0,\n", "duplicate node names"),
        (NODES.replace("64000", "0"), "column 'cpu_milli': 0 is below 1"),
    ],
)
def test_bad_node_files(tmp_path: Path, text: str, needle: str) -> None:
    with pytest.raises(TraceError, match=r"nodes\.csv") as err:
        load_nodes(write(tmp_path, "nodes.csv", text))
    assert needle in str(err.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="file not found"):
        load_nodes(tmp_path / "nope.csv")
