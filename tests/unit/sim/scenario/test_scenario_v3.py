"""Scenario version 3 (always-on nodes, warm start, elastic backlog, measured utilisation,
job-level latency, reclamation cost, burst version 2) on tiny scenarios worked out by hand,
and version 2's outputs pinned to those of the tree before version 3 existed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scenario_fixtures import HORIZON_S, drive, first_node, tiny_config, train_pod

from dsan.core.snapshot import PodSpec
from dsan.sim.scenario.config import ScenarioConfig, load
from dsan.sim.scenario.engine import Engine
from dsan.sim.scenario.metrics import ReclaimCost, queued_mean_wait
from dsan.sim.scenario.state import RUNNING, Decision
from dsan.sim.scenario.workload import BATCH, BE, TRAIN, WEB, WorkloadBuilder, generate
from tests.support.golden import assert_matches

GOLDEN = Path(__file__).parent / "golden" / "seed_table1_v2.json"


def v3(**over: Any) -> ScenarioConfig:
    """The tiny cluster (two 4-GPU nodes in one NVLink domain, one 16-core node) as version 3:
    always on, elastic restarts of 10 s, executors losing 60 s when evicted."""
    base: dict[str, Any] = {
        "version": 3,
        "scale_down": {"enabled": False},
        "training": {"elastic": {"max_factor": 2, "priority": -10, "restart_s": 10.0}},
        "batch": {"min_executors": 1, "elastic_priority": -10, "evict_loss_s": 60.0},
    }
    for k, v in over.items():
        base[k] = {**base[k], **v} if isinstance(v, dict) and k in base else v
    training = {**{"jobs_per_h": 0.0, "gpu_count_probs": {"1": 1.0}, "quantile_points": [0, 100],
                   "duration_quantiles_s": {"1": [100, 100]}, "images": [0]},
                **base.pop("training")}
    batch = {**{"jobs_per_h": 0.0, "images": [0]}, **base.pop("batch")}
    return tiny_config(training=training, batch=batch, **base)


def train(b: WorkloadBuilder, at: float, work: float, gang: int, extra: int = 0,
          prio: int = 500, burst: bool = False) -> int:
    job = b.job(TRAIN, at, [work], stage_par=[0], base=gang, nominal=gang, burst=burst)
    for i in range(gang):
        b.pod(job, train_pod(f"t{job.id}-{i}", gang=gang, prio=prio), 0.6, 0.9, False)
    for i in range(extra):
        b.pod(job, train_pod(f"t{job.id}-x{i}", prio=-10), 0.6, 0.9, True)
    return job.id


# --- metric helpers -----------------------------------------------------------------------


def running(eng: Engine, job: int) -> int:
    """How many of the job's pods run now."""
    return int((eng.pod_state[eng.wl.jobs[job].pods] == RUNNING).sum())


def test_queued_mean_wait_is_over_the_queued_only() -> None:
    assert queued_mean_wait(np.array([0.0, 30.0, 40.0, 100.0]), 30.0) == pytest.approx(70.0)
    assert queued_mean_wait(np.array([0.0, 5.0]), 30.0) == 0.0


def test_reclaim_cost_sums() -> None:
    c = ReclaimCost()
    c.add("training", 3, stall_gpu_s=70.0)
    c.add("training", 3, stall_gpu_s=60.0)
    c.add("besteffort", 5, lost_gpu_s=48.0)
    c.add("batch", 7, lost_core_s=240.0)
    assert c.summary() == {
        "evicted_pods": {"batch": 1, "besteffort": 1, "training": 2}, "evictions": 4,
        "jobs_hit": 3, "lost_gpu_s": 48.0, "lost_core_s": 240.0, "stall_gpu_s": 130.0,
        "gpu_s_total": 178.0,
    }


# --- the engine, by hand ------------------------------------------------------------------


