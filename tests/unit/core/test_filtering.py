from __future__ import annotations

import numpy as np
import pytest

from dsan.api.types import TASK_TYPES
from dsan.core.filtering import allocate, feasible, feasible_nodes, release
from dsan.core.snapshot import ClusterSnapshot, PodSpec, empty_snapshot


def snap3():
    return empty_snapshot(
        ["a", "b", "c"], [8000, 8000, 8000], [1000, 1000, 1000], [2, 0, 4], [0, -1, 1], ["G2", "T4"]
    )


def fit(pod: PodSpec, s: ClusterSnapshot) -> list[bool]:
    out: list[bool] = feasible(pod, s).tolist()
    return out


def test_cpu_memory_gpu_model_and_share_fit() -> None:
    s = snap3()
    assert fit(PodSpec("c", 8000, 1000), s) == [True, True, True]
    assert fit(PodSpec("c", 8001, 10), s) == [False, False, False]
    assert fit(PodSpec("c", 10, 1001), s) == [False, False, False]
    assert fit(PodSpec("g", 100, 10, 2, 1000), s) == [True, False, True]
    assert fit(PodSpec("g", 100, 10, 3, 1000), s) == [False, False, True]
    assert fit(PodSpec("m", 100, 10, 1, 500, (1,)), s) == [False, False, True]
    allocate(s, PodSpec("x", 10, 10, 1, 700), 0, (0,))
    allocate(s, PodSpec("y", 10, 10, 1, 700), 0, (1,))
    assert feasible_nodes(PodSpec("s", 10, 10, 1, 300), s).tolist() == [0, 2]
    assert feasible_nodes(PodSpec("s", 10, 10, 1, 301), s).tolist() == [2]
    assert fit(PodSpec("s", 10, 10, 1, 300), s) == [True, False, True]
    assert fit(PodSpec("s", 10, 10, 2, 300), s) == [True, False, True]
    assert fit(PodSpec("s", 10, 10, 1, 301), s) == [False, False, True]


def test_taints_need_tolerations() -> None:
    s = snap3()
    s.taint_mask = np.array([0, 0b10, 0b01], dtype=np.int64)
    assert fit(PodSpec("p", 1, 1), s) == [True, False, False]
    assert fit(PodSpec("p", 1, 1, toleration_mask=0b10), s) == [True, True, False]
    assert fit(PodSpec("p", 1, 1, toleration_mask=0b11), s) == [True, True, True]


def test_allocate_refuses_overcommit_and_release_restores() -> None:
    s = snap3()
    pod = PodSpec("g", 4000, 500, 1, 600)
    allocate(s, pod, 2, (3,))
    assert s.gpu_free[2, 3] == 400 and s.cpu_used[2] == 4000
    with pytest.raises(ValueError, match="GPU 3"):
        allocate(s, pod, 2, (3,))
    with pytest.raises(ValueError, match="CPU over-commit"):
        allocate(s, PodSpec("big", 5000, 1), 2, ())
    release(s, pod, 2, (3,))
    assert s.gpu_free[2, 3] == 1000 and s.cpu_used[2] == 0


def test_allocate_counts_latency_sensitive_pods_per_node() -> None:
    s = snap3()
    s.ls_pods = np.zeros(3, dtype=np.int32)
    web = PodSpec("w", 1000, 100, task_type=TASK_TYPES.index("web"))
    allocate(s, web, 1, ())
    allocate(s, PodSpec("b", 1000, 100, task_type=TASK_TYPES.index("batch")), 1, ())
    assert s.ls_pods.tolist() == [0, 1, 0] and s.copy().ls_pods.tolist() == [0, 1, 0]
    release(s, web, 1, ())
    release(s, web, 1, ())
    assert s.ls_pods.tolist() == [0, 0, 0]  # never below 0
