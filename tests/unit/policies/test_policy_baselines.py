"""Each baseline on a small cluster whose expected placement is worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from dsan.core.filtering import allocate, feasible_nodes
from dsan.core.snapshot import ClusterSnapshot, PodSpec, empty_snapshot
from dsan.policies.registry import make_scorer
from dsan.sim.scheduler import schedule_one


def cluster(cpu: list[float], gpus: list[int], mem: float = 256_000.0) -> ClusterSnapshot:
    n = len(cpu)
    return empty_snapshot(
        [f"n{i}" for i in range(n)], cpu, [mem] * n, gpus, [0 if g else -1 for g in gpus], ["G2"]
    )


def pick(name: str, pod: PodSpec, snap: ClusterSnapshot) -> int:
    """The node ``name`` picks, ties to the lowest index (node-name order)."""
    nodes = feasible_nodes(pod, snap)
    scores = make_scorer(name).score(pod, snap, nodes)
    return int(nodes[np.flatnonzero(scores == scores.max())[0]])


SHARE = PodSpec("share", cpu_milli=4000, mem_mib=1000, num_gpu=1, gpu_milli=500)
WHOLE = PodSpec("whole", cpu_milli=4000, mem_mib=1000, num_gpu=1, gpu_milli=1000)
CPU = PodSpec("cpu", cpu_milli=8000, mem_mib=1000)


def test_dotprod_prefers_smaller_dot_product() -> None:
    # n0: 64 cores, 8 GPUs free; n1: 32 cores, 2 GPUs free. Dot with (4000, 500):
    # n0 = 64000*4000/128000^2 + 8000*500/8000^2 = .0156+.0625; n1 = .0078+.0156 -> n1 wins.
    snap = cluster([64_000, 32_000], [8, 2])
    assert pick("dotprod", SHARE, snap) == 1


def test_bestfit_prefers_least_leftover() -> None:
    snap = cluster([64_000, 64_000, 96_000], [8, 2, 2])
    allocate(snap, WHOLE, 2, (0,))  # n2 has 1 GPU left, but much CPU
    # leftover (cpu/128k + gpu/8k)/2:
    # n0 (60000, 7500) .59; n1 (60000, 1500) .33; n2 (88000, 500) .37
    assert pick("bestfit", SHARE, snap) == 1


def test_gpu_packing_shares_a_used_gpu_first() -> None:
    snap = cluster([64_000] * 3, [2, 2, 8])
    allocate(snap, PodSpec("a", 1000, 10, 1, 300), 0, (0,))  # n0: GPU0 has 700 free
    allocate(snap, PodSpec("b", 1000, 10, 1, 1000), 1, (0,))  # n1: used node, GPU1 idle
    # n0 case 1 (share GPU0: 100 - 70//10 = 93); n1 case 2 (49); n2 idle node (33-8 -> 25)
    assert pick("gpu-packing", SHARE, snap) == 0
    assert make_scorer("gpu-packing").score(SHARE, snap, np.arange(3)).tolist() == [93, 49, 25]


def test_gpu_packing_idle_small_node_before_big() -> None:
    snap = cluster([64_000] * 2, [8, 2])
    # both idle: score max(33 - free, free): 8 GPUs -> 25, 2 GPUs -> 31
    assert pick("gpu-packing", WHOLE, snap) == 1


def test_gpu_clustering_groups_same_kind() -> None:
    snap = cluster([64_000] * 3, [8, 8, 8])
    sc = make_scorer("gpu-clustering")
    rng = np.random.default_rng(0)
    rank = np.arange(3)
    # first sharing pod: all idle (band 25) -> lowest name n0
    assert schedule_one(SHARE, snap, sc, rng, rank)[0] == 0
    # whole-GPU pod: n0 has another kind (band 0..25), n1/n2 idle (25..50) -> n1
    assert schedule_one(WHOLE, snap, sc, rng, rank)[0] == 1
    # next sharing pod joins n0 (only the same kind: 75..100)
    assert schedule_one(SHARE, snap, sc, rng, rank)[0] == 0
    assert sc.score(CPU, snap, np.arange(3)).tolist() == [0, 0, 0]


def test_random_is_seeded_and_uniform() -> None:
    snap = cluster([64_000] * 4, [8] * 4)
    nodes = np.arange(4)
    a = [int(np.argmax(make_scorer("random", seed=1).score(SHARE, snap, nodes))) for _ in range(3)]
    b = [int(np.argmax(make_scorer("random", seed=1).score(SHARE, snap, nodes))) for _ in range(3)]
    assert a == b
    sc = make_scorer("random", seed=3)
    hits = np.bincount(
        [int(np.argmax(sc.score(SHARE, snap, nodes))) for _ in range(400)], minlength=4
    )
    assert hits.min() > 60  # each of 4 nodes near 100 of 400


def test_k8s_default_spreads_to_least_allocated() -> None:
    snap = cluster([64_000] * 2, [2, 2])
    allocate(snap, CPU, 0, ())
    # LeastAllocated: n0 has 8 cores used -> lower; balanced equal-ish -> n1 wins
    assert pick("k8s-default", SHARE, snap) == 1


def test_k8s_default_integer_scores() -> None:
    snap = cluster([10_000], [0], mem=10_000)
    pod = PodSpec("p", cpu_milli=5000, mem_mib=2500)
    # fit: cpu (10000-5000)*100//10000 = 50, mem (10000-2500)*100//10000 = 75 -> 62
    # balanced: f = (.5, .25) -> std .125 -> int(87.5) = 87
    assert make_scorer("k8s-default").score(pod, snap, np.array([0])).tolist() == [62 + 87]


def test_tetris_alignment_prefers_node_with_free_resource() -> None:
    snap = cluster([64_000, 64_000], [8, 8])
    allocate(snap, PodSpec("x", 1000, 10, 4, 1000), 0, (0, 1, 2, 3))
    # same CPU/mem, n1 has all 8 GPUs free -> larger GPU alignment term
    assert pick("tetris", WHOLE, snap) == 1


@pytest.mark.parametrize("name", ["dotprod", "bestfit", "gpu-packing", "k8s-default", "tetris"])
def test_best_fit_gpu_choice(name: str) -> None:
    snap = cluster([64_000], [4])
    allocate(snap, PodSpec("a", 10, 10, 1, 200), 0, (1,))  # GPU1 800 free
    allocate(snap, PodSpec("b", 10, 10, 1, 400), 0, (2,))  # GPU2 600 free
    assert make_scorer(name).select_gpus(SHARE, snap, 0) == (2,)