def test_measured_utilisation_over_every_always_on_node() -> None:
    cfg = v3()
    b = WorkloadBuilder(cfg)
    train(b, 0.0, 100.0, 1)  # 8 cores at 0.6 use, 32 GiB, 1 GPU at 0.9 activity
    out = drive(Engine(cfg, 0, workload=b.build()))
    # bound at 0, 1 s pull + 2 s start: runs 3 -> 103; memory allocated 0 -> 103.
    cap_t = HORIZON_S
    assert out["cpu_util_pct"] == pytest.approx(100 * 4800 * 100 / (144000 * cap_t))
    assert out["mem_util_pct"] == pytest.approx(100 * 32768 * 103 / (589824 * cap_t))
    assert out["gpu_util_pct"] == pytest.approx(100 * 900 * 100 / (8000 * cap_t))
    assert out["utilization_pct"] == pytest.approx(
        (out["cpu_util_pct"] + out["mem_util_pct"] + out["gpu_util_pct"]) / 3)
    # requested over powered-on nodes, as version 2 measures it, is reported beside
    assert out["alloc_utilization_pct"] > out["utilization_pct"]
    # no scale-down: all three nodes billed for the whole run
    assert out["cost"] == pytest.approx((4 + 4 + 1) * cap_t / 3600)


def test_warm_up_is_cut_from_every_metric() -> None:
    cfg = v3(warmup_h=0.1)  # t0 = 360 s; measured window [360, 1360)
    b = WorkloadBuilder(cfg)
    train(b, 0.0, 500.0, 1)  # warm-up job: runs 3 -> 503
    train(b, 400.0, 100.0, 1)  # measured job: image cached on node 0, runs 402 -> 502
    eng = Engine(cfg, 0, workload=b.build())
    out = drive(eng)
    assert eng.horizon == pytest.approx(360 + HORIZON_S)
    assert out["gpu_util_pct"] == pytest.approx(100 * 900 * (143 + 100) / (8000 * HORIZON_S))
    assert out["jobs_submitted"] == 1
    assert out["p99_task_latency_s"] == pytest.approx(2.0)
    assert out["jct_s"] == pytest.approx(102.0) and out["jobs_completed"] == 1
    assert out["sla_by_kind"] == {"training": {"violations": 0, "items": 1, "pct": 0.0}}
    assert out["warmup_h"] == pytest.approx(0.1) and out["sim_hours"] == pytest.approx(1000 / 3600)


def test_window_edges_never_started_jobs_and_sla_items() -> None:
    cfg = v3(warmup_h=0.25, hours=1200 / 3600)  # t0 = 900, H = 2100: a web window boundary
    b = WorkloadBuilder(cfg)
    train(b, 0.0, 5000.0, 4)  # warm-up gang holds node 0's GPUs past H
    train(b, 1000.0, 100.0, 8)  # needs all 8 GPUs: never starts, limit passed at 1600 < H
    train(b, 1600.0, 100.0, 8)  # never starts, its limit (2200) is after H: no SLA item
    for deadline in (1500.0, 3000.0):  # both run past H; only the first deadline falls in
        job = b.job(BATCH, 1000.0, [1e9], stage_par=[1], deadline=deadline, base=2)
        b.pod(job, PodSpec("drv", 1000, 1024, priority=400, task_type=BATCH, image=0), 0.5,
              0.0, False)
        b.pod(job, PodSpec("ex0", 4000, 4096, priority=100, task_type=BATCH, image=0), 1.0,
              0.0, False)
    web = b.job(WEB, 0.0, [float("inf")], stage_par=[0], service=0, base=1)
    b.pod(web, PodSpec("w", 2000, 4096, priority=1000, task_type=WEB, image=1), 1.0, 0.0, False)
    out = drive(Engine(cfg, 0, workload=b.build()))
    # web checked at 1200, 1500 and 1800 (not at t0 = 900, nor at H = 2100), never missed
    assert out["sla_by_kind"] == {"batch": {"violations": 1, "items": 1, "pct": 100.0},
                                  "training": {"violations": 1, "items": 1, "pct": 100.0},
                                  "web": {"violations": 0, "items": 3, "pct": 0.0}}
    # measured latency-sensitive jobs: the gangs (H - submission: 1100, 500) and the two
    # batch jobs (driver 1000 -> 1002 on node 0, image cached; executor 1002 -> 1004): 4 s
    assert out["p99_task_latency_s"] == pytest.approx(1100.0)
    assert out["p99_by_kind_s"]["batch"] == pytest.approx(4.0)
    assert out["queueing_events"] == 2
    assert out["mean_wait_s"] == pytest.approx((1100.0 + 500.0 + 0.0 + 0.0) / 4)
    assert out["mean_wait_queued_s"] == pytest.approx(800.0)
    assert out["jobs_submitted"] == 4 and out["jobs_completed"] == 0


