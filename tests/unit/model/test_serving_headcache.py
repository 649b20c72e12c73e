"""The per-pod-class head cache (dsan.model.headcache) gives the reference model's logits:
``model.score(featurize(...))`` over fresh features and embeddings, on random snapshots and
candidate subsets, across assumptions, releases, memory- and pod-count-only changes,
telemetry refreshes, clock advance and in-place weight updates."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dsan.features import (
    FEATURE_NAMES,
    default_workload,
    featurize,
    fgd_select_gpus,
    node_block,
    telemetry_of,
)
from dsan.filtering import allocate, feasible, feasible_nodes, release
from dsan.model.export import DEFAULT_DIR, load
from dsan.model.graph import build_graph
from dsan.model.headcache import (
    MAX_SETS,
    MIN_SETS,
    SET_BYTES,
    SET_NODE_BYTES,
    SetLogits,
    sets_kept,
)
from dsan.model.net import DSANNet, ModelConfig
from dsan.model.serving import ServingModel
from dsan.policies.base import normalize
from dsan.policies.target import TargetWorkload
from dsan.snapshot import ClusterSnapshot, PodSpec
from tests.support.headworld import PODS
from tests.support.headworld import random_residual as _random_residual
from tests.support.headworld import random_snapshot as _snap


def gate_on_telemetry(model: DSANNet) -> DSANNet:
    """The head's units open only with tel_present, as trained models learn it: rows of nodes
    without telemetry are dead (their ReLUs shut)."""
    col = FEATURE_NAMES.index("tel_present")
    with torch.no_grad():
        model.head.proj.weight.mul_(0.01)
        model.head.proj.weight[:, col] = 10.0
        model.head.proj.bias.fill_(-5.0)
    return model


def _reference(sm: ServingModel, pod: PodSpec, snap: ClusterSnapshot,
               nodes: np.ndarray) -> np.ndarray:
    """No feature caches: featurize the candidates afresh, one ``model.score`` over the
    serving model's embeddings (computed at its last refresh: ages alone do not refresh
    them, tests/unit/model/test_serving.py pins that contract)."""
    x, _ = featurize(pod, snap, nodes, sm.workload)
    with torch.inference_mode():
        logit, _ = sm.model.score(
            torch.from_numpy(x),
            sm.embeddings.emb[torch.from_numpy(nodes)],
            torch.ones(len(nodes), dtype=torch.bool),
            torch.zeros(len(nodes), dtype=torch.long),
            1,
        )
    return logit.double().numpy()


def _embed(model: DSANNet, snap: ClusterSnapshot) -> torch.Tensor:
    every = np.arange(len(snap), dtype=np.int64)
    ei, ew = build_graph(snap)
    with torch.inference_mode():
        return model.embed_nodes(
            torch.from_numpy(node_block(snap, every)),
            torch.from_numpy(telemetry_of(snap, every)),
            ei,
            ew,
        )


def _check(sm: ServingModel, model: DSANNet, pod: PodSpec, snap: ClusterSnapshot,
           nodes: np.ndarray) -> np.ndarray:
    fresh = sm._tver != snap.telemetry_version
    got = sm.logits(pod, snap, nodes)
    if fresh:  # just refreshed: the embeddings are the model's on this snapshot
        torch.testing.assert_close(sm.embeddings.emb, _embed(model, snap))
    want = _reference(sm, pod, snap, nodes)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    top = np.flatnonzero(want >= want.max() - 1e-4)  # float noise may only reorder exact ties
    assert int(np.argmax(got)) in top
    if len(top) == 1:
        assert int(np.argmax(got)) == int(np.argmax(want))
    np.testing.assert_array_equal(normalize(got), normalize(want))
    return got


@pytest.mark.parametrize("which", ["residual", "mlp", "shipped"])
def test_cached_head_matches_reference_through_a_changing_cluster(which: str) -> None:
    if which == "shipped":
        model, _ = load(DEFAULT_DIR)
    elif which == "residual":
        model = _random_residual()
    else:
        torch.manual_seed(2)
        model = DSANNet(ModelConfig(hidden=16))
    snap = _snap(60, seed=3)
    rng = np.random.default_rng(4)
    sm = ServingModel(model, default_workload())
    placed: list[tuple[PodSpec, int, tuple[int, ...]]] = []
    for step in range(16):
        pod = PODS[int(rng.integers(len(PODS)))]
        feas = feasible_nodes(pod, snap)
        size = int(rng.integers(1, len(feas) + 1)) if step % 3 else len(feas)
        nodes = np.sort(rng.choice(feas, size=size, replace=False)).astype(np.int64)
        got = _check(sm, model, pod, snap, nodes)
        best = int(nodes[int(np.argmax(got))])
        gpus = fgd_select_gpus(pod, snap, best, default_workload())
        allocate(snap, pod, best, gpus)  # the assumption: the next request sees it
        placed.append((pod, best, gpus))
        if step % 5 == 4:  # a pod goes away
            p, node, g = placed.pop(0)
            release(snap, p, node, g)
        if step % 4 == 1:  # only memory / only the pod count move on some node
            snap.mem_used[int(rng.integers(len(snap)))] += 1024.0
            assert snap.pod_count is not None
            snap.pod_count[int(rng.integers(len(snap)))] += 3
        assert snap.telemetry_age_s is not None
        snap.telemetry_age_s += rng.uniform(0, 200)  # the clock advances every request
        if step % 7 == 3:  # telemetry of some nodes lost / back without a version bump
            absent = np.flatnonzero(~np.isfinite(snap.telemetry_age_s))
            snap.telemetry_age_s[absent] = 30.0
            snap.telemetry_age_s[rng.choice(len(snap), 6, replace=False)] = np.inf
        if step % 6 == 5:  # new telemetry, announced by the version
            assert snap.telemetry is not None
            snap.telemetry[int(rng.integers(len(snap)))] = 0.7
            snap.telemetry_age_s[: len(snap) // 2] = rng.uniform(0, 5, len(snap) // 2)
            snap.telemetry_version += 1
    assert sm.head is not None and sm.head.rows_computed < 16 * len(snap)  # reuse happened


def test_single_and_pair_candidates_and_classes_evicted() -> None:
    model = _random_residual(8)
    snap = _snap(30, seed=5)
    sm = ServingModel(model, default_workload())
    assert sm.head is not None
    sm.head.max_classes = 2
    for pod in PODS * 2:  # more classes than kept: the oldest are rebuilt, still exact
        feas = feasible_nodes(pod, snap)
        for nodes in (feas[:1], feas[:2], feas[::-1]):
            _check(sm, model, pod, snap, np.ascontiguousarray(nodes))
    assert len(sm.head._classes) <= 2


def test_weight_update_in_place_is_picked_up() -> None:
    model = _random_residual(8)
    snap = _snap(30, seed=6)
    sm = ServingModel(model, default_workload())
    pod = PODS[0]
    nodes = feasible_nodes(pod, snap)
    before = _check(sm, model, pod, snap, nodes)
    with torch.no_grad():  # as an optimiser step or load_state_dict would
        model.head.proj.weight.mul_(-1.5)
        model.fusion.query.bias.add_(0.5)
    after = _check(sm, model, pod, snap, nodes)
    assert not np.allclose(before, after)


def test_reference_path_is_kept() -> None:
    model = _random_residual(8)
    snap = _snap(30, seed=7)
    fast, slow = ServingModel(model), ServingModel(model, fast=False)
    assert slow.head is None
    pod = PODS[2]
    nodes = feasible_nodes(pod, snap)
    np.testing.assert_allclose(
        fast.logits(pod, snap, nodes), slow.logits(pod, snap, nodes), rtol=1e-4, atol=1e-5
    )


def test_near_ties_count_as_featurize_counts_them() -> None:
    """BestFit's winner flag has a 1e-9 tolerance and FGD's integer score ties often: the
    relative columns come from the same float64 quantities, so ties stay ties."""
    model = _random_residual(8)
    snap = _snap(30, seed=8)
    a, b = 3, 4
    assert snap.hourly_cost is not None
    for col in (snap.cpu_cap, snap.mem_cap, snap.gpu_count, snap.gpu_model, snap.gpu_free,
                snap.mem_used, snap.hourly_cost):
        col[b] = col[a]
    snap.cpu_used[b] = snap.cpu_used[a] + 1e-5  # bestfit differs by ~4e-11: tied within 1e-9
    sm = ServingModel(model, default_workload())
    for pod in PODS:
        nodes = np.array([n for n in (a, b) if n in set(feasible_nodes(pod, snap))])
        if len(nodes) == 2:
            _check(sm, model, pod, snap, nodes)


def test_renamed_gpu_models_recompute_every_row() -> None:
    """Workload shapes constrained to model names resolve against snap.gpu_models."""
    model = _random_residual(8)
    snap = _snap(30, seed=9)
    target = TargetWorkload.from_shapes(
        [(4000, 1000, 1, ("A100",)), (2000, 500, 1, ("T4",)), (1000, 0, 0, ())], [3, 2, 1]
    )
    sm = ServingModel(model, target)
    pod = PODS[0]
    nodes = feasible_nodes(pod, snap)
    _check(sm, model, pod, snap, nodes)
    snap.gpu_models = ["T4", "A100", "V100"]
    _check(sm, model, pod, snap, nodes)


def test_gated_rows_follow_telemetry_presence_without_a_version_bump() -> None:
    """A telemetry gate as trained models learn it (ReLU units open only with tel_present):
    rows whose gate was shut when cached must open when their telemetry comes back."""
    torch.manual_seed(3)
    model = gate_on_telemetry(DSANNet(ModelConfig(hidden=8)))  # mlp head: no prior
    snap = _snap(30, seed=10)
    ages = snap.telemetry_age_s
    assert ages is not None
    ages[::2] = np.inf
    sm = ServingModel(model, default_workload())
    pod = PODS[3]
    nodes = feasible_nodes(pod, snap)
    _check(sm, model, pod, snap, nodes)
    assert sm.head is not None and next(iter(sm.head._classes.values())).dead.any()
    ages[::2] = 20.0  # telemetry back, same version: the gate opens on those rows
    _check(sm, model, pod, snap, nodes)
    ages[1::2] = np.inf
    _check(sm, model, pod, snap, nodes)


def test_candidate_sets_with_the_same_extremes_reuse_logits_exactly() -> None:
    """Rotations and subsets of the candidates keep their per-column extremes: only nodes
    whose row or telemetry age moved go through the head again, and the logits stay exact."""
    model = _random_residual(8)
    snap = _snap(40, seed=13)
    sm = ServingModel(model, default_workload())
    assert sm.head is not None and snap.telemetry_age_s is not None
    pod = PODS[0]
    nodes = feasible_nodes(pod, snap)
    _check(sm, model, pod, snap, nodes)
    scored = sm.head.rows_scored
    for k in (3, 11, len(nodes) - 1):  # rotations, as kube-scheduler sends them
        _check(sm, model, pod, snap, np.roll(nodes, k))
    assert sm.head.rows_scored == scored
    one = int(nodes[len(nodes) // 2])
    snap.telemetry_age_s[one] += 7.0  # one node's clock moved: that row alone
    _check(sm, model, pod, snap, np.roll(nodes, 5))
    assert sm.head.rows_scored == scored + 1
    for step in range(6):  # assumptions on the winner: exact whether extremes move or not
        got = _check(sm, model, pod, snap, np.roll(nodes, step))
        best = int(np.roll(nodes, step)[int(np.argmax(got))])
        allocate(snap, pod, best, fgd_select_gpus(pod, snap, best, default_workload()))
        nodes = feasible_nodes(pod, snap)
    snap.telemetry_age_s += 1.0  # every clock moved: every row with telemetry again
    before = sm.head.rows_scored
    _check(sm, model, pod, snap, nodes)
    moved = int(np.isfinite(snap.telemetry_age_s[nodes]).sum())
    assert 0 < moved < len(nodes) and sm.head.rows_scored == before + moved


def test_set_entries_are_bounded_per_class() -> None:
    model = _random_residual(8)
    snap = _snap(30, seed=14)
    sm = ServingModel(model, default_workload())
    assert sm.head is not None
    sm.head.max_sets = 2
    pod = PODS[0]
    feas = feasible_nodes(pod, snap)
    for size in range(2, len(feas) + 1, 3):  # growing prefixes: mostly other extremes
        _check(sm, model, pod, snap, np.ascontiguousarray(feas[:size]))
    assert all(len(c.sets) <= 2 for c in sm.head._classes.values())


def test_sets_kept_is_a_byte_budget_within_bounds() -> None:
    assert sets_kept(100) == MAX_SETS  # 64 sets of 100 nodes: 150 KB
    e = SetLogits.empty(5000, np.zeros((5, 1)), np.zeros((7, 1)))
    assert e.logit.nbytes + e.at.nbytes + e.age.nbytes == SET_NODE_BYTES * 5000
    assert sets_kept(5000) == SET_BYTES // (SET_NODE_BYTES * 5000) == 8
    assert sets_kept(10 ** 6) == MIN_SETS
    sizes = [1, 10, 100, 437, 1000, 5000, 20000, 10 ** 6]
    kept = [sets_kept(n) for n in sizes]
    assert kept == sorted(kept, reverse=True)
    assert all(k * SET_NODE_BYTES * n <= SET_BYTES for k, n in zip(kept, sizes, strict=True)
               if k > MIN_SETS)


@pytest.mark.parametrize("max_sets", [None, 4])
def test_a_small_cluster_keeps_every_recent_candidate_set(max_sets: int | None) -> None:
    """Thirteen candidate sets with different extremes, then the first again: on 30 nodes the
    default byte budget still holds its logits (no row goes through the head), a cache of
    four sets computes them again. Exact either way."""
    model = _random_residual(8)
    snap = _snap(30, seed=14)
    sm = ServingModel(model, default_workload())
    assert sm.head is not None
    sm.head.max_sets = max_sets
    pod = PODS[0]
    feas = feasible_nodes(pod, snap)
    keys: set[object] = set()
    lists = []
    for size in range(2, len(feas) + 1):  # growing prefixes: new extremes each few steps
        nodes = np.ascontiguousarray(feas[:size])
        _check(sm, model, pod, snap, nodes)
        c = next(iter(sm.head._classes.values()))
        if c.held_key not in keys:
            keys.add(c.held_key)
            lists.append(nodes)
    assert len(lists) >= 6  # enough distinct extremes to overflow four sets
    before = sm.head.rows_scored
    _check(sm, model, pod, snap, lists[0])
    if max_sets is None:
        assert sm.head.rows_scored == before
    else:
        assert sm.head.rows_scored > before


@pytest.mark.parametrize("with_mask", [False, True])
def test_prefetch_after_an_assumption_leaves_the_next_request_only_gathering(
        with_mask: bool) -> None:
    """What the sidecar's settle() does after the reply (DSANScorer.after_assume): the
    class's changed rows and their logits are brought up to date, under the extremes of the
    candidates the next request sends (the winner dropped once the pod no longer fits it);
    that request computes and scores nothing and is still exact. ``with_mask``: handed the
    feasibility of every node, as the sidecar does (headscan.followed's one pass)."""
    from dsan.policies.dsan import DSANScorer

    model = _random_residual(8)
    snap = _snap(40, seed=15)
    sm = ServingModel(model, default_workload())
    scorer = DSANScorer(sm, default_workload())
    assert sm.head is not None
    pod = PODS[0]
    assert not sm.prefetch(pod, snap)  # no request of the class yet
    nodes = feasible_nodes(pod, snap)
    for step in range(5):
        got = _check(sm, model, pod, snap, np.roll(nodes, step))
        best = int(np.roll(nodes, step)[int(np.argmax(got))])
        allocate(snap, pod, best, fgd_select_gpus(pod, snap, best, default_workload()))
        computed = sm.head.rows_computed
        scorer.after_assume(pod, snap, best, feasible(pod, snap) if with_mask else None)
        nodes = feasible_nodes(pod, snap)
        # the winner's row, off the request path, unless the pod no longer fits it
        assert sm.head.rows_computed > computed or best not in nodes.tolist()
        computed, scored = sm.head.rows_computed, sm.head.rows_scored
        _check(sm, model, pod, snap, np.roll(nodes, step + 1))
        assert sm.head.rows_computed == computed
        assert sm.head.rows_scored == scored


@pytest.mark.parametrize("with_mask", [False, True])
def test_prefetch_follows_nodes_that_start_or_stop_fitting(with_mask: bool) -> None:
    """The prefetch serves the class's last candidates less the changed nodes that no
    longer fit and plus those that now do (an assumption fills one node, the one it replaced
    frees another): the next request over the new feasible set finds every logit held, and
    stays exact; with or without the feasibility of every node handed in."""
    model = _random_residual(8)
    snap = _snap(40, seed=17)
    sm = ServingModel(model, default_workload())
    assert sm.head is not None
    pod = PODS[0]
    nodes = feasible_nodes(pod, snap)
    _check(sm, model, pod, snap, nodes)
    # fill one candidate until the pod no longer fits it
    full = int(nodes[len(nodes) // 2])
    placed = []
    while feasible(pod, snap, np.array([full]))[0]:
        gpus = fgd_select_gpus(pod, snap, full, default_workload())
        allocate(snap, pod, full, gpus)
        placed.append(gpus)
    assert sm.prefetch(pod, snap, feasible(pod, snap) if with_mask else None)
    computed, scored = sm.head.rows_computed, sm.head.rows_scored
    after = feasible_nodes(pod, snap)
    assert full not in after.tolist()
    _check(sm, model, pod, snap, np.roll(after, 3))
    assert (sm.head.rows_computed, sm.head.rows_scored) == (computed, scored)
    # free it again: it fits, and the prefetch brings it back among the candidates
    release(snap, pod, full, placed[-1])
    assert sm.prefetch(pod, snap, feasible(pod, snap) if with_mask else None)
    computed, scored = sm.head.rows_computed, sm.head.rows_scored
    back = feasible_nodes(pod, snap)
    assert full in back.tolist()
    _check(sm, model, pod, snap, np.roll(back, 5))
    assert (sm.head.rows_computed, sm.head.rows_scored) == (computed, scored)


def test_follow_drops_and_adds_only_changed_nodes() -> None:
    """headcache.follow: a changed candidate that no longer fits leaves, a changed
    non-candidate that fits joins, unchanged nodes stay as they were (even when they do not
    fit: follow judges only what changed), and nothing moved returns the same object."""
    from dsan.model.headcache import follow

    snap = _snap(30, seed=18)
    pod = PODS[0]
    ok = feasible(pod, snap)
    fit, unfit = np.flatnonzero(ok), np.flatnonzero(~ok)
    assert len(fit) >= 6 and len(unfit) >= 2
    last = np.concatenate([fit[:4], unfit[:1]])
    assert follow(last, np.zeros(0, dtype=np.int64), pod, snap) is last
    assert follow(last, fit[:2], pod, snap) is last  # changed but still fitting candidates
    got = follow(last, np.array([fit[5], unfit[0], unfit[1]]), pod, snap)
    assert got.tolist() == [*fit[:4].tolist(), fit[5]]
    many = np.concatenate([fit[4:], unfit])  # past the few-row path
    assert sorted(follow(last, many, pod, snap).tolist()) == fit.tolist()
    # the caller's feasibility of every node (the sidecar's cache) gives the same lists
    for changed in (fit[:2], np.array([fit[5], unfit[0], unfit[1]]), many):
        assert (follow(last, changed, pod, snap, ok).tolist()
                == follow(last, changed, pod, snap).tolist())


def test_prefetch_under_held_extremes_scores_only_the_changed_rows() -> None:
    """A prefetch whose candidates' extremes the class already holds logits for sends just
    the rows it recomputed through the head (no pass over the candidates); new extremes
    take the full pass. Either way the next request is exact."""
    model = _random_residual(8)
    snap = _snap(60, seed=16)
    sm = ServingModel(model, default_workload())
    assert sm.head is not None
    pod = PODS[0]
    held = full = 0
    for step in range(12):
        nodes = feasible_nodes(pod, snap)
        _check(sm, model, pod, snap, np.roll(nodes, step))
        # a node in the middle of the set: its change rarely moves an extreme
        node = int(nodes[len(nodes) // 2])
        allocate(snap, pod, node, fgd_select_gpus(pod, snap, node, default_workload()))
        computed, scored = sm.head.rows_computed, sm.head.rows_scored
        assert sm.prefetch(pod, snap)
        changed = sm.head.rows_computed - computed
        if sm.head.rows_scored - scored == changed:
            held += 1
        else:
            assert sm.head.rows_scored - scored >= len(feasible_nodes(pod, snap)) - 1
            full += 1
    assert held  # the prefetch's short path ran
    _check(sm, model, pod, snap, feasible_nodes(pod, snap))


def test_trusted_versions_skip_the_row_diff_only_for_an_unchanged_version() -> None:
    """RowTracker(trust_version=True), as the sidecar's engine sets it: the same snapshot at
    the same version is not diffed again; a version bump is; without trust every in-place
    write is found whatever the version."""
    from dsan.model.rowcache import RowTracker

    snap = _snap(20, seed=23)
    trusted, plain = RowTracker(snap, trust_version=True), RowTracker(snap)
    snap.mem_used[4] += 512.0  # a write without a version bump (the contract broken)
    trusted.sync(snap)
    plain.sync(snap)
    assert trusted.epoch[4] == 0 and plain.epoch[4] == plain.tick > 1
    snap.version += 1  # announced: found, with the earlier write
    snap.cpu_used[7] += 1000.0
    trusted.sync(snap)
    assert trusted.epoch[4] == trusted.epoch[7] == trusted.tick > 1
    other = snap.copy()  # another snapshot object at the same version is diffed
    other.pod_count[9] += 1  # type: ignore[index]
    trusted.sync(other)
    assert trusted.epoch[9] == trusted.tick


def test_trusted_serving_through_allocate_and_release_stays_exact() -> None:
    """dsan.filtering.allocate / release bump the version: a trusting model follows them."""
    model = _random_residual(8)
    snap = _snap(40, seed=24)
    sm = ServingModel(model, default_workload())
    sm.trust_snapshot_versions()
    pod = PODS[0]
    placed = []
    for step in range(8):
        nodes = feasible_nodes(pod, snap)
        got = _check(sm, model, pod, snap, np.roll(nodes, step))
        best = int(np.roll(nodes, step)[int(np.argmax(got))])
        gpus = fgd_select_gpus(pod, snap, best, default_workload())
        allocate(snap, pod, best, gpus)
        placed.append((best, gpus))
        if step % 3 == 2:
            node, g = placed.pop(0)
            release(snap, pod, node, g)


def test_a_row_hint_is_read_only_when_it_spans_the_last_sync_to_now() -> None:
    """RowTracker.sync(snap, hint): with trust, a hint (since, version, rows) from the last
    synced version to the snapshot's version limits the compare to those rows; any other
    hint is ignored and every row is compared."""
    from dsan.model.rowcache import RowTracker

    snap = _snap(20, seed=25)
    t = RowTracker(snap, trust_version=True)
    v0 = snap.version
    snap.cpu_used[3] += 1000.0
    snap.gpu_free[8, 0] += 7  # (any write: the tracker only compares)
    snap.version += 1
    t.sync(snap, (v0, snap.version, [3, 8, 8]))  # spans v0 -> now: read
    assert t.epoch[3] == t.epoch[8] == t.tick == 2
    v1 = snap.version
    snap.mem_used[5] += 1.0
    snap.version += 1
    t.sync(snap, (v1, snap.version, [6]))  # a hint that misses row 5 is believed...
    assert t.epoch[5] == 0 and t.epoch[6] == 0
    snap.pod_count[11] += 1  # type: ignore[index]
    snap.version += 1
    t.sync(snap, (v0, snap.version, []))  # ...one from another version is not
    assert t.epoch[5] == t.epoch[11] == t.tick == 3
    plain = RowTracker(snap)
    snap.cpu_used[2] += 1.0
    plain.sync(snap, (snap.version, snap.version, []))  # no trust: hints never read
    assert plain.epoch[2] == plain.tick == 2


def test_unique_rows_is_np_unique() -> None:
    """headcache.unique_rows, the stale rows' dedupe, equals np.unique: sorted, each value
    once, for repeats, one value, runs at both ends and the empty array."""
    from dsan.model.headcache import unique_rows

    rnd = np.random.default_rng(3)
    cases = [np.zeros(0, dtype=np.int64), np.array([7]), np.array([5, 5, 5]),
             np.array([9, 1, 1, 9]), np.arange(40)[::-1].copy()]
    cases += [rnd.integers(0, hi, size).astype(np.int64)
              for hi, size in ((3, 10), (50, 60), (5000, 1000), (2**40, 300))]
    for rows in cases:
        got = unique_rows(rows)
        assert got.dtype == np.int64 and got.tolist() == np.unique(rows).tolist()


def test_prefetch_after_every_candidate_stopped_fitting() -> None:
    """The settle's prefetch when the class's last candidates all stopped fitting and no
    changed node joined: nothing to serve (it once took the extremes of an empty set and
    raised ValueError, which the sidecar counted as a settle error); the next request with
    candidates that fit again is scored as the model scores it."""
    model, _ = load(DEFAULT_DIR)
    snap = _snap(30, seed=25)
    pod = next(p for p in PODS if p.name == "model")
    sm = ServingModel(model, default_workload())
    nodes = feasible_nodes(pod, snap)
    assert len(nodes) >= 2
    sm.logits(pod, snap, nodes)
    saved = snap.gpu_free.copy()
    snap.gpu_free[nodes] = 0  # every candidate's GPUs taken: none fits any more
    assert not feasible(pod, snap)[nodes].any()
    assert sm.prefetch(pod, snap)
    snap.gpu_free[:] = saved
    got = sm.logits(pod, snap, nodes)
    ref = ServingModel(model, default_workload(), fast=False).logits(pod, snap, nodes)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
