"""ServingModel: the per-class caches give the reference logits (featurize every candidate,
run the runtime) through placements, releases, telemetry, ages, node-set and static changes,
recompute only what changed, and stay bounded."""

from __future__ import annotations

import numpy as np
import pytest

from dsan.core.filtering import allocate, feasible_nodes, release
from dsan.core.snapshot import ClusterSnapshot, PodSpec
from dsan.features import default_workload, fgd_select_gpus, schema_hash
from dsan.model import serving
from dsan.model.net import DSANNet, ModelConfig
from dsan.model.serving import ServingModel
from dsan.policies.dsan import DSANScorer
from tests.support.headworld import PODS, random_residual, random_snapshot
from tests.support.models import numpy_runtime, serving_model


@pytest.fixture
def sm() -> ServingModel:
    return serving_model(random_residual(), default_workload())


def _check(sm: ServingModel, pod: PodSpec, snap: ClusterSnapshot, nodes: np.ndarray,
           fresh: bool = True) -> None:
    """The cached logits against the reference path on the same embeddings, and (``fresh``)
    against a model that never saw an earlier snapshot."""
    got = sm.logits(pod, snap, nodes)
    np.testing.assert_allclose(got, sm.reference(pod, snap, nodes), rtol=0, atol=2e-5)
    if fresh:
        new = serving_model(random_residual(), default_workload())
        np.testing.assert_allclose(got, new.reference(pod, snap, nodes), rtol=0, atol=2e-5)


def test_cached_logits_follow_placements_and_releases(sm: ServingModel) -> None:
    snap = random_snapshot(80, 0)
    rng = np.random.default_rng(0)
    placed: list[tuple[PodSpec, int, tuple[int, ...]]] = []
    for step in range(60):
        pod = PODS[step % len(PODS)]
        cand = feasible_nodes(pod, snap)
        if len(cand) < 2:
            break
        nodes = rng.permutation(cand)[: rng.integers(2, len(cand) + 1)]
        _check(sm, pod, snap, nodes)
        best = int(nodes[np.argmax(sm.logits(pod, snap, nodes))])
        gpus = fgd_select_gpus(pod, snap, best, default_workload())
        allocate(snap, pod, best, gpus)
        placed.append((pod, best, gpus))
        if step % 7 == 6:  # a departure frees a node again
            p, node, g = placed.pop(0)
            release(snap, p, node, g)


def test_telemetry_ages_and_static_changes_reach_the_logits(sm: ServingModel) -> None:
    snap = random_snapshot(50, 1)
    nodes = np.arange(50, dtype=np.int64)
    pod = PODS[0]
    _check(sm, pod, snap, nodes)
    assert snap.telemetry is not None and snap.telemetry_age_s is not None
    snap.telemetry[[3, 9]] += 0.25
    snap.telemetry_version += 1
    _check(sm, pod, snap, nodes)
    # The clock moved: every age, no version bump. The head's age columns follow at once;
    # the streams (the GNN reads ages too) at the next telemetry refresh.
    snap.telemetry_age_s[:] += 30.0
    _check(sm, pod, snap, nodes, fresh=False)
    snap.cpu_cap[4] *= 2  # a resized node, announced as the sidecar does
    snap.telemetry_version += 1
    _check(sm, pod, snap, nodes)
    grown = random_snapshot(55, 1)  # a new node set
    _check(sm, pod, grown, np.arange(55, dtype=np.int64))


def test_a_request_recomputes_only_the_changed_rows_and_prepare_does_them_first(
        sm: ServingModel, monkeypatch: pytest.MonkeyPatch) -> None:
    featurized: list[int] = []  # rows per call of the featurizer and of the head
    computed: list[int] = []
    pod_rows, logits = serving.pod_rows, sm.runtime.logits
    monkeypatch.setattr(serving, "pod_rows", lambda pod, snap, nodes, *a: (
        featurized.append(len(nodes)) or pod_rows(pod, snap, nodes, *a)))
    monkeypatch.setattr(sm.runtime, "logits", lambda x, nodes: (
        computed.append(len(nodes)) or logits(x, nodes)))
    snap = random_snapshot(60, 2)
    pod = PODS[2]  # whole GPUs: the extremes stay put when one node fills a little
    nodes = feasible_nodes(pod, snap)
    sm.logits(pod, snap, nodes)
    assert sum(featurized) == sum(computed) == len(nodes)
    featurized.clear()
    computed.clear()
    sm.logits(pod, snap, nodes[::-1])  # a rotation of the same set: nothing to do
    assert featurized == computed == []
    target = int(nodes[0])
    snap.cpu_used[target] += 1000.0
    snap.version += 1
    sm.prepare(pod, snap)  # what the sidecar does after assuming the winner
    assert featurized == [1]
    computed.clear()
    sm.logits(pod, snap, nodes)
    assert computed == []  # prepared: the request only gathered
    _check(sm, pod, snap, nodes)


