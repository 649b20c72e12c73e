"""The featurizer's fast path pinned to the original implementation: the same float32 bits
on random snapshots (telemetry, images, prices, model constraints, sharing and whole-GPU
pods) and along simulated openb episodes. ``_reference_featurize`` is the column-by-column
featurizer as it was before the vectorised path, kept verbatim as the oracle."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from hypothesis import given, settings
from hypothesis import strategies as st

from dsan.api.types import TASK_TYPES
from dsan.core.snapshot import MAX_GPUS, ClusterSnapshot, PodSpec, empty_snapshot
from dsan.features import (
    CPU_SCALE,
    GPU_SCALE,
    MEM_SCALE,
    N_FEATURES,
    N_NODE_FEATURES,
    TOP_SHAPES,
    PlacementCache,
    default_workload,
    featurize,
    featurize_batch,
    node_block,
    placement,
)
from dsan.features.target import TargetWorkload

F32 = npt.NDArray[np.float32]


def _minmax(x: npt.NDArray[np.float64], higher_is_better: bool = True) -> npt.NDArray[np.float64]:
    lo, hi = float(x.min()), float(x.max())
    if not hi > lo:
        return np.ones_like(x)
    return (x - lo) / (hi - lo) if higher_is_better else (hi - x) / (hi - lo)


def _frac(num: npt.NDArray[np.float64], den: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    return np.divide(num, den, out=np.zeros_like(num, dtype=np.float64), where=den > 0)


def _reference_featurize(
    pod: PodSpec,
    snap: ClusterSnapshot,
    nodes: npt.NDArray[np.int64],
    workload: TargetWorkload | None = None,
    node_cols: F32 | None = None,
    cache: PlacementCache | None = None,
) -> F32:
    """Features of ``pod`` on candidate ``nodes``: ``(m, 128)`` float32.

    ``node_cols`` may pass :func:`node_block` of ``nodes`` precomputed (it only changes with
    telemetry), and ``cache`` a :class:`PlacementCache` kept across pods: together they
    remove most of the per-pod cost on the hot path.
    """
    w = workload or default_workload()
    nodes = np.asarray(nodes, dtype=np.int64)
    m = len(nodes)
    blk = node_block(snap, nodes) if node_cols is None else node_cols
    if blk.shape != (m, N_NODE_FEATURES):
        raise ValueError(f"node_cols has shape {blk.shape}, want ({m}, {N_NODE_FEATURES})")
    one = np.ones(m)
    b: list[npt.NDArray[np.float64]] = [one * (pod.task_type == t) for t in range(len(TASK_TYPES))]
    cpu_cap, mem_cap = snap.cpu_cap[nodes], snap.mem_cap[nodes]
    cnt = snap.gpu_count[nodes].astype(np.float64)
    gpu_cap = cnt * 1000.0
    k = pod.num_gpu if pod.gpu_milli > 0 else 0
    gtot = float(k * pod.gpu_milli)
    b += [one * np.tanh(pod.priority / 1000), one * (pod.priority > 0), one * pod.gang_size / 8]
    b += [one * (pod.gang_size > 1), one * pod.cpu_milli / CPU_SCALE, one * pod.mem_mib / MEM_SCALE]
    b += [one * k / MAX_GPUS, one * pod.gpu_milli / 1000, one * gtot / GPU_SCALE]
    # cpu_bound_cpu_per_gpu: node_cpu_per_gpu for a CPU-only pod when the GPU nodes' used CPU
    # share is above 1.1x their used GPU share and at least 0.1 (plain quotients here)
    g = snap.gpu_count > 0
    gpu_used = 1 - snap.gpu_free.sum() / max(1.0, 1000.0 * snap.gpu_count.sum())
    cpu_used = snap.cpu_used[g].sum() / max(1e-300, snap.cpu_cap[g].sum())
    cpu_bound = (g.any() and snap.cpu_cap[g].sum() > 0 and cpu_used > 1.1 * gpu_used
                 and cpu_used >= 0.1)
    factor = float(k == 0 and cpu_bound)
    b += [one * pod.is_sharing, one * (k == 0), _frac(cpu_cap, cnt) / CPU_SCALE * factor]
    b.append(one * len(pod.gpu_models) / 8)
    b.append(
        np.zeros(m)
        if snap.images is None or pod.image < 0
        else np.array([pod.image in snap.images[i] for i in nodes], dtype=np.float64)
    )
    b.append(np.zeros(m) if snap.pod_count is None else snap.pod_count[nodes] / 64)
    b += [_frac(one * pod.cpu_milli, cpu_cap), _frac(one * pod.mem_mib, mem_cap)]
    b += [_frac(one * gtot, gpu_cap), one * pod.cpu_milli / max(1, k) / CPU_SCALE]
    b.append(one * np.log1p(pod.mem_mib) / np.log1p(MEM_SCALE))

    pl = cache.get(pod, snap, nodes) if cache is not None else placement(pod, snap, nodes, w)
    free = snap.gpu_free[nodes].astype(np.int64)
    present = snap.gpu_present[nodes]
    cpu_free = cpu_cap - snap.cpu_used[nodes]
    mem_free = mem_cap - snap.mem_used[nodes]
    gfree = free.sum(1).astype(np.float64)
    cfa, mfa, gfa = cpu_free - pod.cpu_milli, mem_free - pod.mem_mib, gfree - gtot
    d: list[npt.NDArray[np.float64]] = []
    for now, after, cap in (
        (cpu_free, cfa, cpu_cap),
        (mem_free, mfa, mem_cap),
        (gfree, gfa, gpu_cap),
    ):
        d += [_frac(now, cap), _frac(after, cap)]
    cu, mu = 1 - _frac(cfa, cpu_cap), 1 - _frac(mfa, mem_cap)
    least = 0.5 * (_frac(cfa, cpu_cap) + _frac(mfa, mem_cap))
    d += [least, 1 - np.abs(cu - mu) / 2]
    rq = np.array([pod.cpu_milli / CPU_SCALE, pod.mem_mib / MEM_SCALE, gtot / GPU_SCALE])
    d.append(
        rq[0] * cpu_free / CPU_SCALE + rq[1] * mem_free / MEM_SCALE + rq[2] * gfree / GPU_SCALE
    )
    dot = rq[0] * cu + rq[1] * mu + rq[2] * (1 - _frac(gfa, gpu_cap))
    d.append(dot)
    cl, gl = cfa / CPU_SCALE, gfa / GPU_SCALE
    bestfit = 1 - (0.5 * cl + 0.5 * gl)
    d += [cl, gl, bestfit]
    delta = pl.frag_after - pl.frag_before
    d += [pl.frag_before / GPU_SCALE, pl.frag_after / GPU_SCALE, delta / 1000]
    fgd = 1 / (1 + np.exp(np.clip(delta / 1000, -50, 50)))
    fgd_int = np.floor(fgd * 100) / 100  # FGD's plugin truncates to an int score: ties
    d += [fgd, fgd_int]
    full_b = ((free == 1000) & present).sum(1).astype(np.float64)
    full_a = ((pl.free_after == 1000) & present).sum(1).astype(np.float64)
    d += [full_b / 8, full_a / 8, ((free > 0) & (free < 1000) & present).sum(1) / 8]
    rows = np.arange(m)
    if pod.is_sharing:
        chosen = np.where(pl.slot >= 0, free[rows, np.maximum(pl.slot, 0)], 0).astype(np.float64)
    else:
        chosen = one * (1000.0 if k > 0 else 0.0)
    d += [chosen / 1000, np.maximum(chosen - pod.gpu_milli * (k > 0), 0) / 1000]
    d += [free.max(1) / 1000, np.where(present, free, 1000).min(1) * (cnt > 0) / 1000]
    fitting = ((free >= max(pod.gpu_milli, 1)) & present).sum(1).astype(np.float64)
    d += [fitting / 8, (fitting - k) / 8]
    d.append((pod.is_sharing & (chosen < 1000) & (chosen > 0)).astype(np.float64))
    d.append(((snap.cpu_used[nodes] == 0) & (gfree == gpu_cap)).astype(np.float64))
    d.append(((gfree > 0) & (gfree < gpu_cap)).astype(np.float64))
    room_at = len(d)  # shape1_room_gpu_bound, filled after the shape columns
    d.append(one * 0.0)
    d += [_minmax(delta, higher_is_better=False), _minmax(bestfit), _minmax(least), _minmax(dot)]
    d += [(fgd_int >= fgd_int.max()) * one, (bestfit >= bestfit.max() - 1e-9) * one]
    d.append(_frac(pl.frag_before, gfree))
    price = np.ones(m) if snap.hourly_cost is None else snap.hourly_cost[nodes]
    share = np.maximum(_frac(one * pod.cpu_milli, cpu_cap), _frac(one * gtot, gpu_cap))
    d += [price * share / 4, _minmax(price * share, higher_is_better=False)]
    ok = w.access(snap)[:, nodes]
    for s in range(TOP_SHAPES):
        if s >= len(w.freq):
            d.append(np.zeros(m))
            continue
        by_cpu = np.floor(np.maximum(cfa, 0) / max(float(w.cpu_milli[s]), 1.0))
        if w.num_gpu[s] == 0:
            copies = by_cpu
        else:
            per_gpu = np.floor(np.maximum(pl.free_after, 0) / max(int(w.gpu_milli[s]), 1)).sum(1)
            copies = np.minimum(by_cpu, per_gpu // w.num_gpu[s]) * ok[s]
        d.append(np.minimum(copies / 8, 1.0))
    # shape1_room_gpu_bound: shape 1's room, for a pod asking for 2+ whole GPUs in a cluster
    # whose free GPU share is below its free CPU share (shares as plain quotients here)
    gpu_share = snap.gpu_free.sum() / max(1.0, 1000.0 * snap.gpu_count.sum())
    cpu_share = (snap.cpu_cap.sum() - snap.cpu_used.sum()) / max(1e-300, snap.cpu_cap.sum())
    bound = snap.gpu_count.sum() > 0 and snap.cpu_cap.sum() > 0 and gpu_share < cpu_share
    whole = pod.num_gpu >= 2 and pod.gpu_milli >= 1000
    if len(w.freq) > 1:
        d[room_at] = d[len(d) - TOP_SHAPES + 1] * float(whole and bound)
    x = np.concatenate([blk, np.stack(b + d, axis=1).astype(np.float32)], axis=1)
    if x.shape[1] != N_FEATURES:
        raise AssertionError(f"featurizer produced {x.shape[1]} columns, schema has {N_FEATURES}")
    return x


def _random_snapshot(rng: np.random.Generator, n: int, extras: bool) -> ClusterSnapshot:
    snap = empty_snapshot(
        [f"n{i:03d}" for i in rng.permutation(n)],
        rng.choice([32000.0, 64000.0, 96000.0], n),
        rng.choice([131072.0, 262144.0, 524288.0], n),
        rng.choice([0, 1, 2, 4, 8], n),
        rng.integers(0, 3, n),
        ["V100M16", "P100", "T4"],
    )
    g = snap.gpu_count
    for i in range(n):  # random partial use, absent slots stay 0
        snap.gpu_free[i, : g[i]] = rng.choice([0, 200, 500, 700, 1000], g[i])
    snap.gpu_model[g == 0] = -1
    snap.cpu_used[:] = rng.uniform(0, 0.9, n) * snap.cpu_cap
    snap.mem_used[:] = rng.uniform(0, 0.9, n) * snap.mem_cap
    if extras:
        snap.hourly_cost = rng.uniform(0.5, 4.0, n)
        snap.pod_count = rng.integers(0, 30, n).astype(np.int32)
        snap.images = [frozenset(rng.integers(0, 5, 3).tolist()) for _ in range(n)]
        snap.telemetry = rng.uniform(0, 1, (n, 6, 5)).astype(np.float32)
        snap.telemetry_age_s = rng.uniform(0, 100, n)
    return snap


def _random_pod(rng: np.random.Generator, i: int) -> PodSpec:
    kind = int(rng.integers(3))
    num_gpu, milli = [
        (0, 0),
        (1, int(rng.choice([100, 250, 500, 700]))),
        (int(rng.choice([1, 2, 4])), 1000),
    ][kind]
    return PodSpec(
        f"p{i}",
        float(rng.choice([500, 4000, 16000])),
        float(rng.choice([1024, 8192, 65536])),
        num_gpu,
        milli,
        gpu_models=[(), (0,), (1, 2)][int(rng.integers(3))],
        priority=int(rng.choice([-5, 0, 100, 2000])),
        task_type=int(rng.integers(len(TASK_TYPES))),
        gang_size=int(rng.choice([1, 1, 4])),
        image=int(rng.integers(-1, 5)),
    )


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 40), extras=st.booleans())
def test_fast_featurize_is_bit_identical_to_the_reference(seed: int, n: int, extras: bool) -> None:
    rng = np.random.default_rng(seed)
    snap = _random_snapshot(rng, n, extras)
    target = default_workload()
    for i in range(4):
        pod = _random_pod(rng, i)
        nodes = np.sort(rng.choice(n, size=int(rng.integers(1, n + 1)), replace=False))
        want = _reference_featurize(pod, snap, nodes, target)
        got = featurize(pod, snap, nodes, target)
        assert got.dtype == np.float32 and got.shape == (len(nodes), N_FEATURES)
        np.testing.assert_array_equal(got, want)
        cached = featurize(
            pod, snap, nodes, target, node_block(snap, nodes), PlacementCache(target)
        )
        np.testing.assert_array_equal(cached, want)


def test_fast_featurize_matches_the_reference_along_an_openb_episode() -> None:
    from dsan.train.openb import EnvConfig, make_episode

    ep = make_episode(EnvConfig(n_nodes=48), 3)
    cache = PlacementCache(ep.target)
    for step in range(80):
        d = ep.decision()
        if d is None:
            break
        pod, cand = d.pod, d.cand
        if step % 2:  # the rollout's path: the episode's tracker supplies "before"
            cache.adopt_fragmentation(ep.frag.frag)
        want = _reference_featurize(pod, ep.snap, cand, ep.target)
        got = featurize(pod, ep.snap, cand, ep.target, cache=cache)
        np.testing.assert_array_equal(got, want)
        ep.step(int(cand[int(np.argmax(want[:, -24]))]))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), k=st.integers(1, 5))
def test_batched_decisions_equal_each_decision_alone(seed: int, k: int) -> None:
    rng = np.random.default_rng(seed)
    target = default_workload()
    snaps = [
        _random_snapshot(rng, int(rng.integers(2, 30)), bool(rng.integers(2))) for _ in range(k)
    ]
    pods = [_random_pod(rng, i) for i in range(k)]
    nodes = [
        np.sort(rng.choice(len(sn), size=int(rng.integers(1, len(sn) + 1)), replace=False))
        for sn in snaps
    ]
    want = np.concatenate(
        [
            _reference_featurize(p, sn, nd, target)
            for p, sn, nd in zip(pods, snaps, nodes, strict=True)
        ]
    )
    caches = [PlacementCache(target) if rng.integers(2) else None for _ in range(k)]
    got = featurize_batch(pods, snaps, nodes, target, [None] * k, caches)
    np.testing.assert_array_equal(got, want)


def test_an_empty_candidate_set_has_no_rows_alone_or_in_a_batch() -> None:
    # It used to fail inside the node block ("cannot reshape array of size 0") or, last in a
    # batch, past the end of the segment reductions.
    rng = np.random.default_rng(7)
    target = default_workload()
    snaps = [_random_snapshot(rng, 12, True) for _ in range(3)]
    pods = [_random_pod(rng, i) for i in range(3)]
    none = np.zeros(0, dtype=np.int64)
    assert featurize(pods[0], snaps[0], none, target).shape == (0, N_FEATURES)
    assert featurize_batch(pods, snaps, [none] * 3, target).shape == (0, N_FEATURES)
    nodes = [np.arange(5), none, np.arange(3, 12)]
    want = np.concatenate([_reference_featurize(pods[i], snaps[i], nodes[i], target)
                           for i in (0, 2)])
    caches = [PlacementCache(target), PlacementCache(target), None]
    for order in ([0, 1, 2], [1, 0, 2], [0, 2, 1]):
        got = featurize_batch([pods[i] for i in order], [snaps[i] for i in order],
                              [nodes[i] for i in order], target, None,
                              [caches[i] for i in order])
        np.testing.assert_array_equal(got, want)


def test_fgd_select_gpus_with_a_precomputed_access_mask_picks_the_same_slots() -> None:
    from dsan.features import fgd_select_gpus

    rng = np.random.default_rng(5)
    target = default_workload()
    picked = 0
    for _ in range(30):
        snap = _random_snapshot(rng, 12, False)
        acc = target.access(snap)
        pod = PodSpec("s", 1000.0, 1024.0, 1, int(rng.choice([100, 300, 600])))
        for node in np.flatnonzero((snap.gpu_free >= pod.gpu_milli).any(axis=1)):
            want = fgd_select_gpus(pod, snap, int(node), target)
            assert fgd_select_gpus(pod, snap, int(node), target, acc) == want
            picked += 1
    assert picked > 50
