from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from dsan.core.snapshot import TELEMETRY_CHANNELS
from sidecar.cache import GraphCache
from sidecar.config import SidecarConfig
from sidecar.podspec import podspec_from_pod
from tests.support import kubeobjects as ko


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def make(n: int = 0, **cfg: object) -> tuple[GraphCache, Clock]:
    clock = Clock()
    cache = GraphCache(SidecarConfig(**cfg), clock=clock, wall=clock)  # type: ignore[arg-type]
    if n:
        cache.replace_nodes([ko.node(f"n{i}", cpu="8", memory="16Gi", gpus=4, model="A100")
                             for i in range(n)])
    return cache, clock


def row(cache: GraphCache, name: str) -> int:
    return cache.snapshot().index[name]


def test_nodes_become_columns_with_allocatable_units() -> None:
    cache, _ = make()
    cache.upsert_node(ko.node("a", cpu="4", memory="8Gi", gpus=2, model="V100", zone="z1",
                              rack="r1", nvlink="d1"))
    cache.upsert_node(ko.node("b", cpu="2500m", memory="512Mi"))
    snap = cache.snapshot().snap
    assert snap.names == ["a", "b"]
    assert snap.cpu_cap.tolist() == [4000, 2500] and snap.mem_cap.tolist() == [8192, 512]
    assert snap.gpu_count.tolist() == [2, 0] and snap.gpu_models == ["V100"]
    assert snap.gpu_model.tolist() == [0, -1]
    assert snap.gpu_free[0].tolist() == [1000, 1000, 0, 0, 0, 0, 0, 0]
    assert snap.zone is not None and snap.zone.tolist() == [0, -1]


def test_delete_node_swap_removes_and_keeps_rows_consistent() -> None:
    cache, _ = make(4)
    cache.upsert_pod(ko.pod("p", cpu="3", gpus=1, node_name="n3"))
    cache.delete_node("n1")
    pub = cache.snapshot()
    assert sorted(pub.index) == ["n0", "n2", "n3"]
    i = pub.index["n3"]
    assert pub.snap.names[i] == "n3" and pub.snap.cpu_used[i] == 3000
    assert pub.snap.gpu_free[i, :4].sum() == 3000
    cache.delete_node("missing")  # no error


def test_pods_are_charged_on_bind_and_released_on_finish_or_delete() -> None:
    cache, _ = make(2)
    pending = ko.pod("p", cpu="2", memory="1Gi", gpus=2)
    cache.upsert_pod(pending)
    assert cache.snapshot().snap.cpu_used.sum() == 0  # not bound yet
    bound = ko.pod("p", cpu="2", memory="1Gi", gpus=2, node_name="n1", phase="Running")
    cache.upsert_pod(bound)
    snap = cache.snapshot().snap
    i = row(cache, "n1")
    assert snap.cpu_used[i] == 2000 and snap.mem_used[i] == 1024
    assert sorted(snap.gpu_free[i, :4].tolist()) == [0, 0, 1000, 1000]
    assert snap.pod_count is not None and snap.pod_count[i] == 1
    cache.upsert_pod({**bound, "status": {"phase": "Succeeded"}})
    snap = cache.snapshot().snap
    assert snap.cpu_used[i] == 0 and snap.gpu_free[i, :4].tolist() == [1000] * 4
    cache.upsert_pod(bound)
    cache.delete_pod(bound)
    assert cache.snapshot().snap.cpu_used.sum() == 0


def test_sharing_pods_best_fit_the_fullest_gpu() -> None:
    cache, _ = make(1)
    share = {"dsan.io/gpu-milli": "600"}
    cache.upsert_pod(ko.pod("a", gpus=1, annotations=share, node_name="n0"))
    cache.upsert_pod(ko.pod("b", gpus=1, annotations={"dsan.io/gpu-milli": "300"},
                            node_name="n0"))
    # b goes onto a's GPU (400 free, the least that fits), not a fresh one.
    assert cache.snapshot().snap.gpu_free[0, :4].tolist() == [100, 1000, 1000, 1000]


def test_pod_seen_before_its_node_is_charged_when_the_node_arrives() -> None:
    cache, _ = make()
    cache.upsert_pod(ko.pod("p", cpu="1", node_name="late"))
    cache.upsert_node(ko.node("late", cpu="4"))
    assert cache.snapshot().snap.cpu_used.tolist() == [1000]
    cache.upsert_node(ko.node("late", cpu="8", gpus=2, model="T4"))  # update keeps the charge
    snap = cache.snapshot().snap
    assert snap.cpu_used.tolist() == [1000] and snap.cpu_cap.tolist() == [8000]