def spark(b: WorkloadBuilder, work: float, ex0_cpu: int = 4000) -> Any:
    """A batch job at 0 s: a driver, one guaranteed executor of ``ex0_cpu`` and one
    evictable 4-core executor."""
    job = b.job(BATCH, 0.0, [work], stage_par=[2], base=2)
    b.pod(job, PodSpec("drv", 1000, 1024, priority=400, task_type=BATCH, image=0), 0.5, 0.0,
          False)
    b.pod(job, PodSpec("ex0", ex0_cpu, ex0_cpu * 1024 // 1000, priority=100, task_type=BATCH,
                       image=0), 1.0, 0.0, False)
    b.pod(job, PodSpec("ex1", 4000, 4096, priority=-10, task_type=BATCH, image=0), 1.0, 0.0,
          True)
    return job


def notebook(b: WorkloadBuilder, at: float, work: float) -> None:
    """A best-effort job: one evictable pod on half a GPU."""
    be = b.job(BE, at, [work], stage_par=[0], base=1)
    b.pod(be, PodSpec("be", 4000, 8192, num_gpu=1, gpu_milli=500, priority=0, task_type=BE,
                      image=1), 0.5, 0.5, True)


def test_job_latency_queueing_and_best_effort_apart() -> None:
    cfg = v3()
    b = WorkloadBuilder(cfg)
    g = train(b, 0.0, 200.0, 8)  # both GPU nodes, one NVLink domain: 0.95 -> done 3 + 210.53
    h = train(b, 10.0, 100.0, 1)  # waits for g's GPUs
    job = spark(b, 100.0)
    notebook(b, 20.0, 50.0)
    eng = Engine(cfg, 0, workload=b.build())
    out = drive(eng)
    g_done = 3.0 + 200.0 / 0.95
    # g starts at 3 s; the driver at 3 s (image being pulled), its minimum executor at 5 s;
    # h binds when g ends and starts 2 s later (image cached); best effort pulls image 1.
    assert eng.job_start[g] == pytest.approx(3.0)
    assert eng.job_start[job.id] == pytest.approx(5.0)
    assert eng.job_start[h] == pytest.approx(g_done + 2.0)
    lat_h = g_done + 2.0 - 10.0
    assert out["p99_task_latency_s"] == pytest.approx(lat_h)  # nearest rank of 3 jobs: the max
    assert out["p99_by_kind_s"]["training"] == pytest.approx(lat_h)
    assert out["p99_by_kind_s"]["batch"] == pytest.approx(5.0)
    assert out["p99_besteffort_latency_s"] == pytest.approx(g_done + 4.0 - 20.0)
    wait_h = g_done - 10.0
    assert out["queueing_events"] == 1
    assert out["mean_wait_s"] == pytest.approx(wait_h / 3)
    assert out["mean_wait_queued_s"] == pytest.approx(wait_h)
    assert out["queueing_by_kind"]["besteffort"]["events"] == 1


