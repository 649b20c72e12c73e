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


def _many(n: int = 3000) -> list[str]:
    return [f"p{i},4000,1024,0,0\n" for i in range(n)]


def test_undecodable_bytes_are_reported_on_their_own_line(tmp_path: Path) -> None:
    """Issue 34, defect 9: the line reported was where the decoder's read buffer ended
    (line 2102 for a bad byte on line 2501)."""
    rows = _many()
    rows[2499] = "p2499,40\xff0,1024,0,0\n"  # line 2501 (the header is line 1)
    path = tmp_path / "pods.csv"
    path.write_bytes(("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + "".join(rows))
                     .encode("latin-1"))
    with pytest.raises(TraceError, match=r"pods\.csv, line 2501: not UTF-8 text: byte 0xff"):
        load_pods(path)


@pytest.mark.parametrize(("index", "line"), [(9, 11), (2998, 3000)])
def test_an_unbalanced_quote_is_reported_where_it_opens(tmp_path: Path, index: int,
                                                        line: int) -> None:
    """Defect 9: the reader ran on to the end of the file and blamed its last line."""
    rows = _many()
    rows[index] = '"' + rows[index]
    path = write(tmp_path, "pods.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
                 + "".join(rows))
    with pytest.raises(TraceError, match=rf"line {line}: unbalanced quote"):
        load_pods(path)


def test_a_quote_closed_on_a_later_line_is_unbalanced_too(tmp_path: Path) -> None:
    text = PODS.replace("p0,4000", '"p0,4000').replace("p1,8000", 'p1",8000')
    with pytest.raises(TraceError, match=r"line 2: unbalanced quote.*line 3"):
        load_pods(write(tmp_path, "pods.csv", text), ["G2", "P100"])


def test_a_utf8_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    """Defect 9: the BOM was read as part of the first column's name ("missing column")."""
    path = tmp_path / "nodes.csv"
    path.write_bytes(b"\xef\xbb\xbf" + NODES.encode())
    assert load_nodes(path).names == ["n0", "n1"]


def test_a_directory_is_reported_as_a_directory(tmp_path: Path) -> None:
    (tmp_path / "pods.csv").mkdir()
    with pytest.raises(TraceError, match="is a directory"):
        load_pods(tmp_path / "pods.csv")