def test_overcommitted_gpus_are_clamped() -> None:
    cache, _ = make(1)
    for k in range(5):  # 5 whole-GPU pods on a 4-GPU node
        cache.upsert_pod(ko.pod(f"p{k}", gpus=1, node_name="n0"))
    assert cache.snapshot().snap.gpu_free[0].min() == 0


def test_assumed_pod_is_charged_then_replaced_by_the_real_binding() -> None:
    cache, _ = make(2)
    pod = ko.pod("p", cpu="4", gpus=1)
    spec = podspec_from_pod(pod, cache.models)
    cache.assume("uid-p", spec, "n0")
    snap = cache.snapshot().snap
    assert snap.cpu_used[row(cache, "n0")] == 4000 and cache.assumed_count == 1
    cache.upsert_pod(ko.pod("p", cpu="4", gpus=1, node_name="n1"))  # landed elsewhere
    snap = cache.snapshot().snap
    assert snap.cpu_used[row(cache, "n0")] == 0 and snap.cpu_used[row(cache, "n1")] == 4000
    assert cache.assumed_count == 0


def test_assumptions_charge_the_table_after_it_grows() -> None:
    """The table's columns are replaced when it grows past its capacity (16 rows at first);
    an assumption, patched into the published snapshot, lands in the new ones."""
    cache, _ = make(2)
    spec = podspec_from_pod(ko.pod("p", cpu="4", gpus=2), cache.models)
    cache.snapshot()
    cache.assume("uid-p", spec, "n1", patch_published=True)
    cache.replace_nodes([ko.node(f"n{i}", cpu="8", memory="16Gi", gpus=4, model="A100")
                         for i in range(40)])
    cache.snapshot()
    cache.assume("uid-q", spec, "n33", patch_published=True)
    snap = cache.snapshot().snap
    assert snap.cpu_used[row(cache, "n1")] == 4000 and snap.cpu_used[row(cache, "n33")] == 4000
    assert snap.gpu_free[row(cache, "n33")].tolist()[:4] == [0, 0, 1000, 1000]
    assert snap.pod_count is not None and snap.pod_count[row(cache, "n33")] == 1


def test_assumption_expires_after_ttl() -> None:
    cache, clock = make(1, assume_ttl_s=5.0)
    spec = podspec_from_pod(ko.pod("p", cpu="4"), cache.models)
    cache.assume("k", spec, "n0")
    clock.t += 4.0
    assert cache.snapshot().snap.cpu_used[0] == 4000
    clock.t += 2.0
    assert cache.snapshot().snap.cpu_used[0] == 0
    assert cache.assumptions_ended["expired"] == 1 and cache.assumed_count == 0


def test_assumptions_past_assume_max_are_uncharged_oldest_first() -> None:
    cache, _ = make(1, assume_max=2)
    spec = podspec_from_pod(ko.pod("p", cpu="1"), cache.models)
    for key in ("a", "b", "c"):
        cache.assume(key, spec, "n0")
    assert cache.assumed_count == 2
    assert cache.snapshot().snap.cpu_used[0] == 2000  # "a" is no longer charged


def test_a_renewed_assumption_expires_ttl_after_its_last_score() -> None:
    cache, clock = make(1, assume_ttl_s=5.0)
    spec = podspec_from_pod(ko.pod("p", cpu="1"), cache.models)
    cache.assume("x", spec, "n0")
    clock.t += 2
    cache.assume("y", spec, "n0")
    clock.t += 2
    cache.assume("x", spec, "n0")  # renewed: now expires after y
    clock.t += 1.5  # x was first assumed 5.5 s ago, y 3.5 s ago
    assert cache.snapshot().snap.cpu_used[0] == 2000
    clock.t += 1.5  # y: 5 s, its deadline has come
    assert cache.snapshot().snap.cpu_used[0] == 1000 and cache.assumed_count == 1
    clock.t += 2
    assert cache.snapshot().snap.cpu_used[0] == 0
    assert cache.assumptions_ended["expired"] == 2


