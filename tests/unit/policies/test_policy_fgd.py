"""Fragmentation and FGD on hand-computed cases; the per-shape cache equals a fresh scorer."""

from __future__ import annotations

from collections import Counter

import numpy as np

from dsan.core.filtering import allocate, feasible_nodes
from dsan.core.snapshot import ClusterSnapshot, PodSpec, empty_snapshot
from dsan.features.frag import FragTracker, node_frag
from dsan.features.target import TargetWorkload
from dsan.policies.fgd import FGDScorer
from dsan.sim.scheduler import schedule_one

# Half the tasks want 500 milli of one GPU, half a whole GPU.
TW = TargetWorkload.from_shapes([(1000, 500, 1, ()), (1000, 1000, 1, ())], [1, 1])


def snap_with(free: list[list[int]], cpu_free: float = 32_000) -> ClusterSnapshot:
    n = len(free)
    s = empty_snapshot(
        [f"n{i}" for i in range(n)],
        [32_000] * n,
        [1e6] * n,
        [len(f) for f in free],
        [0] * n,
        ["G2"],
    )
    for i, f in enumerate(free):
        s.gpu_free[i, : len(f)] = f
    s.cpu_used[:] = 32_000 - cpu_free
    return s


def test_node_frag_by_hand() -> None:
    s = snap_with([[1000, 300], [600, 600]])
    access = TW.access(s)
    # n0: 500-shape fits GPU0, GPU1 (300) is fragment -> 300; 1000-shape: GPU1 frag -> 300
    # n1: 500-shape: nothing too small -> 0; 1000-shape cannot be hosted -> all 1200
    got = node_frag(s.cpu_cap - s.cpu_used, s.gpu_free, access, TW)
    assert got.tolist() == [300.0, 600.0]


def test_node_frag_lack_of_cpu_makes_all_idle_fragment() -> None:
    s = snap_with([[1000, 1000]], cpu_free=500)
    assert node_frag(s.cpu_cap - s.cpu_used, s.gpu_free, TW.access(s), TW).tolist() == [2000.0]


def test_model_constraint_in_target() -> None:
    tw = TargetWorkload.from_shapes([(0, 500, 1, ("T4",))], [1])
    s = snap_with([[1000]])  # model G2
    assert node_frag(s.cpu_cap - s.cpu_used, s.gpu_free, tw.access(s), tw).tolist() == [1000.0]


def test_fgd_picks_gpu_that_keeps_whole_gpus() -> None:
    # n0: GPUs (1000, 500). Before: the 1000-shape finds GPU1 too small -> .5 * 500 = 250.
    # Pod (500) on GPU1 -> (1000, 0): nothing idle is too small -> 0, delta +250 -> 56.
    # On GPU0 -> (500, 500): 1000-shape cannot be hosted -> .5 * 1000, delta -250 -> 43.
    s = snap_with([[1000, 500]])
    pod = PodSpec("p", 1000, 10, 1, 500)
    sc = FGDScorer(TW)
    assert sc.score(pod, s, np.array([0])).tolist() == [56.0]
    assert sc.select_gpus(pod, s, 0) == (1,)


def test_fgd_prefers_node_where_fragment_drops() -> None:
    # n0 (1000, 500): as above, 56. n1 (1000, 1000): before 0; after on either GPU
    # (500, 1000): the 1000-shape sees 500 too small -> .5 * 500 = 250 -> sigmoid(-.25) -> 43.
    s = snap_with([[1000, 500], [1000, 1000]])
    pod = PodSpec("p", 1000, 10, 1, 500)
    assert FGDScorer(TW).score(pod, s, np.array([0, 1])).tolist() == [56.0, 43.0]


def test_cached_scores_equal_fresh_scores() -> None:
    rng = np.random.default_rng(7)
    s = empty_snapshot(
        [f"n{i}" for i in range(30)],
        [32_000] * 30,
        [1e6] * 30,
        rng.choice([2, 4, 8], 30),
        [0] * 30,
        ["G2"],
    )
    shapes = [(1000, 500, 1), (2000, 300, 1), (1000, 1000, 1), (4000, 1000, 2), (3000, 0, 0)]
    pods = [
        PodSpec(
            f"p{i}",
            *shapes[i % len(shapes)][:1],
            mem_mib=10,
            num_gpu=shapes[i % 5][2],
            gpu_milli=shapes[i % 5][1],
        )
        for i in range(120)
    ]
    tw = TargetWorkload.from_pods(pods)
    cached = FGDScorer(tw)
    for pod in pods:
        nodes = feasible_nodes(pod, s)
        if nodes.size > 1:
            assert np.array_equal(cached.score(pod, s, nodes), FGDScorer(tw).score(pod, s, nodes))
        schedule_one(pod, s, cached, rng)


def test_tracker_matches_full_recompute() -> None:
    s = snap_with([[1000, 1000], [1000, 1000, 1000, 1000]])
    tr = FragTracker(s, TW)
    allocate(s, PodSpec("p", 1000, 10, 1, 700), 1, (2,))
    tr.refresh(s, [1])
    full = node_frag(s.cpu_cap - s.cpu_used, s.gpu_free, TW.access(s), TW)
    assert np.array_equal(tr.frag, full)
    assert tr.amount() == float(full.sum()) > 0


def test_target_from_pods_covers_95_percent() -> None:
    pods = [PodSpec(f"a{i}", 1000, 1, 1, 500) for i in range(90)]
    pods += [PodSpec(f"b{i}", 2000, 1, 1, 1000) for i in range(6)]
    pods += [PodSpec(f"c{i}", 3000, 1) for i in range(4)]
    tw = TargetWorkload.from_pods(pods)
    # 90 < 95 -> add the 6-task shape (96 >= 95) -> stop; renormalised over 96
    assert len(tw) == 2
    assert np.allclose(tw.freq, [90 / 96, 6 / 96])


def test_default_target_embedded() -> None:
    tw = TargetWorkload.default()
    assert len(tw) == 35 and abs(tw.freq.sum() - 1) < 1e-9
    assert Counter(tw.num_gpu.tolist())[0] >= 1  # CPU-only shapes are part of the target