def test_elastic_training_grows_shrinks_and_pays_restarts() -> None:
    cfg = v3()
    b = WorkloadBuilder(cfg)
    e = train(b, 0.0, 400.0, 4, extra=4)  # base gang on node 0, extras on node 1
    t = train(b, 100.0, 50.0, 4)  # a 4-GPU gang at 100 s: reclaims the 4 extras
    seen: list[Decision] = []
    sizes: list[int] = []
    eng = Engine(cfg, 0, workload=b.build())

    def policy(d: Decision) -> int:
        if d.job_id == t:
            sizes.append(running(eng, e))
        return first_node(d)

    out = drive(eng, policy, seen)
    assert sizes[0] == 4  # the extras were evicted before the gang was placed
    # progress: 3->6 at 1.0 (3), pause to 16, 16->100 at 0.95*8/4 (159.6), evicted: pause to
    # 110, 110->152 at 1.0 (42), extras back at 152, ready 154 (2), pause to 164, then 1.9.
    done = 164.0 + (400.0 - 3.0 - 159.6 - 42.0 - 2.0) / 1.9
    assert out["jct_by_kind_s"]["training"] == pytest.approx(((done - 0.0) + 52.0) / 2)
    assert out["reclaim_cost"] == {
        "evicted_pods": {"training": 4}, "evictions": 4, "jobs_hit": 1, "lost_gpu_s": 0.0,
        "lost_core_s": 0.0, "stall_gpu_s": 10.0 * (7 + 6 + 5 + 4),
        "gpu_s_total": 10.0 * (7 + 6 + 5 + 4)}
    assert out["elastic"] == {"grows": 8, "grow_stall_gpu_s": 2 * 10.0 * (5 + 6 + 7 + 8)}
    assert out["preemptions"] == 4


def test_best_effort_eviction_loses_its_progress() -> None:
    cfg = v3()
    b = WorkloadBuilder(cfg)
    notebook(b, 0.0, 5000.0)
    train(b, 100.0, 50.0, 8)  # needs every GPU: reclaims the notebook, running since 4 s
    out = drive(Engine(cfg, 0, workload=b.build()))
    assert out["reclaim_cost"]["evicted_pods"] == {"besteffort": 1}
    assert out["reclaim_cost"]["lost_gpu_s"] == pytest.approx(96.0 * 0.5)


def test_an_evicted_executor_loses_its_in_flight_tasks() -> None:
    cpu_only = {"racks": 1, "zones": 1, "node_groups": [
        {"count": 1, "cpu_milli": 16000, "mem_mib": 65536, "hourly_cost": 1.0}]}
    cfg = v3(cluster=cpu_only)
    b = WorkloadBuilder(cfg)
    spark(b, 5000.0, ex0_cpu=8000)
    web = b.job(WEB, 50.0, [float("inf")], stage_par=[0], service=0, base=1)
    b.pod(web, PodSpec("w", 6000, 4096, priority=1000, task_type=WEB, image=1), 1.0, 0.0, False)
    eng = Engine(cfg, 0, workload=b.build())
    out = drive(eng)
    assert out["reclaim_cost"]["evicted_pods"] == {"batch": 1}
    assert out["reclaim_cost"]["lost_core_s"] == pytest.approx(60.0 * 4)


def test_burst_v2_fits_only_by_reclaiming() -> None:
    cfg = v3()
    b = WorkloadBuilder(cfg)
    e = train(b, 0.0, 5000.0, 4, extra=4)  # every GPU held: 4 by the extras (reclaimable)
    for i, at in enumerate((100.0, 101.0)):
        job = b.job(TRAIN, at, [50.0], stage_par=[0], base=1, nominal=1, burst=True)
        b.pod(job, PodSpec(f"burst-{i}", 2000, 8192, num_gpu=1, gpu_milli=500, priority=500,
                           task_type=TRAIN, image=0), 0.6, 0.9, False)
    eng = Engine(cfg, 0, workload=b.build())
    out = drive(eng)
    burst = out["burst"]
    # the first evicts one extra (7 workers stall 10 s) and takes half its GPU; the second
    # fits in the other half
    assert burst == {
        "jobs": 2, "jobs_started": 2, "queued_jobs": 0, "mean_job_wait_s": 0.0,
        "mean_wait_queued_s": 0.0, "gpu_milli_requested": 1000.0,
        "peak_gpu_milli_offered": 1000.0, "free_gpu_milli_at_start": 0.0,
        "reclaimable_gpu_milli_at_start": 4000.0,
        "reclaim_cost": {"evicted_pods": {"training": 1}, "evictions": 1, "jobs_hit": 1,
                         "lost_gpu_s": 0.0, "lost_core_s": 0.0, "stall_gpu_s": 70.0,
                         "gpu_s_total": 70.0}}
    assert running(eng, e) == 8  # the extra came back once the burst was done