def test_bad_objects_are_counted_not_raised() -> None:
    cache, _ = make(1)
    cache.upsert_node({"metadata": {"name": "x"}, "status": {"allocatable": {"cpu": "lots"}}})
    cache.upsert_node({"nope": 1})
    # finite as a quantity, past float64 as a number: refused, not stored as inf
    for cpu, mem in (("1e400", "1Gi"), ("4", "1e400Ki")):
        cache.upsert_node({"metadata": {"name": "y"},
                           "status": {"allocatable": {"cpu": cpu, "memory": mem}}})
    cache.upsert_pod({"metadata": {"uid": "u"}, "spec": {"nodeName": "n0", "containers": 5}})
    cache.upsert_telemetry({"kind": "GPUTelemetry", "metadata": {"name": "n0"}})
    assert cache.bad_objects == {"node": 4, "pod": 1, "telemetry": 1}
    assert len(cache) == 1


def test_snapshot_is_reused_until_something_changes_and_refreshed_in_place() -> None:
    cache, clock = make(3)
    a = cache.snapshot()
    assert cache.snapshot() is a
    cache.upsert_pod(ko.pod("p", cpu="1", node_name="n0"))
    b = cache.snapshot()
    assert b is not a and b.version > a.version
    assert b.snap is a.snap  # same object, refreshed: FGD's per-snapshot cache stays valid
    assert b.snap.cpu_used.sum() == 1000
    cache.upsert_node(ko.node("n9"))
    c = cache.snapshot()
    assert c.snap is not b.snap and len(c.snap) == 4  # node set changed: a new snapshot
    clock.t += 10
    assert cache.snapshot() is not c  # too old: republished


def test_telemetry_ring_appends_only_new_windows_oldest_first() -> None:
    cache, clock = make(1, telemetry_window=4)
    t0 = datetime.fromtimestamp(clock.t, UTC)
    cache.upsert_telemetry(ko.telemetry("n0", util=[[10, 20, 30]], sampled_at=t0,
                                        power_w=[[100, 200, 400]]))
    snap = cache.snapshot().snap
    gpu = TELEMETRY_CHANNELS.index("gpu_util")
    assert snap.telemetry is not None
    assert np.allclose(snap.telemetry[0, :, gpu], [0, 0.1, 0.2, 0.3])
    power = TELEMETRY_CHANNELS.index("gpu_power_frac")
    assert np.allclose(snap.telemetry[0, -1, power], 1.0)  # 400 W / 400 W reference
    # 20 s later the agent's series has slid by two windows: append only those two.
    later = t0 + timedelta(seconds=20)
    cache.upsert_telemetry(ko.telemetry("n0", util=[[30, 40, 50]], sampled_at=later))
    tele = cache.snapshot().snap.telemetry
    assert tele is not None and np.allclose(tele[0, :, gpu], [0.2, 0.3, 0.4, 0.5])
    # A duplicate delivery adds nothing.
    cache.upsert_telemetry(ko.telemetry("n0", util=[[30, 40, 50]], sampled_at=later))
    tele = cache.snapshot().snap.telemetry
    assert tele is not None and np.allclose(tele[0, :, gpu], [0.2, 0.3, 0.4, 0.5])
    assert cache.snapshot().telemetry_time[0] == pytest.approx(later.timestamp())


def test_telemetry_before_node_and_deletion_make_it_stale() -> None:
    cache, clock = make()
    cache.upsert_telemetry(ko.telemetry("g", util=[[50.0]],
                                        sampled_at=datetime.fromtimestamp(clock.t, UTC)))
    cache.upsert_node(ko.node("g", gpus=1, model="A100"))
    pub = cache.snapshot()
    assert pub.snap.telemetry_age_s is not None and pub.snap.telemetry_age_s[0] == 0
    cache.delete_telemetry({"metadata": {"name": "g"}})
    assert np.isinf(cache.snapshot().telemetry_time[0])


def test_topology_labels_become_cluster_wide_ids() -> None:
    cache, _ = make()
    for name, rack, nv in (("a", "r1", "d1"), ("b", "r1", "d1"), ("c", "r1", None),
                           ("d", "r2", None)):
        cache.upsert_node(ko.node(name, rack=rack, nvlink=nv))
    snap = cache.snapshot().snap
    assert snap.rack.tolist() == [0, 0, 0, 1] and snap.nvlink.tolist() == [0, 0, -1, -1]


