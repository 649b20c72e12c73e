"""Matrix reports: published-table lookup, summary statistics, ordering, seed parsing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dsan.sim.cli import parse_policies, parse_seeds
from dsan.sim.matrix import format_table, load_published, ordering, summary_rows


def fake(wl: str, pol: str, seed: int, unalloc: float) -> dict:  # type: ignore[type-arg]
    return {
        "workload": wl,
        "policy": pol,
        "seed": seed,
        "unallocated_gpu_pct_at_100": unalloc,
        "runtime_s": 1.0,
    }


def test_summary_and_ordering(tmp_path: Path) -> None:
    pub = tmp_path / "pub.csv"
    pub.write_text(
        "workload,sc_policy,metric,arrived_workload_pct,n_seeds,mean,stdev_sample,median,min,max\n"
        "w,06-FGD,unallocated_gpu_pct,100,10,5.0,0.1,5,4,6\n"
        "w,01-Random,unallocated_gpu_pct,100,10,13.0,0.3,13,12,14\n"
        "w,01-Random,unallocated_gpu_pct,90,10,99.0,0.3,13,12,14\n"
    )
    published = load_published(pub)
    assert published == {("w", "06-FGD"): (5.0, 0.1), ("w", "01-Random"): (13.0, 0.3)}
    results = [fake("w", "fgd", s, v) for s, v in ((1, 5.5), (2, 5.1))] + [
        fake("w", "random", 1, 12.0),
        fake("w", "tetris", 1, 9.0),
    ]
    rows = summary_rows(results, published)
    fgd = next(r for r in rows if r["policy"] == "fgd")
    assert fgd["ours_mean"] == pytest.approx(5.3) and fgd["diff_pp"] == pytest.approx(0.3)
    assert fgd["ours_sd"] == pytest.approx(np.std([5.5, 5.1], ddof=1))
    assert next(r for r in rows if r["policy"] == "tetris")["published_mean"] is None
    assert ordering(rows, "w") == (["fgd", "random"], ["fgd", "random"])
    assert "+0.30" in format_table(rows)


def test_seed_and_policy_parsing() -> None:
    assert parse_seeds("42-44,50") == [42, 43, 44, 50]
    with pytest.raises(ValueError, match="empty seed range"):
        parse_seeds("5-3")
    assert "dsan" not in parse_policies("all") and len(parse_policies("all")) == 8
    assert parse_policies("published")[-1] == "fgd"
    with pytest.raises(ValueError, match="unknown policy"):
        parse_policies("fgd,nope")
    assert parse_policies("all,dsan") == [*parse_policies("all"), "dsan"]
    published = [p for p in parse_policies("published") if p != "fgd"]
    assert parse_policies("fgd,published") == ["fgd", *published]
    with pytest.raises(ValueError, match="no policy"):
        parse_policies(" , ")
