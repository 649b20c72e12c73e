"""The engine on tiny scenarios whose every number is worked out by hand (see conftest)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from scenario_fixtures import close, drive, first_node, last_node, tiny_config, train_pod

from dsan.core.snapshot import PodSpec
from dsan.policies.base import Scorer
from dsan.sim.scenario.engine import Decision, Engine
from dsan.sim.scenario.workload import BATCH, BE, TRAIN, WEB, WorkloadBuilder


def test_single_training_job_every_metric(cfg, builder) -> None:
    job = builder.job(TRAIN, 0.0, [100.0], stage_par=[0])
    builder.pod(job, train_pod("t0"), 0.6, 0.9, False)
    eng = Engine(cfg, 0, workload=builder.build())
    out = drive(eng)
    # bind at 0 on node 0, pull 200 MiB at 200 MiB/s = 1 s, start 2 s: running at 3 s;
    # 100 s of work at speed 1: done at 103 s.
    assert out["p99_task_latency_s"] == pytest.approx(3.0)
    assert out["jct_s"] == pytest.approx(103.0)
    assert out["queueing_events"] == 0 and out["mean_wait_s"] == 0.0
    assert out["sla_violation_pct"] == 0.0 and out["sla_by_kind"]["training"]["items"] == 1
    # node 0 billed until 103 + 600 (grace); node 1 and node 2 empty from 0: billed 600 s.
    on0, on_other = 703.0, 600.0
    assert out["cost"] == pytest.approx((4 * on0 + 4 * on_other + 1 * on_other) / 3600)
    gpu = 1000 * 103 / (4000 * on0 + 4000 * on_other)
    cpu = 8000 * 103 / (64000 * (on0 + on_other) + 16000 * on_other)
    mem = 32768 * 103 / (262144 * (on0 + on_other) + 65536 * on_other)
    assert out["gpu_util_pct"] == pytest.approx(100 * gpu)
    assert out["cpu_util_pct"] == pytest.approx(100 * cpu)
    assert out["mem_util_pct"] == pytest.approx(100 * mem)
    assert out["utilization_pct"] == pytest.approx(100 * (gpu + cpu + mem) / 3)


def test_telemetry_history_is_sampled_every_10_s(cfg, builder) -> None:
    a = builder.job(TRAIN, 0.0, [100.0], stage_par=[0])
    builder.pod(a, train_pod("a"), 0.6, 0.9, False)
    b = builder.job(TRAIN, 50.0, [10.0], stage_par=[0])
    builder.pod(b, train_pod("b"), 0.6, 0.9, False)
    eng = Engine(cfg, 0, workload=builder.build())
    seen: list[Decision] = []
    gen = eng.decisions()
    d = next(gen)
    d = gen.send(first_node(d))
    assert d.time_s == 50.0 and d.pod.name == "b"
    tel = d.snapshot.telemetry
    assert tel is not None and tel.shape == (3, 12, 5)
    running = [8000 * 0.6 / 64000, 32768 / 262144, 0.9 * 1000 / 4000, 0.25, 0.25 + 0.75 * 0.225]
    bound = [0.0, 32768 / 262144, 0.0, 0.25, 0.25]
    # samples at t = 0 (bound, not yet running) and 10..50 (running); older slots still empty
    np.testing.assert_allclose(tel[0, -5:], np.tile(running, (5, 1)), rtol=1e-6)
    np.testing.assert_allclose(tel[0, -6], bound, rtol=1e-6)
    assert not tel[0, :-6].any() and not tel[2].any()
    seen.append(d)


def test_gang_is_all_or_nothing_and_queueing(cfg, builder) -> None:
    a = builder.job(TRAIN, 0.0, [100.0], stage_par=[0])
    for i in range(7):
        builder.pod(a, train_pod(f"a{i}", gang=7), 0.6, 0.9, False)
    b = builder.job(TRAIN, 10.0, [100.0], stage_par=[0])
    for i in range(2):
        builder.pod(b, train_pod(f"b{i}", gang=2), 0.6, 0.9, False)
    c = builder.job(TRAIN, 50.0, [10.0], stage_par=[0])
    builder.pod(c, train_pod("c"), 0.6, 0.9, False)
    eng = Engine(cfg, 0, workload=builder.build())
    seen: list[Decision] = []
    out = drive(eng, seen=seen)
    # B's first pod got a decision at t=10, its second fitted nowhere: rolled back, so at
    # C's decision (t=50) exactly one GPU (1000 milli) is still free.
    at_c = next(d for d in seen if d.pod.name == "c")
    assert at_c.time_s == 50.0
    # (the snapshot is live: check through the bookkeeping instead of the final state)
    a_done = 3.0 + 100.0 / 0.95  # A spans nodes 0 and 1 of one NVLink domain: speed 0.95
    b_pods = b.pods
    assert all(close(eng.pod_bind[p], a_done) for p in b_pods)
    assert eng.pod_bind[c.pods[0]] == 50.0
    assert out["jct_by_kind_s"]["training"] == pytest.approx(
        # A; B bound at a_done, image cached: running 2 s later, 100 s on one node; C: 50->62
        (a_done + (a_done + 2.0 + 100.0 - 10.0) + 12.0) / 3
    )
    # B's two pods waited a_done - 10 > 30 s; nobody else waited.
    assert out["queueing_events"] == 2
    assert out["mean_wait_s"] == pytest.approx(2 * (a_done - 10.0) / 10)
    assert eng.snap.gpu_free.sum() == 8000  # everything released at the end


def test_gang_rollback_leaves_capacity(cfg, builder) -> None:
    a = builder.job(TRAIN, 0.0, [500.0], stage_par=[0])
    for i in range(7):
        builder.pod(a, train_pod(f"a{i}", gang=7), 0.6, 0.9, False)
    b = builder.job(TRAIN, 10.0, [100.0], stage_par=[0])
    for i in range(2):
        builder.pod(b, train_pod(f"b{i}", gang=2), 0.6, 0.9, False)
    c = builder.job(TRAIN, 50.0, [10.0], stage_par=[0])
    builder.pod(c, train_pod("c"), 0.6, 0.9, False)
    eng = Engine(cfg, 0, workload=builder.build())
    free: list[tuple[str, float, int]] = []

    def spy(d: Decision) -> int:
        free.append((d.pod.name, d.time_s, int(d.snapshot.gpu_free.sum())))
        return first_node(d)

    drive(eng, policy=spy)
    # b0 was offered the last GPU at t=10; b1 then fitted nowhere, so b0 was rolled back:
    # at t=50 that GPU is free again for c.
    assert ("b0", 10.0, 1000) in free
    assert ("c", 50.0, 1000) in free
    assert eng.pod_bind[c.pods[0]] == 50.0
    assert (eng.pod_bind[b.pods] >= 503.0).all()  # B starts only after A (3 + 500/0.95)


def test_batch_stages_parallelism_and_deadline(cfg, builder) -> None:
    job = builder.job(BATCH, 0.0, [200.0, 100.0], stage_par=[2, 1], deadline=200.0)
    builder.pod(
        job, PodSpec("drv", 1000, 2048, priority=400, task_type=BATCH, image=0), 0.5, 0.0, False
    )
    for i in range(2):
        builder.pod(
            job,
            PodSpec(f"ex{i}", 2000, 4096, priority=100, task_type=BATCH, image=0),
            0.9,
            0.0,
            True,
        )
    eng = Engine(cfg, 0, workload=builder.build())
    out = drive(eng)
    # driver running at 3 s; executors submitted then, image cached: running at 5 s.
    # stage 1: 200 work at 2 executors -> 100 s (105); stage 2: cap 1 -> 100 s (205).
    assert out["jct_s"] == pytest.approx(205.0)
    assert out["sla_by_kind"]["batch"] == {"violations": 1, "items": 1, "pct": 100.0}
    assert out["p99_task_latency_s"] == pytest.approx(3.0)


def _web_with_hog(hog: bool) -> dict[str, Any]:
    cfg = tiny_config(web={"services": 1, "images": [1], "trough_rho": 0.7, "peak_rho": 0.7})
    b = WorkloadBuilder(cfg)
    w = b.job(WEB, 0.0, [float("inf")], stage_par=[0], service=0)
    b.pod(w, PodSpec("web-0", 2000, 4096, priority=1000, task_type=WEB, image=1), 1.0, 0.0, False)
    if hog:
        h = b.job(BE, 0.0, [5000.0], stage_par=[0])
        b.pod(h, PodSpec("hog", 14000, 8192, priority=0, task_type=BE, image=1), 1.2, 0.0, True)
    return drive(Engine(cfg, 0, workload=b.build()), policy=last_node)


def test_web_slo_windows_and_contention() -> None:
    # One replica at lambda = 70/s, mu = 100/s: p99 = ln(100)/30 = 0.15 s < 0.25 s SLO.
    calm = _web_with_hog(False)
    assert calm["sla_by_kind"]["web"] == {"violations": 0, "items": 3, "pct": 0.0}
    # A hog using 16.8 cores next to it on the 16-core node: D = (16.8+2)/16 = 1.175,
    # speed = (1/1.175)/(1+0.375) = 0.62, so mu*speed = 62 < 70: every window misses.
    hot = _web_with_hog(True)
    assert hot["sla_by_kind"]["web"] == {"violations": 3, "items": 3, "pct": 100.0}


def test_same_seed_same_numbers_other_seed_differs() -> None:
    from dsan.sim.scenario.config import load
    from dsan.sim.scenario.runner import run_policy

    cfg = load("seed-table1")

    def clean(r: dict[str, object]) -> dict[str, object]:
        return {k: v for k, v in r.items() if k not in ("runtime_s",)}

    a = clean(run_policy(cfg, "k8s-default", 5, hours=0.5))
    b = clean(run_policy(cfg, "k8s-default", 5, hours=0.5))
    c = clean(run_policy(cfg, "k8s-default", 6, hours=0.5))
    assert a == b
    assert a != c


def test_bad_choice_is_rejected(cfg, builder) -> None:
    job = builder.job(TRAIN, 0.0, [100.0], stage_par=[0])
    builder.pod(job, train_pod("t0"), 0.6, 0.9, False)
    gen = Engine(cfg, 0, workload=builder.build()).decisions()
    next(gen)
    with pytest.raises(ValueError, match="not a feasible node"):
        gen.send(2)  # the CPU node has no GPU


def test_burst_summary_is_per_job(cfg, builder) -> None:
    a = builder.job(TRAIN, 0.0, [100.0], stage_par=[0])
    for i in range(7):
        builder.pod(a, train_pod(f"a{i}", gang=7), 0.6, 0.9, False)
    b = builder.job(TRAIN, 10.0, [100.0], stage_par=[0], burst=True)
    for i in range(2):
        builder.pod(b, train_pod(f"b{i}", gang=2), 0.6, 0.9, False)
    c = builder.job(TRAIN, 50.0, [10.0], stage_par=[0], burst=True)
    builder.pod(c, train_pod("c"), 0.6, 0.9, False)
    out = drive(Engine(cfg, 0, workload=builder.build()))
    a_done = 3.0 + 100.0 / 0.95
    # B (2 GPUs) waits for A: a_done - 10 s; C takes the last free GPU at once.
    assert out["burst"] == pytest.approx(
        {
            "jobs": 2,
            "jobs_started": 2,
            "queued_jobs": 1,
            "gpus_requested": 3,
            "mean_job_wait_s": (a_done - 10.0) / 2,
        }
    )
    assert out["queueing_by_kind"]["burst"]["events"] == 2  # B's two pods


def test_p99_per_task_type(cfg, builder) -> None:
    # A training pod (image 0: 1 s pull) and a web replica (image 1: 2 s pull) on separate
    # nodes: latencies 3 s and 4 s, so the overall P99 is the web one and each type has its own.
    t = builder.job(TRAIN, 0.0, [100.0], stage_par=[0])
    builder.pod(t, train_pod("t0"), 0.6, 0.9, False)
    w = builder.job(WEB, 0.0, [float("inf")], stage_par=[0], service=0)
    web = PodSpec(name="w0", cpu_milli=1000, mem_mib=1024, priority=1000, task_type=WEB, image=1)
    builder.pod(w, web, 1.0, 0.0, False)
    out = drive(Engine(cfg, 0, workload=builder.build()), last_node)
    assert out["p99_task_latency_s"] == pytest.approx(4.0)
    by = out["p99_by_kind_s"]
    assert by["training"] == pytest.approx(3.0) and by["web"] == pytest.approx(4.0)
    assert by["batch"] == 0.0 and by["besteffort"] == 0.0
    # The tail (latency >= P99 = 4 s) is the web replica, slowed only by its image pull.
    assert out["p99_tail_causes"] == {"queued": 0, "boot": 0, "pull": 1, "start": 0}



class _Flat(Scorer):
    """Every candidate ties; records each scored decision's candidates with the node bound."""

    name = "flat"

    def __init__(self) -> None:
        self.scored: list[tuple[np.ndarray, int]] = []
        self._pending: np.ndarray | None = None

    def score(self, pod: PodSpec, snap: Any, nodes: np.ndarray) -> np.ndarray:
        self._pending = np.array(nodes)
        return np.zeros(len(nodes))

    def select_gpus(self, pod: PodSpec, snap: Any, node: int) -> tuple[int, ...]:
        from dsan.core.filtering import best_fit_gpus

        return best_fit_gpus(pod, snap, node)

    def on_bind(self, pod: PodSpec, snap: Any, node: int, gpus: tuple[int, ...]) -> None:
        if self._pending is not None:  # a single feasible node binds unscored
            self.scored.append((self._pending, node))
            self._pending = None


@pytest.mark.parametrize("tie_break", ["name", "random"])
def test_tie_break_name_binds_the_lowest_named_candidate(tie_break: str) -> None:
    """``tie_break: name`` evaluates a policy as the sidecar serves it (sidecar/tiebreak.py):
    of tied candidates, the lowest node name wins; ``random`` (the default) does not."""
    from dsan.sim.scenario.config import load
    from dsan.sim.scenario.runner import run_policy

    flat, names = _Flat(), []

    def factory(name: str, seed: int, wl: Any, engine: Engine) -> _Flat:
        names.extend(engine.snap.names)
        return flat

    run_policy(load("seed-table1", [f"tie_break={tie_break}"]), "flat", 5, hours=0.25,
               factory=factory)
    order = np.array(names)
    assert len(flat.scored) > 50
    hits = sum(node == c[np.argmin(order[c])] for c, node in flat.scored)
    if tie_break == "name":
        assert hits == len(flat.scored)
    else:
        assert hits < len(flat.scored) / 2
