"""ServingModel: the cached fast path gives the reference forward's logits, and the
embeddings are recomputed exactly when their inputs change (telemetry_version, objects)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dsan.features import (
    default_workload,
    featurize,
    fgd_select_gpus,
    node_block,
    schema_hash,
    telemetry_of,
)
from dsan.filtering import allocate, feasible_nodes
from dsan.model.graph import build_graph
from dsan.model.net import DSANNet, ModelConfig
from dsan.model.serving import ServingModel
from dsan.policies.dsan import DSANScorer
from dsan.snapshot import ClusterSnapshot, PodSpec
from tests.support.headworld import base_snapshot


def _snap(n: int = 40, seed: int = 0) -> ClusterSnapshot:
    rng = np.random.default_rng(seed)
    snap = base_snapshot(n, rng)
    snap.nvlink = np.where(snap.gpu_count >= 4, np.arange(n) // 2, -1).astype(np.int32)
    snap.hourly_cost = rng.uniform(0.5, 3.0, size=n)
    snap.telemetry = rng.random((n, 6, 5)).astype(np.float32)
    snap.telemetry_age_s = rng.uniform(0, 60, size=n)
    snap.cpu_used[:] = rng.uniform(0, 0.5, size=n) * snap.cpu_cap
    snap.gpu_free[:] = np.where(snap.gpu_present, rng.choice([0, 250, 500, 1000], (n, 8)), 0)
    return snap


def _reference(
    model: DSANNet, pod: PodSpec, snap: ClusterSnapshot, nodes: np.ndarray
) -> np.ndarray:
    """Everything recomputed from the snapshot, one full forward: no caches at all."""
    allnodes = np.arange(len(snap), dtype=np.int64)
    x, _ = featurize(pod, snap, nodes)
    ei, ew = build_graph(snap)
    with torch.inference_mode():
        logit, _ = model(
            torch.from_numpy(x),
            torch.from_numpy(node_block(snap, allnodes)),
            torch.from_numpy(telemetry_of(snap, allnodes)),
            ei,
            ew,
            torch.from_numpy(nodes),
            torch.ones(len(nodes), dtype=torch.bool),
        )
    return logit.double().numpy()


def _arr(a: np.ndarray | None) -> np.ndarray:
    assert a is not None
    return a


@pytest.fixture
def model() -> DSANNet:
    torch.manual_seed(0)
    return DSANNet(ModelConfig(hidden=16))


PODS = [
    PodSpec("share", 4000, 16384, 1, 500),
    PodSpec("whole", 8000, 32768, 2, 1000),
    PodSpec("cpu", 2000, 4096),
]


def test_fast_path_matches_reference_across_allocations_and_telemetry(model: DSANNet) -> None:
    snap = _snap()
    sm = ServingModel(model)
    for step in range(12):
        pod = PODS[step % len(PODS)]
        nodes = feasible_nodes(pod, snap)
        got = sm.logits(pod, snap, nodes)
        np.testing.assert_allclose(got, _reference(model, pod, snap, nodes), atol=1e-5, rtol=0)
        best = int(nodes[int(np.argmax(got))])
        # The snapshot changes between pods, as in the sidecar.
        allocate(snap, pod, best, fgd_select_gpus(pod, snap, best, default_workload()))
        if step % 4 == 3:  # new telemetry, written in place, announced by the version
            _arr(snap.telemetry)[step % len(snap), -1] = 0.9
            _arr(snap.telemetry_age_s)[:] += 10.0
            snap.telemetry_version += 1
    assert sm.embed_count == 1 + 2  # bumps after steps 3 and 7 (the one after 11 is unused)


def test_embeddings_recomputed_only_when_their_inputs_change(model: DSANNet) -> None:
    snap = _snap()
    sm = ServingModel(model)
    pod = PODS[0]
    nodes = feasible_nodes(pod, snap)
    sm.logits(pod, snap, nodes)
    _arr(snap.telemetry_age_s)[:] += 5.0  # ages grow with the clock: no recompute...
    aged = sm.logits(pod, snap, nodes)
    assert sm.embed_count == 1
    assert aged.shape == (len(nodes),)
    snap.telemetry_version += 1
    sm.logits(pod, snap, nodes)
    assert sm.embed_count == 2
    other = snap.copy()  # new column objects (another snapshot), same version: recompute
    sm.logits(pod, other, nodes)
    assert sm.embed_count == 3
    np.testing.assert_allclose(
        sm.logits(pod, other, nodes), _reference(model, pod, other, nodes), atol=1e-5, rtol=0
    )


def test_age_only_change_keeps_head_features_current(model: DSANNet) -> None:
    """With ages moved but embeddings kept, the result equals a forward whose embeddings saw
    the old ages and whose per-pod features see the new ones."""
    snap = _snap()
    sm = ServingModel(model)
    pod = PODS[1]
    nodes = feasible_nodes(pod, snap)
    sm.logits(pod, snap, nodes)
    emb = sm.embeddings.emb.clone()
    _arr(snap.telemetry_age_s)[:] = 4000.0  # clipped to the maximum age feature
    got = sm.logits(pod, snap, nodes)
    x, _ = featurize(pod, snap, nodes)
    with torch.inference_mode():
        want, _ = model.score(
            torch.from_numpy(x), emb[torch.from_numpy(nodes)],
            torch.ones(len(nodes), dtype=torch.bool), torch.zeros(len(nodes), dtype=torch.long), 1,
        )
    np.testing.assert_allclose(got, want.double().numpy(), atol=1e-5, rtol=0)


def test_scorer_reports_version_and_reads_telemetry(model: DSANNet) -> None:
    bare = DSANScorer(ServingModel(model))
    assert bare.uses_telemetry is True
    assert bare.version == f"untrained+{schema_hash()}"
    shipped = ServingModel(model, manifest={"version": "dsan-1-42"})
    assert DSANScorer(shipped).version == f"dsan-1-42+{schema_hash()}"


def test_snapshot_copy_keeps_telemetry_version() -> None:
    snap = _snap(8)
    snap.telemetry_version = 7
    assert snap.copy().telemetry_version == 7


def test_sidecar_cache_bumps_telemetry_version_for_telemetry_and_nodes_not_pods() -> None:
    """The contract the embedding cache relies on, on the sidecar's real cache."""
    from datetime import UTC, datetime, timedelta

    from sidecar import kubeobjects as ko
    from sidecar.cache import GraphCache
    from sidecar.config import SidecarConfig

    cache = GraphCache(SidecarConfig(http_port=0, grpc_port=0))
    for nd in ko.cluster(4):
        cache.upsert_node(nd)
    name = next(nd["metadata"]["name"] for nd in ko.cluster(4)
                if nd["status"]["allocatable"].get("nvidia.com/gpu"))
    v0 = cache.snapshot().snap.telemetry_version
    cache.upsert_pod(ko.pod("p", cpu="2", node_name=name, phase="Running"))
    cache.assume("uid-q", PodSpec("q", 1000, 1024), name)
    assert cache.snapshot().snap.telemetry_version == v0  # allocations: embeddings stay
    t0 = datetime.now(UTC) - timedelta(seconds=30)
    cache.upsert_telemetry(ko.telemetry(name, util=[[50.0, 60.0]], sampled_at=t0))
    v1 = cache.snapshot().snap.telemetry_version
    assert v1 > v0
    relabelled = ko.node(name, cpu="64", memory="256Gi", gpus=8, model="A100", rack="r9")
    cache.upsert_node(relabelled)  # topology changed: recompute
    assert cache.snapshot().snap.telemetry_version > v1


