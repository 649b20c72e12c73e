"""The charge and release of one pod on a node-table row (sidecar.allocations): GPUs by best
fit, clamps, and what an over-committed row does."""

from __future__ import annotations

import numpy as np

from sidecar.allocations import charge_row, uncharge_row
from sidecar.nodetable import Columns

N, W = 5, 8


def _cols(cpu: float = 0.0, mem: float = 0.0, pods: int = 0, count: int = 8,
          free: list[int] | None = None) -> Columns:
    g = np.zeros((N, W), dtype=np.int32)
    g[1, :len(free or [])] = free or []
    return (np.full(N, cpu), np.full(N, mem), np.full(N, pods, dtype=np.int32),
            np.zeros(N, dtype=np.int32), np.full(N, count, dtype=np.int32), g)


def test_best_fit_takes_the_fullest_gpus_that_fit() -> None:
    cols = _cols(cpu=100.0, mem=10.0, pods=2, count=4, free=[1000, 250, 500, 500])
    assert charge_row(cols, 1, 500, 1024, 2, 500) == (2, 3)
    assert cols[0][1] == 600.0 and cols[1][1] == 1034.0 and cols[2][1] == 3
    assert cols[5][1].tolist() == [1000, 250, 0, 0, 0, 0, 0, 0]
    # a share: the fullest that fits (250 free fits 250 exactly)
    assert charge_row(cols, 1, 0, 0, 1, 250) == (1,)
    assert cols[5][1, 1] == 0


def test_too_few_gpus_that_fit_take_the_freest() -> None:
    cols = _cols(count=3, free=[250, 750, 500])
    assert charge_row(cols, 1, 0, 0, 2, 1000) == (1, 2)
    assert cols[5][1, :3].tolist() == [250, 0, 0]  # never below 0


def test_cpu_only_pods_take_no_gpu() -> None:
    cols = _cols(count=2, free=[1000, 1000])
    assert charge_row(cols, 1, 250, 512, 0, 0) == ()
    assert cols[5][1, :2].tolist() == [1000, 1000] and cols[2][1] == 1


def test_uncharge_clamps_and_skips_slots_past_the_gpu_count() -> None:
    cols = _cols(cpu=100.0, mem=10.0, pods=0, count=2, free=[900, 0, 0])
    uncharge_row(cols, 1, 500, 1024, 250, (0, 1, 2))
    assert cols[0][1] == 0.0 and cols[1][1] == 0.0 and cols[2][1] == 0
    assert cols[5][1, :3].tolist() == [1000, 250, 0]  # at most 1000; slot 2 is past count


def test_latency_sensitive_pods_are_counted_apart() -> None:
    cols = _cols(count=0)
    charge_row(cols, 1, 2000, 4096, 0, 0, ls=True)
    charge_row(cols, 1, 4000, 8192, 0, 0)
    assert cols[2][1] == 2 and cols[3][1] == 1
    uncharge_row(cols, 1, 4000, 8192, 0, ())
    assert cols[3][1] == 1
    uncharge_row(cols, 1, 2000, 4096, 0, (), ls=True)
    uncharge_row(cols, 1, 2000, 4096, 0, (), ls=True)
    assert cols[2][1] == 0 and cols[3][1] == 0  # never below 0