def test_burst_v2_generator_draws_one_pod_jobs_on_a_share() -> None:
    cfg = load("seed-table1-v3")
    wl = generate(cfg, 1, burst=True)
    jobs = [j for j in wl.jobs if j.burst]
    bu = cfg.burst
    assert len(jobs) == bu.jobs
    t0 = (cfg.warmup_h + bu.at_h) * 3600.0
    for j in jobs:
        assert len(j.pods) == 1 and j.base == 1
        p = wl.pods[j.pods[0]]
        assert p.gpu_milli in bu.gpu_milli and p.cpu_milli == bu.cpu_milli
        assert p.mem_mib == bu.mem_mib and p.priority == cfg.training.priority
        assert t0 <= j.submit <= t0 + bu.window_s
        assert bu.duration_s[0] <= j.stage_work[0] <= bu.duration_s[1]


def test_elastic_workloads_expose_min_and_max() -> None:
    cfg = load("seed-table1-v3")
    wl = generate(cfg, 1)
    tr = next(j for j in wl.jobs if j.kind == TRAIN)
    assert len(tr.pods) == tr.base * cfg.training.elastic.max_factor
    assert all(wl.pod_reclaimable[p] for p in tr.pods[tr.base:])
    assert not any(wl.pod_reclaimable[p] for p in tr.pods[:tr.base])
    bj = next(j for j in wl.jobs if j.kind == BATCH)
    assert bj.base == 1 + cfg.batch.min_executors
    core = bj.pods[1:bj.base]
    assert [wl.pods[p].priority for p in core] == [cfg.batch.executor_priority] * len(core)
    assert all(wl.pods[p].priority == cfg.batch.elastic_priority for p in bj.pods[bj.base:])


def test_shipped_v3_runs_and_reports_the_v3_metrics() -> None:
    from dsan.sim.scenario.runner import run_policy

    cfg = load("seed-table1-v3")
    assert cfg.version == 3 and not cfg.scale_down.enabled and cfg.warmup_h > 0
    r = run_policy(cfg, "k8s-default", 1, hours=0.5)
    for key in ("utilization_pct", "alloc_utilization_pct", "p99_task_latency_s",
                "p99_besteffort_latency_s", "sla_by_kind", "reclaim_cost", "mean_wait_queued_s"):
        assert key in r
    assert r["sim_hours"] == pytest.approx(0.5)
    assert 0 < r["utilization_pct"] < 100
    assert r["series"]["t_s"][0] == 0.0  # the plot starts at the end of the warm-up


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_placements_keep_the_books_straight_with_elastic_jobs(seed: int) -> None:
    """Resources held equal the requests of placed pods at every decision; an elastic job's
    base gang is all or nothing (its extras come one by one)."""
    cfg = v3(hours=1.0, warmup_h=0.25,
             training={"jobs_per_h": 30.0, "gpu_count_probs": {"1": 0.5, "2": 0.3, "4": 0.2},
                       "duration_quantiles_s": {"1": [60, 900], "2": [60, 900],
                                                "4": [60, 900]}},
             batch={"jobs_per_h": 8.0, "executors": [2, 4], "duration_median_s": 300.0},
             web={"services": 2, "replicas": [1, 3]},
             besteffort={"pods_per_h": 20.0, "duration_mean_s": 600.0,
                         "gpu_milli_probs": {"500": 0.5, "300": 0.5}})
    eng = Engine(cfg, seed, burst=False)
    rng = np.random.default_rng(seed)
    gen = eng.decisions()
    d: Decision | None = next(gen, None)
    n = len(eng.snap)
    while d is not None:
        placed = eng.pod_node >= 0
        nodes = eng.pod_node[placed]
        np.testing.assert_allclose(eng.snap.cpu_used, np.bincount(nodes, eng.pod_cpu[placed], n))
        gpu_used = eng.gpu_cap.sum() - eng.snap.gpu_free.sum()
        assert gpu_used == int(eng.pod_gmilli[placed].sum())
        for job in eng.wl.jobs:
            if job.kind == TRAIN and job.id != d.job_id:
                base = placed[job.pods[:job.base]]
                assert base.all() or not base.any()
                assert not placed[job.pods[job.base:]].any() or base.all()
        try:
            d = gen.send(int(rng.choice(d.nodes)))
        except StopIteration:
            d = None
    out = eng.summary()
    assert 0.0 <= float(out["utilization_pct"]) <= 100.0  # type: ignore[arg-type]
    assert out["elastic"]["grows"] > 0  # type: ignore[index]


