from __future__ import annotations

import pytest

from dsan.api import types as t


@pytest.mark.parametrize(
    ("raw", "want"),
    [(None, ()), ("", ()), ("V100M16", ("V100M16",)), ("T4| P100 |T4", ("P100", "T4")), ("|", ())],
)
def test_parse_gpu_models(raw: str | None, want: tuple[str, ...]) -> None:
    assert t.parse_gpu_models(raw) == want


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        (None, None), ("500", 500), ("1000", 1000),
        ("0", None), ("1001", None), ("-3", None), ("x", None),
    ],
)
def test_parse_gpu_milli(raw: str | None, want: int | None) -> None:
    assert t.parse_gpu_milli(raw) == want


def test_parse_task_type_defaults_to_other() -> None:
    assert t.parse_task_type("train") == "train"
    assert t.parse_task_type("TRAIN") == "other"
    assert t.parse_task_type(None) == "other"


@pytest.mark.parametrize(("raw", "want"), [("2.5", 2.5), ("nan", None), ("-1", None), ("x", None)])
def test_parse_float_label(raw: str, want: float | None) -> None:
    assert t.parse_float_label(raw) == want


def test_topology_from_labels() -> None:
    topo = t.Topology.from_labels({t.LABEL_ZONE: "z1", t.LABEL_RACK: "r7", "other": "x"})
    assert topo == t.Topology(zone="z1", rack="r7", nvlink_domain=None)
    assert t.Topology.from_labels(None) == t.Topology()


@pytest.mark.parametrize(("label", "want"), [
    ("dsan@dsan-1-17+abc", t.ScoredBy("dsan", "dsan-1-17+abc")), ("fgd", t.ScoredBy("fgd")),
])
def test_scored_by_reads_and_writes_the_policy_label(label: str, want: t.ScoredBy) -> None:
    assert t.ScoredBy.of(label) == want
    assert str(want) == label  # the written form is the label
    assert str(t.ScoredBy("")) == t.NOT_SCORED


@pytest.mark.parametrize(("raw", "want"), [("true", True), ("True", True), ("false", False),
                                           ("1", False), ("", False), (None, False)])
def test_parse_elastic_only_true_is_elastic(raw: str | None, want: bool) -> None:
    assert t.parse_elastic(raw) is want


@pytest.mark.parametrize(("raw", "want"), [("600", 600.0), ("0", 0.0), ("1.5", 1.5),
                                           ("inf", None), ("nan", None), ("-1", None),
                                           ("ten", None), ("1" * 40, None), (None, None)])
def test_parse_lost_seconds(raw: str | None, want: float | None) -> None:
    assert t.parse_lost_seconds(raw) == want


@pytest.mark.parametrize(("raw", "want"), [("4", 4), ("0", 0), ("1000000", 1_000_000),
                                           ("1000001", None), ("-1", None), ("+3", None),
                                           ("3.0", None), ("٣", None), ("", None), (None, None)])
def test_parse_member_count(raw: str | None, want: int | None) -> None:
    assert t.parse_member_count(raw) == want


@pytest.mark.parametrize(("raw", "want"), [("spark-driver", "spark-driver"), ("a.b-1", "a.b-1"),
                                           ("Driver", None), ("-x", None), ("x-", None),
                                           ("a/b", None), ("a" * 254, None), ("", None),
                                           (None, None)])
def test_parse_workload_owner_takes_only_a_pod_name(raw: str | None, want: str | None) -> None:
    assert t.parse_workload_owner(raw) == want