def test_ragged_telemetry_is_counted_not_raised() -> None:
    cache, clock = make(1)
    obj = ko.telemetry("n0", util=[[10.0, 20.0], [30.0, 40.0]],
                       sampled_at=datetime.fromtimestamp(clock.t, UTC))
    for key in list(obj["status"]["gpus"][1]["windows"]):
        obj["status"]["gpus"][1]["windows"][key] = [1.0]  # GPU 1 shorter than GPU 0
    cache.upsert_telemetry(obj)
    assert cache.bad_objects["telemetry"] == 1


def test_unchanged_node_updates_are_free_and_capacity_changes_renew_the_snapshot() -> None:
    cache, _ = make(2)
    a = cache.snapshot()
    cache.upsert_node(ko.node("n0", cpu="8", memory="16Gi", gpus=4, model="A100"))  # heartbeat
    assert cache.snapshot() is a
    cache.upsert_node(ko.node("n0", cpu="8", memory="16Gi", gpus=4, model="A100",
                              labels={"x": "y"}))  # a label we do not read... still same row
    assert cache.snapshot() is a
    cache.upsert_node(ko.node("n0", cpu="16", memory="16Gi", gpus=4, model="A100"))
    b = cache.snapshot()
    assert b.snap is not a.snap and b.snap.cpu_cap[b.index["n0"]] == 16000
    # A relabelled GPU model changes which pods fit, which the per-node caches cannot see
    # in the used columns: it renews the snapshot object as a capacity change does.
    cache.upsert_node(ko.node("n0", cpu="16", memory="16Gi", gpus=4, model="H100"))
    c = cache.snapshot()
    assert c.snap is not b.snap
    assert c.snap.gpu_models[c.snap.gpu_model[c.index["n0"]]] == "H100"


def test_assumption_under_namespace_name_is_dropped_when_the_pod_binds() -> None:
    cache, _ = make(2)
    spec = podspec_from_pod(ko.pod("p", cpu="4", namespace="ns"), cache.models)
    cache.assume("ns/p", spec, "n0")  # a gRPC client without a UID
    cache.upsert_pod(ko.pod("p", cpu="4", namespace="ns", node_name="n1"))
    snap = cache.snapshot().snap
    assert cache.assumed_count == 0 and snap.cpu_used.sum() == 4000


def test_an_assumption_is_patched_into_the_published_snapshot() -> None:
    """Assuming under the scoring lock copies the one or two rows it charged into the current
    snapshot: the next request reads the same object, current, without an O(n) republish."""
    cache, _ = make(4)
    b = cache.snapshot()
    with cache.scoring_lock:
        spec = podspec_from_pod(ko.pod("q", cpu="2"), cache.models)
        cache.assume("q", spec, "n0", patch_published=True)
    c = cache.snapshot()
    assert c.snap is b.snap and c.version > b.version
    assert c.snap.cpu_used[row(cache, "n0")] == 2000
    with cache.scoring_lock:  # moved: n0 uncharged, n2 charged, both copied
        cache.assume("q", spec, "n2", patch_published=True)
    d = cache.snapshot()
    assert d.snap is b.snap
    assert d.snap.cpu_used[row(cache, "n0")] == 0 and d.snap.cpu_used[row(cache, "n2")] == 2000
    np.testing.assert_array_equal(d.snap.cpu_used, cache._table.cpu_used[:4])


def test_informer_churn_without_assumptions_keeps_the_touched_rows_bounded() -> None:
    """Only an assumption clears the rows an assumption must patch; a sidecar whose scheduler
    rarely assumes still hears every bind and delete, so the record must not grow per event."""
    cache, _ = make(3)
    for k in range(500):
        pod = ko.pod(f"p{k}", cpu="1", node_name=f"n{k % 3}", phase="Running")
        cache.upsert_pod(pod)
        cache.delete_pod(pod)
    assert len(cache._alloc.touched) <= 3


def test_telemetry_ages_move_on_a_coarse_clock_and_never_go_negative() -> None:
    cache, clock = make(2, snapshot_max_age_s=1.0)
    clock.t = 1000.3
    cache.upsert_telemetry(ko.telemetry("n0", util=[[50.0]],
                                        sampled_at=datetime.fromtimestamp(1000.2, UTC)))
    ages = cache.snapshot().snap.telemetry_age_s
    assert ages is not None and ages[0] == 0.0 and np.isinf(ages[1])  # sampled after 1000.0
    clock.t = 1001.5
    cache.upsert_node(ko.node("n1", cpu="16", gpus=4, model="A100"))  # an informer event
    first = cache.snapshot().snap.telemetry_age_s
    assert first is not None and first[0] == pytest.approx(0.8)  # 1001.0 - 1000.2
    clock.t = 1001.9
    cache.upsert_pod(ko.pod("p", cpu="1", node_name="n1", phase="Running"))
    again = cache.snapshot().snap.telemetry_age_s
    assert again is not None and again[0] == pytest.approx(0.8)  # same grid step: unchanged
    clock.t = 1003.05
    later = cache.snapshot().snap.telemetry_age_s
    assert later is not None and later[0] == pytest.approx(2.8)