# --- configuration ------------------------------------------------------------------------


@pytest.mark.parametrize(("setting", "message"), [
    ("scale_down.enabled=maybe", "scale_down.enabled: expected true or false"),
    ("version=4", "version 4 unsupported"),
    ("version=2", "scale_down.enabled: false needs version: 3"),
    ("warmup_h=-1", "warmup_h must be within 0..48"),
    ("training.elastic.max_factor=0", "training.elastic.max_factor must be >= 1"),
    ("training.elastic.priority=500", "training.elastic.priority must be below"),
    ("training.elastic.restart_s=-5", "training.elastic.restart_s must be >= 0"),
    ("training.elastic.bogus=1", r"training.elastic: unknown keys \['bogus'\]"),
    ("batch.min_executors=9", r"batch.min_executors must be within 0..min"),
    ("batch.elastic_priority=100", "batch.elastic_priority must be below"),
    ("batch.evict_loss_s=-1", "batch.evict_loss_s must be >= 0"),
    ("burst.version=3", "burst.version must be 1 or 2"),
    ("burst.gpu_milli=[0, 250]", "burst.gpu_milli must list shares within 1..1000"),
    ("burst.duration_s=[200, 100]", r"burst.duration_s must be \[lo, hi\]"),
    ("burst.duration_s=[200]", "burst.duration_s: expected a list of 2"),
    ("burst.cpu_milli=0", "burst.cpu_milli and burst.mem_mib must be > 0"),
])
def test_v3_bad_values_are_refused_by_name(setting: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as err:
        load("seed-table1-v3", [setting])
    assert "dsan/scenarios/seed-table1-v3.yaml" in str(err.value)


@pytest.mark.parametrize("setting", ["scale_down.enabled=false", "warmup_h=6",
                                     "burst.version=2", "training.elastic.max_factor=2",
                                     "batch.min_executors=2"])
def test_version_2_refuses_version_3_settings(setting: str) -> None:
    with pytest.raises(ValueError, match="needs version: 3"):
        load("seed-table1", [setting])


# --- version 2 stays as it was ------------------------------------------------------------


def test_version_2_outputs_are_those_before_version_3() -> None:
    """Recorded from the tree before version 3 (commit 3e72dd5), series included."""
    from dsan.sim.scenario.runner import run_policy

    cfg = load("seed-table1")
    assert cfg.version == 2

    def clean(r: dict[str, Any]) -> dict[str, Any]:
        return json.loads(json.dumps({k: v for k, v in r.items() if k != "runtime_s"}))

    want = json.loads(GOLDEN.read_text())
    got = clean(run_policy(cfg, "k8s-default", 5, hours=1.0))
    assert_matches(got, want["seed-table1/k8s-default/5/1h"], rel=1e-12)
    got = clean(run_policy(cfg, "tetris", 2, burst=True, hours=2.5))
    assert_matches(got, want["burst/tetris/2/2.5h"], rel=1e-12)
