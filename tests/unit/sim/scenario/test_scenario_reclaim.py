"""The policy's reclaimer in the simulator: the candidates it is offered (victims built from
the engine's state, by hand), its choice obeyed, a bad choice refused; and the simulator's
stand-in for Kubernetes' choice."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from scenario_fixtures import drive, last_node, tiny_config, train_pod

from dsan.core.snapshot import PodSpec
from dsan.policies.base import Scorer
from dsan.policies.dsan_actions import ActionParams, CostReclaimer, LearnedController
from dsan.policies.reclaim import Candidate, DefaultReclaimer, Victim
from dsan.sim.scenario.config import ScenarioConfig
from dsan.sim.scenario.engine import Engine
from dsan.sim.scenario.preemption import SimulatorDefault, simulated
from dsan.sim.scenario.state import Decision
from dsan.sim.scenario.workload import BATCH, BE, TRAIN, WEB, WorkloadBuilder


def v3() -> ScenarioConfig:
    """The tiny cluster as version 3: elastic restarts of 10 s."""
    return tiny_config(version=3, scale_down={"enabled": False},
                       training={"elastic": {"max_factor": 2, "priority": -10,
                                             "restart_s": 10.0}})


class Picks:
    """A reclaimer that records what it is offered and picks candidate ``pick`` for the
    training pod (priority 500), nothing for others (the evicted notebook, say)."""

    name = "picks"

    def __init__(self, pick: int | None) -> None:
        self.pick = pick
        self.offered: list[tuple[int, list[Candidate]]] = []

    def choose(self, priority: int, candidates: Sequence[Candidate]) -> int | None:
        self.offered.append((priority, list(candidates)))
        return self.pick if priority == 500 else None


class WithReclaimer(Scorer):
    def __init__(self, r: Any) -> None:
        self.reclaimer = r


def layout(cfg: ScenarioConfig | None = None) -> tuple[Engine, list[str]]:
    """Node 0: a 3-GPU gang and a notebook on half of GPU 3 (running from 4 s); node 1: a
    1-GPU job and the gang's 3 elastic extras (running from 5 s: bound at 3 s when the gang
    ran, image cached, 2 s start). At 100 s a 1-GPU training pod fits nowhere."""
    cfg = cfg or v3()
    b = WorkloadBuilder(cfg)
    e = b.job(TRAIN, 0.0, [5000.0], stage_par=[0], base=3, nominal=3)
    for i in range(3):
        b.pod(e, train_pod(f"e{i}", gang=3), 0.6, 0.9, False)
    for i in range(3):
        b.pod(e, train_pod(f"x{i}", prio=-10), 0.6, 0.9, True)
    g = b.job(TRAIN, 0.0, [5000.0], stage_par=[0], base=1, nominal=1)
    b.pod(g, train_pod("g"), 0.6, 0.9, False)
    nb = b.job(BE, 0.0, [5000.0], stage_par=[0], base=1)
    b.pod(nb, PodSpec("nb", 4000, 8192, num_gpu=1, gpu_milli=500, priority=0, task_type=BE,
                      image=1), 0.5, 0.5, True)
    p = b.job(TRAIN, 100.0, [50.0], stage_par=[0], base=1, nominal=1)
    b.pod(p, train_pod("p"), 0.6, 0.9, False)
    return Engine(cfg, 0, workload=b.build()), ["e", "nb"]


def by_name(on_node0: list[str]):  # type: ignore[no-untyped-def]
    def policy(d: Decision) -> int:
        want = 0 if d.pod.name.rstrip("0123456789") in on_node0 else 1
        return want if want in d.nodes else int(d.nodes[0])
    return policy


def test_the_reclaimer_is_offered_victims_built_from_the_engine_and_is_obeyed() -> None:
    eng, node0 = layout()
    r = Picks(0)
    eng.attach(WithReclaimer(r))
    out = drive(eng, by_name(node0))
    prio, cands = r.offered[0]
    assert prio == 500
    assert [c.node for c in cands] == [0, 1]  # node order; the CPU node is no candidate
    # the notebook: 96 s of progress (4 -> 100) thrown away on half a GPU
    assert cands[0].victims == (Victim(priority=0, task_type="other", gpus=0.5, cores=4.0,
                                       lost_s=96.0, elastic=False, start=0.0),)
    # one extra worker (the latest bound first, lowest priority first): the 5 workers left
    # restart for 10 s each
    assert cands[1].victims == (Victim(priority=-10, task_type="train", gpus=1.0, cores=8.0,
                                       lost_s=50.0, elastic=True, start=3.0),)
    assert SimulatorDefault().choose(prio, cands) == 1  # Kubernetes would shrink the gang
    # the reclaimer's pick, the notebook, was evicted
    assert out["reclaim_cost"]["evicted_pods"] == {"besteffort": 1}
    assert out["reclaim_cost"]["lost_gpu_s"] == pytest.approx(96.0 * 0.5)
    assert out["preemptions"] == 1


def test_refusing_evicts_nothing_and_the_pod_waits() -> None:
    eng, node0 = layout()
    eng.attach(WithReclaimer(Picks(None)))
    out = drive(eng, by_name(node0))
    assert out["preemptions"] == 0
    assert out["reclaim_cost"]["evictions"] == 0
    assert out["queueing_by_kind"]["training"]["events"] == 1


@pytest.mark.parametrize("pick", [2, -1])
def test_a_choice_outside_the_candidates_is_refused(pick: int) -> None:
    eng, node0 = layout()
    eng.attach(WithReclaimer(Picks(pick)))
    with pytest.raises(ValueError, match="not an admissible one of 2"):
        drive(eng, by_name(node0))


def test_kubernetes_reclaimer_runs_as_the_simulators_stand_in() -> None:
    assert isinstance(simulated(DefaultReclaimer()), SimulatorDefault)
    other = Picks(0)
    assert simulated(other) is other
    eng, node0 = layout()
    eng.attach(Scorer())
    out = drive(eng, by_name(node0))
    assert out["reclaim_cost"]["evicted_pods"] == {"training": 1}


def test_version_2_keeps_kubernetes_for_every_policy() -> None:
    eng, node0 = layout(tiny_config())
    r = Picks(0)
    eng.attach(WithReclaimer(r))
    out = drive(eng, by_name(node0))
    assert r.offered == []  # never asked
    assert out["preemptions"] == 1 and "reclaim_cost" not in out


def victim(prio: int, start: float) -> Victim:
    return Victim(priority=prio, task_type="other", gpus=0.0, cores=1.0, lost_s=0.0,
                  elastic=True, start=start)


@pytest.mark.parametrize(("cands", "kube", "sim"), [
    # equal (highest priority, count): Kubernetes takes the latest-started, the simulator the
    # lowest node
    ([(victim(0, 1.0),), (victim(0, 9.0),)], 1, 0),
    # equal (highest priority, count): Kubernetes takes the smaller priority sum
    ([(victim(5, 0.0), victim(5, 0.0)), (victim(5, 0.0), victim(1, 0.0))], 1, 0),
    # the lowest highest priority and then the fewest victims decide for both
    ([(victim(5, 0.0),), (victim(1, 0.0), victim(1, 0.0))], 1, 1),
    ([(victim(1, 0.0), victim(1, 0.0)), (victim(1, 0.0),)], 1, 1),
])
def test_simulator_default_differs_from_kubernetes_only_in_the_last_tie_breaks(
        cands: list[tuple[Victim, ...]], kube: int, sim: int) -> None:
    cs = [Candidate(i, c) for i, c in enumerate(cands)]
    assert DefaultReclaimer().choose(10, cs) == kube
    assert SimulatorDefault().choose(10, cs) == sim


# --- the controller in the engine ---------------------------------------------------------


class WithController(Scorer):
    def __init__(self, p: ActionParams) -> None:
        self.controller = LearnedController(p)


def test_grant_submits_only_the_granted_extras() -> None:
    cfg = v3()
    b = WorkloadBuilder(cfg)
    e = b.job(TRAIN, 0.0, [300.0], stage_par=[0], base=2, nominal=2)
    for i in range(2):
        b.pod(e, train_pod(f"e{i}", gang=2), 0.6, 0.9, False)
    for i in range(4):
        b.pod(e, train_pod(f"x{i}", prio=-10), 0.6, 0.9, True)
    eng = Engine(cfg, 0, workload=b.build())
    eng.attach(WithController(ActionParams(train_growth=0.5)))
    out = drive(eng)
    assert out["elastic"]["grows"] == 2
    # 2 + round(0.5 * 4) granted: the last two extras were never submitted
    assert [bool(np.isnan(eng.pod_submit[p])) for p in e.pods] == [False] * 4 + [True] * 2


def test_gpu_reserve_keeps_spark_on_the_cpu_node() -> None:
    def run(p: ActionParams) -> list[int]:
        cfg = v3()
        b = WorkloadBuilder(cfg)
        job = b.job(BATCH, 0.0, [5000.0], stage_par=[2], base=2)
        b.pod(job, PodSpec("drv", 1000, 1024, priority=400, task_type=BATCH, image=0), 0.5,
              0.0, False)
        for i, prio in enumerate((100, -10)):
            b.pod(job, PodSpec(f"ex{i}", 4000, 4096, priority=prio, task_type=BATCH, image=0),
                  1.0, 0.0, prio < 0)
        eng = Engine(cfg, 0, workload=b.build())
        eng.attach(WithController(p))
        seen: list[Decision] = []
        drive(eng, seen=seen)
        return [int(d.nodes[0]) for d in seen]

    assert run(ActionParams()) == [0, 0, 0]  # the first feasible node: a GPU node
    # all four GPUs idle: a whole reserve keeps every core free, so only the CPU node is left
    assert run(ActionParams(gpu_reserve=1.0)) == [2, 2, 2]


def test_a_pod_the_quota_keeps_off_free_nodes_preempts_on_an_allowed_one() -> None:
    """gpu_reserve 1.0 refuses the idle GPU nodes to Spark pods; the CPU node is full of job
    a's pods. Job b's core executor has room on a GPU node, yet must not wait for ever: it
    preempts a's elastic executor on the CPU node, as kube-scheduler's PostFilter would on the
    nodes its Filter (the quota) passes."""
    cfg = v3()
    b = WorkloadBuilder(cfg)
    a = b.job(BATCH, 0.0, [5000.0], stage_par=[2], base=1)
    b.pod(a, PodSpec("a0", 4000, 4096, priority=100, task_type=BATCH, image=0), 1.0, 0.0, False)
    b.pod(a, PodSpec("fill", 12000, 4096, priority=-10, task_type=BATCH, image=0), 1.0, 0.0,
          True)
    job = b.job(BATCH, 50.0, [100.0], stage_par=[1], base=1)
    b.pod(job, PodSpec("b0", 4000, 4096, priority=100, task_type=BATCH, image=0), 1.0, 0.0,
          False)
    eng = Engine(cfg, 0, workload=b.build())
    eng.attach(WithController(ActionParams(gpu_reserve=1.0)))
    seen: list[Decision] = []
    out = drive(eng, seen=seen)
    first = {d.pod.name: d.nodes.tolist() for d in reversed(seen)}
    assert first["a0"] == [2] and first["fill"] == [2] and first["b0"] == [2]
    assert out["preemptions"] >= 1


def test_an_aged_gang_reserves_the_gpus_a_later_pod_would_take() -> None:
    """Eight 1-GPU jobs end at ~103, 113, ..., 173 s; a 2-GPU gang arrives at 10 s and a 1-GPU
    job at 20 s. Kubernetes' order lets the later job take the GPU freed at 103 s (the gang
    does not fit) and the gang waits for two more, to 123 s; aged past 85 s, the gang
    reserves the GPU freed at 103 s and starts at 113 s, the later job at 123 s."""
    def run(p: ActionParams) -> tuple[float, float]:
        cfg = v3()
        b = WorkloadBuilder(cfg)
        for i in range(8):
            j = b.job(TRAIN, 0.0, [100.0 + 10 * i], stage_par=[0], base=1, nominal=1)
            b.pod(j, train_pod(f"f{i}"), 0.6, 0.9, False)
        g = b.job(TRAIN, 10.0, [50.0], stage_par=[0], base=2, nominal=2)
        for i in range(2):
            b.pod(g, train_pod(f"g{i}", gang=2), 0.6, 0.9, False)
        s = b.job(TRAIN, 20.0, [50.0], stage_par=[0], base=1, nominal=1)
        b.pod(s, train_pod("s"), 0.6, 0.9, False)
        eng = Engine(cfg, 0, workload=b.build())
        eng.attach(WithController(p))
        drive(eng)
        return float(eng.pod_bind[g.pods[0]]), float(eng.pod_bind[s.pods[0]])

    g0, s0 = run(ActionParams())
    assert s0 == pytest.approx(103.0) and g0 == pytest.approx(123.0)
    g1, s1 = run(ActionParams(age_s=85.0))
    assert g1 == pytest.approx(113.0) and s1 == pytest.approx(123.0)


# --- DSAN's reclaimer in the engine -------------------------------------------------------


def cpu_only() -> ScenarioConfig:
    return tiny_config(version=3, scale_down={"enabled": False}, cluster={
        "racks": 1, "zones": 1,
        "node_groups": [{"count": 1, "cpu_milli": 16000, "mem_mib": 65536, "hourly_cost": 1.0}]})


class WithActions(Scorer):
    def __init__(self, p: ActionParams) -> None:
        self.reclaimer = CostReclaimer(p)
        self.controller = LearnedController(p)


def test_dsan_never_evicts_a_web_pod_even_a_reclaimable_one() -> None:
    """One 16-core node: an elastic executor (4 cores, priority -10) and a web replica made
    reclaimable at priority 50 (8 cores); a 10-core pod of priority 400 arrives at 50 s. Only
    evicting both makes room: Kubernetes does, DSAN refuses and the pod waits."""
    def run(scorer: Scorer) -> dict[str, Any]:
        cfg = cpu_only()
        b = WorkloadBuilder(cfg)
        ex = b.job(BATCH, 0.0, [5000.0], stage_par=[1], base=1)
        b.pod(ex, PodSpec("ex", 4000, 4096, priority=-10, task_type=BATCH, image=0), 1.0, 0.0,
              True)
        w = b.job(WEB, 0.0, [float("inf")], stage_par=[0], service=0, base=1)
        b.pod(w, PodSpec("w", 8000, 4096, priority=50, task_type=WEB, image=1), 1.0, 0.0, True)
        d = b.job(BATCH, 50.0, [100.0], stage_par=[0], base=1)
        b.pod(d, PodSpec("d", 10000, 4096, priority=400, task_type=BATCH, image=0), 0.5, 0.0,
              False)
        eng = Engine(cfg, 0, workload=b.build())
        eng.attach(scorer)
        return drive(eng)

    assert run(Scorer())["reclaim_cost"]["evicted_pods"] == {"batch": 1, "web": 1}
    out = run(WithActions(ActionParams()))
    assert out["reclaim_cost"]["evictions"] == 0 and out["preemptions"] == 0


class Audit:
    """Wraps a reclaimer; records each chosen candidate's victims with the preemptor's
    priority."""

    name = "audit"

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.chosen: list[tuple[int, Candidate]] = []

    def choose(self, priority: int, candidates: Sequence[Candidate]) -> int | None:
        i = self.inner.choose(priority, candidates)
        if i is not None:
            self.chosen.append((priority, candidates[i]))
        return i


@pytest.mark.parametrize("seed", [0, 1])
def test_dsan_reclaims_only_lower_priority_non_web_pods_on_a_busy_scenario(seed: int) -> None:
    rng = np.random.default_rng(seed)
    cfg = tiny_config(
        version=3, scale_down={"enabled": False}, hours=1.0, warmup_h=0.25,
        training={"jobs_per_h": 40.0, "gpu_count_probs": {"1": 0.5, "2": 0.3, "4": 0.2},
                  "duration_quantiles_s": {"1": [60, 900], "2": [60, 900], "4": [60, 900]},
                  "elastic": {"max_factor": 2, "priority": -10, "restart_s": 10.0}},
        batch={"jobs_per_h": 12.0, "executors": [2, 4], "duration_median_s": 300.0,
               "min_executors": 1, "elastic_priority": -10, "evict_loss_s": 60.0},
        web={"services": 2, "replicas": [1, 3]},
        besteffort={"pods_per_h": 30.0, "duration_mean_s": 600.0,
                    "gpu_milli_probs": {"500": 0.5, "300": 0.5}})
    p = ActionParams.from_vector(rng.uniform(0, 4, size=len(ActionParams.BOUNDS)))
    audit = Audit(CostReclaimer(p))
    eng = Engine(cfg, seed)
    scorer = WithActions(p)
    scorer.reclaimer = audit  # type: ignore[assignment]
    eng.attach(scorer)
    drive(eng, last_node)
    assert audit.chosen  # the scenario does reclaim
    for prio, c in audit.chosen:
        assert all(v.priority < prio and v.task_type != "web" for v in c.victims)