def test_only_pods_seen_pending_for_our_scheduler_may_be_assumed() -> None:
    cache, _ = make(1)
    ours, other = ko.pod("a", namespace="ns"), ko.pod("b", namespace="ns")
    other["spec"]["schedulerName"] = "default-scheduler"
    for p in (ours, other):
        cache.upsert_pod(p)
    assert cache.may_assume("uid-a") and cache.may_assume("ns/a")  # UID or namespace/name
    assert not cache.may_assume("uid-b") and not cache.may_assume("made-up")
    cache.upsert_pod(ko.pod("a", namespace="ns", node_name="n0"))  # bound: no longer pending
    assert not cache.may_assume("uid-a") and not cache.may_assume("ns/a")
    cache.upsert_pod(ko.pod("c"))
    cache.delete_pod(ko.pod("c"))
    assert not cache.may_assume("uid-c")
    cache.upsert_pod(ko.pod("d"))
    cache.replace_pods([ko.pod("e")])  # a relist is the whole truth
    assert not cache.may_assume("uid-d") and cache.may_assume("uid-e")


def test_on_pending_hears_each_pod_of_ours_once_when_first_seen_pending() -> None:
    cache, _ = make(1)
    heard: list[tuple[str, str]] = []
    cache.on_pending = lambda key, alias: heard.append((key, alias))
    other = ko.pod("b", namespace="ns")
    other["spec"]["schedulerName"] = "default-scheduler"
    for p in (ko.pod("a", namespace="ns"), ko.pod("a", namespace="ns"), other,
              ko.pod("c", namespace="ns", node_name="n0")):
        cache.upsert_pod(p)
    cache.replace_pods([ko.pod("a", namespace="ns"), ko.pod("d", namespace="ns")])
    assert heard == [("uid-a", "ns/a"), ("uid-d", "ns/d")]


def test_an_assumption_ends_at_the_first_informer_event_for_its_pod_and_is_counted() -> None:
    cache, clock = make(2, assume_ttl_s=5.0, assume_max=2)
    spec = podspec_from_pod(ko.pod("p", cpu="1"), cache.models)
    ended = cache.assumptions_ended
    cache.assume("uid-p", spec, "n0")
    cache.upsert_pod(ko.pod("p"))  # updated while still pending: scheduling was retried
    assert cache.assumed_count == 0 and ended["informer_event"] == 1
    cache.assume("uid-p", spec, "n0")
    cache.upsert_pod(ko.pod("p", cpu="1", node_name="n1"))
    assert ended["bound"] == 1 and cache.snapshot().snap.cpu_used.tolist() == [0, 1000]
    cache.assume("uid-q", spec, "n0")
    cache.delete_pod(ko.pod("q"))
    assert ended["deleted"] == 1
    for key in ("x", "y", "z"):  # assume_max=2: the oldest goes
        cache.assume(key, spec, "n0")
    assert ended["evicted"] == 1
    clock.t += 6
    cache.snapshot()
    assert ended["expired"] == 2 and cache.assumed_count == 0
    assert cache.snapshot().snap.cpu_used.tolist() == [0, 1000]


def test_a_telemetry_relist_makes_telemetry_whose_object_is_gone_stale() -> None:
    """A relist replaces the telemetry as it replaces nodes and pods: a GPUTelemetry deleted
    while the watch was down goes stale at once, as its DELETED event would have made it,
    and one held for a node not in the table yet is not applied when the node appears."""
    cache, clock = make(3)
    at = datetime.fromtimestamp(clock.t, UTC)
    cache.replace_telemetry([ko.telemetry(n, util=[[50.0]], sampled_at=at)
                             for n in ("n0", "n1", "late")])
    bad = {"kind": "GPUTelemetry", "metadata": {"name": "n1"}}  # no sampledAt: skipped
    cache.replace_telemetry([ko.telemetry("n2", util=[[50.0]], sampled_at=at), bad])
    tt = cache.snapshot().telemetry_time
    assert np.isinf(tt[row(cache, "n0")])
    assert np.isfinite(tt[row(cache, "n1")])  # malformed now: keeps its last good windows
    assert np.isfinite(tt[row(cache, "n2")])
    cache.upsert_node(ko.node("late", gpus=1, model="A100"))
    assert np.isinf(cache.snapshot().telemetry_time[row(cache, "late")])


