"""bench/latency_report.py: the budget summary of Go rows measured in interleaved chunks."""

from __future__ import annotations

from typing import Any

from bench.latency_report import chunks_met, summary


def row(p50: float, p99: float, chunks: list[float] | None = None) -> dict[str, Any]:
    nan = float("nan")
    return {"p50": p50, "p99": p99, "rounds": 3000, "server": nan, "settle": nan,
            "settle_p99": nan, "by_next": nan, "skipped": nan, "load": nan, "load0": nan,
            "chunk_p99": chunks or []}


def test_each_chunk_is_judged_against_the_floor_of_its_own_turn() -> None:
    floor = row(200e-6, 400e-6, [400e-6, 300e-6, 500e-6])
    # 1.5x of each turn's floor: 600, 450, 750 us
    assert chunks_met(row(250e-6, 700e-6, [600e-6, 460e-6, 700e-6]), floor, 1.5) == \
        "; 2 of 3 chunks"


def test_grpc_chunks_are_judged_against_one_millisecond() -> None:
    floor = row(200e-6, 400e-6, [400e-6, 400e-6])
    assert chunks_met(row(500e-6, 1.1e-3, [0.9e-3, 1.2e-3]), floor, None) == "; 1 of 2 chunks"


def test_rows_without_chunks_or_with_a_mismatched_floor_say_nothing() -> None:
    floor = row(200e-6, 400e-6, [400e-6, 400e-6])
    assert chunks_met(row(250e-6, 500e-6), floor, 1.5) == ""
    assert chunks_met(row(250e-6, 500e-6, [500e-6]), floor, 1.5) == ""


def test_the_summary_shows_the_chunks_beside_the_pooled_ratio() -> None:
    res = {("http-go", 100, "noop"): row(200e-6, 400e-6, [400e-6, 400e-6]),
           ("http-go", 100, "dsan"): row(260e-6, 560e-6, [500e-6, 700e-6])}
    text = "\n".join(summary(res, ["dsan"]))
    assert "| **HTTP, Go client** | 100 | p99 <= 1.5x | 1.40x (meets); p50 1.30x; " \
        "1 of 2 chunks |" in text


def test_the_one_p_client_row_is_shown_not_judged() -> None:
    res = {("http-go-oneproc", 100, "noop"): row(130e-6, 250e-6, [250e-6]),
           ("http-go-oneproc", 100, "dsan"): row(165e-6, 320e-6, [320e-6])}
    text = "\n".join(summary(res, ["dsan"]))
    assert "| HTTP, Go client with one P (GOMAXPROCS=1) | 100 | p99 <= 1.5x (shown, not " \
        "counted) | 1.28x (meets); p50 1.27x; 1 of 1 chunks |" in text
