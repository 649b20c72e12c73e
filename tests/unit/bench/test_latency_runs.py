"""bench/latency_runs.py: per judged row and policy, "met in k of N" over runs, each ratio
inside its own run."""

from __future__ import annotations

from bench.latency_runs import render


def row(p50: float, p99: float) -> dict[str, float]:
    return {"p50": p50, "p99": p99}


def run(inproc_p99: float, floor_p50: float, gateway_p99: float) -> dict:
    return {
        ("inprocess", 100, "dsan"): row(30e-6, inproc_p99),
        ("inprocess", 100, "floor:lookup+dot"): row(floor_p50, 25e-6),
        ("gateway-go-pinned", 1000, "dsan"): row(400e-6, gateway_p99),
        ("gateway-go-pinned", 1000, "noop"): row(300e-6, 700e-6),
    }


def line(text: str, start: str) -> str:
    return next(x for x in text.splitlines() if x.startswith(start))


def test_counts_each_run_against_its_own_floor_and_the_grpc_millisecond() -> None:
    text = render([run(37.5e-6, 12e-6, 900e-6), run(62.5e-6, 12e-6, 1100e-6)], ["a", "b"])
    assert "Runs, in order: a, b" in text
    assert line(text, "| **in process (caller waits)** | 100 |").endswith(
        "| 1 of 2: 1.50x / 2.50x |")
    assert line(text, "| **gRPC via score-gateway").endswith("| 1 of 2: 900 us / 1,100 us |")


def test_a_ratio_under_budget_against_a_preempted_floor_is_not_counted() -> None:
    # The floor's p99 (25 us) is over 4x its p50 (5 us): 1.50x says nothing.
    text = render([run(37.5e-6, 5e-6, 900e-6), run(37.5e-6, 12e-6, 900e-6)], ["a", "b"])
    assert line(text, "| **in process (caller waits)** | 100 |").endswith(
        "| 1 of 1: 1.50x? / 1.50x |")