def test_a_pods_relist_ends_the_assumption_of_a_pod_it_no_longer_shows() -> None:
    """A pod assumed, then deleted while the pods watch was down: the relist is the whole
    truth, so its assumption ends there rather than holding the node for assume_ttl_s."""
    cache, _ = make(1, assume_ttl_s=30.0)
    pod = ko.pod("p", cpu="4", namespace="ns")
    cache.upsert_pod(pod)
    cache.upsert_pod(ko.pod("q", cpu="4", namespace="ns"))
    spec = podspec_from_pod(pod, cache.models)
    cache.assume("uid-p", spec, "n0")
    cache.assume("ns/q", spec, "n0")  # a gRPC caller without a UID
    assert cache.snapshot().snap.cpu_used[0] == 8000
    cache.replace_pods([])
    assert cache.assumed_count == 0 and cache.snapshot().snap.cpu_used[0] == 0
    assert cache.assumptions_ended["deleted"] == 2


def test_a_pods_relist_keeps_the_assumption_of_a_pod_it_shows_unchanged() -> None:
    """A relist delivers a pod still pending exactly as the watch last showed it (same
    resourceVersion): nothing happened to it, so its assumption stands until it binds; a
    pod that did change while the watch was down (scheduling retried) ends it."""
    cache, _ = make(1)
    a, b = ko.pod("a", cpu="4"), ko.pod("b", cpu="2")
    a["metadata"]["resourceVersion"], b["metadata"]["resourceVersion"] = "5", "6"
    for p in (a, b):
        cache.upsert_pod(p)
        cache.assume(f"uid-{p['metadata']['name']}", podspec_from_pod(p, cache.models), "n0")
    b_retried = {**b, "metadata": {**b["metadata"], "resourceVersion": "9"}}
    cache.replace_pods([a, b_retried])
    assert cache.assumed_count == 1 and cache.snapshot().snap.cpu_used[0] == 4000
    assert cache.assumptions_ended["informer_event"] == 1
    cache.upsert_pod({**a, "metadata": {**a["metadata"], "resourceVersion": "12"}})
    assert cache.assumed_count == 0  # a watch event still ends it


def test_an_assumption_under_namespace_name_after_its_pod_bound_is_not_charged() -> None:
    """A gRPC caller without a UID assumes under namespace/name; when the bind was seen
    first (the deferred assumption settles after the reply), the pod is already charged
    under its UID and the assumption must not charge it a second time."""
    cache, _ = make(2)
    cache.upsert_pod(ko.pod("p", cpu="4", namespace="ns"))
    cache.upsert_pod(ko.pod("p", cpu="4", namespace="ns", node_name="n1"))
    spec = podspec_from_pod(ko.pod("p", cpu="4", namespace="ns"), cache.models)
    cache.assume("ns/p", spec, "n0")
    assert cache.assumed_count == 0 and cache.snapshot().snap.cpu_used.tolist() == [0, 4000]
    cache.delete_pod(ko.pod("p", namespace="ns", node_name="n1"))
    cache.assume("ns/p", spec, "n0")  # gone: the name is free again
    assert cache.assumed_count == 1 and cache._alloc.bound_names == {}


def test_a_bound_pod_resized_in_place_is_charged_its_new_requests() -> None:
    """In-place resize (the pods/resize subresource) changes a bound pod's requests on the
    same node: the charge follows, as kube-scheduler's NodeInfo does."""
    cache, _ = make(1)
    pod = ko.pod("p", cpu="2", memory="1Gi", gpus=1, node_name="n0", phase="Running")
    cache.upsert_pod(pod)
    resized = ko.pod("p", cpu="3", memory="2Gi", gpus=1, node_name="n0", phase="Running")
    cache.upsert_pod(resized)
    snap = cache.snapshot().snap
    assert snap.cpu_used[0] == 3000 and snap.mem_used[0] == 2048
    assert snap.gpu_free[0, :4].sum() == 3000
    assert snap.pod_count is not None and snap.pod_count[0] == 1