def test_min_refresh_s_leaves_telemetry_to_prepare_but_not_a_new_node_set() -> None:
    now = [0.0]
    sm = ServingModel(numpy_runtime(random_residual()), min_refresh_s=1.0,
                      clock=lambda: now[0])
    snap = random_snapshot(30, 3)
    nodes = np.arange(30, dtype=np.int64)
    pod = PODS[0]
    sm.logits(pod, snap, nodes)
    v = sm.embeddings.version
    assert snap.telemetry is not None
    snap.telemetry[0] += 1.0
    snap.telemetry_version += 1
    sm.logits(pod, snap, nodes)  # on the request path: not refreshed
    sm.prepare(pod, snap)  # off it, but within min_refresh_s
    assert sm.embeddings.version == v
    now[0] = 1.5
    sm.prepare(pod, snap)
    assert sm.embeddings.version == v + 1
    _check(sm, pod, snap, nodes)
    sm.logits(pod, random_snapshot(31, 3), np.arange(31))  # a new node set: at once
    assert sm.embeddings.version == v + 2


def test_classes_and_candidate_sets_stay_bounded(sm: ServingModel,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    assert serving.sets_kept(100) == serving.MAX_SETS and serving.sets_kept(5000) == 8
    monkeypatch.setattr(serving, "SET_BYTES", 0)  # as many as the floor allows
    snap = random_snapshot(40, 4)
    for cpu in range(serving.MAX_CLASSES + 5):
        sm.logits(PodSpec(f"p{cpu}", 100 + cpu, 64), snap, np.arange(40))
    assert len(sm._classes) == serving.MAX_CLASSES
    pod = PODS[3]
    for k in range(2, 40):
        sm.logits(pod, snap, np.arange(k))
    (cls,) = [c for key, c in sm._classes.items() if key[0] == serving.class_key(pod)]
    assert len(cls.sets) == serving.MIN_SETS


def test_the_scorer_quantizes_reports_its_version_and_reads_telemetry() -> None:
    model = DSANNet(ModelConfig(hidden=8))
    bare = DSANScorer(serving_model(model))
    assert bare.reads_telemetry and bare.version == f"untrained+{schema_hash()}"
    shipped = DSANScorer(serving_model(model, manifest={"version": "dsan-1-42"}))
    assert shipped.version == f"dsan-1-42+{schema_hash()}"
    snap = random_snapshot(20, 5)
    nodes = np.arange(20, dtype=np.int64)
    raw = shipped.serving.logits(PODS[0], snap, nodes)
    s = shipped.score(PODS[0], snap, nodes)
    assert s.max() == raw.max() and (s == s.max()).sum() >= 1


@pytest.mark.xfail(strict=True, reason="known: the scenario engine adds pulled images to "
                   "snap.images in place without a telemetry_version bump, so node_image_count "
                   "(node block) and pod_image_local (class rows) stay stale; a fix moves the "
                   "shipped model's scores (seed-table1 seed 1: 2 of 12,352 decisions)")
def test_an_image_pulled_in_place_reaches_the_logits(sm: ServingModel) -> None:
    snap = random_snapshot(20, 4)
    snap.images = [frozenset() for _ in range(20)]
    nodes = np.arange(20, dtype=np.int64)
    pod = PodSpec("img", cpu_milli=1000, mem_mib=512, image=3)
    _check(sm, pod, snap, nodes)
    snap.images[5] = snap.images[5] | {3}  # as Scheduling's pull does: same list, no bump
    snap.version += 1
    _check(sm, pod, snap, nodes)