def test_min_refresh_s_bounds_how_often_telemetry_changes_re_embed(model: DSANNet) -> None:
    snap = _snap()
    now = [100.0]
    sm = ServingModel(model, min_refresh_s=1.0, clock=lambda: now[0])
    pod = PODS[0]
    nodes = feasible_nodes(pod, snap)
    sm.logits(pod, snap, nodes)
    for _ in range(5):  # a burst of telemetry changes inside one interval: no re-embedding
        _arr(snap.telemetry)[3, -1] += 0.01
        snap.telemetry_version += 1
        now[0] += 0.1
        sm.logits(pod, snap, nodes)
    assert sm.embed_count == 1
    now[0] += 0.6  # the interval has passed: the next request catches up, exactly
    got = sm.logits(pod, snap, nodes)
    assert sm.embed_count == 2
    np.testing.assert_allclose(got, _reference(model, pod, snap, nodes), atol=1e-5, rtol=0)
    # New column objects (a node set change) and new weights never wait.
    other = snap.copy()
    sm.logits(pod, other, nodes)
    assert sm.embed_count == 3
    with torch.no_grad():
        next(model.parameters()).add_(0.01)
    sm.logits(pod, other, nodes)
    assert sm.embed_count == 4


def test_telemetry_refresh_keeps_class_rows_and_equals_a_cleared_head(model: DSANNet) -> None:
    """After a telemetry change the head keeps each class's rows (re-deriving only their
    attention term and the moved nodes' rows): the same logits as a head that starts over,
    for a fraction of the rows featurized."""
    snap = _snap(80)
    kept, fresh = ServingModel(model), ServingModel(model)
    rng = np.random.default_rng(1)
    for step in range(30):
        pod = PODS[step % len(PODS)]
        nodes = feasible_nodes(pod, snap)
        got = kept.logits(pod, snap, nodes)
        assert fresh.head is not None
        fresh.head.clear()
        np.testing.assert_allclose(got, fresh.logits(pod, snap, nodes), atol=1e-5, rtol=0)
        if step % 5 == 4:
            best = int(nodes[int(np.argmax(got))])
            allocate(snap, pod, best, fgd_select_gpus(pod, snap, best, default_workload()))
        if step % 3 == 2:
            rows = rng.choice(len(snap), 2, replace=False)
            _arr(snap.telemetry)[rows, -1] = rng.random((2, 5))
            _arr(snap.telemetry_age_s)[:] += 3.0
            snap.telemetry_version += 1
    assert kept.embeddings.full_refreshes == 1 and kept.embeddings.rows_recomputed == 18
    assert kept.head is not None and fresh.head is not None
    assert kept.head.rows_computed * 4 < fresh.head.rows_computed
