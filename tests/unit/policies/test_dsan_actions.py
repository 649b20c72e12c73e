"""DSAN's actions beyond node choice: the cost-aware reclaimer obeys the contract for any
weights, its costs and the controller's grants, quotas and ranks against hand-worked cases,
and the shipped artifact loads."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsan.api.types import TASK_TYPES
from dsan.core.snapshot import PodSpec, empty_snapshot
from dsan.policies.base import StaticController
from dsan.policies.dsan_actions import (
    ACTIONS,
    ActionParams,
    CostReclaimer,
    LearnedController,
    load_actions,
    save_actions,
)
from dsan.policies.reclaim import Candidate, DefaultReclaimer, Victim


def vic(prio: int = 0, task: str = "other", gpus: float = 0.0, cores: float = 1.0,
        lost_s: float = 0.0, elastic: bool = False) -> Victim:
    return Victim(priority=prio, task_type=task, gpus=gpus, cores=cores, lost_s=lost_s,
                  elastic=elastic, start=0.0)


victims = st.builds(vic, st.integers(-20, 1200), st.sampled_from(TASK_TYPES),
                    st.sampled_from([0.0, 0.25, 1.0]), st.sampled_from([1.0, 4.0, 11.3]),
                    st.floats(0, 10_000), st.booleans())
params = st.builds(ActionParams.from_vector,
                   st.lists(st.floats(-1, 5), min_size=len(ActionParams.BOUNDS),
                            max_size=len(ActionParams.BOUNDS)))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(victims, max_size=4).map(tuple), max_size=6), st.integers(-10, 1000),
       params)
def test_never_a_latency_sensitive_or_not_lower_priority_victim(
        cands: list[tuple[Victim, ...]], prio: int, p: ActionParams) -> None:
    cs = [Candidate(i, c) for i, c in enumerate(cands)]
    pick = CostReclaimer(p).choose(prio, cs)
    ok = [c.victims and all(v.priority < prio and v.task_type != "web" for v in c.victims)
          for c in cs]
    if pick is None:
        assert not any(ok)
    else:
        assert ok[pick]


@pytest.mark.parametrize(("p", "cands", "want"), [
    # only web below the preemptor: nothing is evicted
    (ActionParams(), [(vic(task="web"),)], None),
    # a web victim rules out its candidate even when it is the cheapest
    (ActionParams(), [(vic(task="web"),), (vic(), vic())], 1),
    # by count (the default weights): one victim over two
    (ActionParams(), [(vic(), vic()), (vic(prio=5),)], 1),
    # w_stop: shrinking two elastic workers beats stopping one notebook
    (ActionParams(w_count=0.1, w_stop=1.0),
     [(vic(),), (vic(elastic=True), vic(elastic=True))], 1),
    # w_gpu_h: a notebook 2 h into its work on half a GPU (1 GPU-h) costs more than an
    # elastic worker whose job restarts for 7 x 60 s on 1 GPU (0.117 GPU-h)
    (ActionParams(w_gpu_h=1.0, w_count=0.0),
     [(vic(gpus=0.5, lost_s=7200.0),), (vic(gpus=1.0, lost_s=420.0, elastic=True),)], 1),
    # w_core_h: 4 cores losing 60 s (0.0667 core-h) beat 8 cores losing 60 s
    (ActionParams(w_core_h=1.0, w_count=0.0),
     [(vic(cores=8.0, lost_s=60.0),), (vic(cores=4.0, lost_s=60.0),)], 1),
    # equal cost: the first
    (ActionParams(), [(vic(),), (vic(),)], 0),
])
def test_cost_ranking_by_hand(p: ActionParams, cands: list[tuple[Victim, ...]],
                              want: int | None) -> None:
    assert CostReclaimer(p).choose(100, [Candidate(i, c) for i, c in enumerate(cands)]) == want


def test_cost_is_the_weighted_sum() -> None:
    p = ActionParams(w_gpu_h=2.0, w_core_h=0.5, w_count=0.1, w_stop=0.3)
    c = Candidate(0, (vic(gpus=0.5, cores=4.0, lost_s=3600.0),
                      vic(gpus=1.0, cores=8.0, lost_s=360.0, elastic=True)))
    want = (2.0 * 0.5 + 0.5 * 4.0 + 0.1 + 0.3) + (2.0 * 0.1 + 0.5 * 0.8 + 0.1)
    assert CostReclaimer(p).cost(c) == pytest.approx(want)


def test_grants_a_share_of_the_growth_per_class() -> None:
    c = LearnedController(ActionParams(train_growth=0.5, batch_growth=0.0))
    assert c.grant("train", 2, 8) == 5
    assert c.grant("batch", 3, 33) == 3
    assert c.grant("other", 1, 1) == 1
    assert StaticController().grant("train", 2, 8) == 8


def test_gpu_reserve_keeps_cpu_pods_off_gpu_nodes_with_idle_gpus() -> None:
    # g0: 4 GPUs, 64 cores, 256 GiB, two GPUs idle, 20 cores used; g1: no GPU idle; c: CPU.
    snap = empty_snapshot(["g0", "g1", "c"], [64000, 64000, 16000], [262144, 262144, 65536],
                          [4, 4, 0], [0, 1, -1], ["A100"])
    snap.gpu_free[0, :2] = 0
    snap.gpu_free[1, :4] = 500
    snap.cpu_used[0] = 20000
    nodes = np.array([0, 1, 2])
    spark = PodSpec("ex", 8000, 30520, priority=-10, task_type=2)
    c = LearnedController(ActionParams(gpu_reserve=1.0))
    # g0 keeps 2/4 of 64 cores: 64 - 20 - 8 = 36 >= 32, memory 262144 - 30520 >= 131072: ok
    assert c.allowed(spark, snap, nodes).tolist() == [0, 1, 2]
    snap.cpu_used[0] = 30000  # 64 - 30 - 8 = 26 < 32: refused; g1 has no idle GPU: ok
    assert c.allowed(spark, snap, nodes).tolist() == [1, 2]
    web = PodSpec("w", 8000, 4096, priority=1000, task_type=TASK_TYPES.index("web"))
    gpu_pod = PodSpec("t", 8000, 4096, num_gpu=1, gpu_milli=1000, priority=500, task_type=1)
    assert c.allowed(web, snap, nodes).tolist() == [0, 1, 2]  # web is never held back
    assert c.allowed(gpu_pod, snap, nodes).tolist() == [0, 1, 2]
    assert LearnedController(ActionParams()).allowed(spark, snap, nodes).tolist() == [0, 1, 2]


def test_ls_headroom_keeps_other_pods_off_latency_sensitive_nodes_past_it() -> None:
    # a, b: 16 cores with 10 requested; a hosts a web replica, b does not; c: 4 GPUs.
    snap = empty_snapshot(["a", "b", "c"], [16000, 16000, 64000], [65536] * 3, [0, 0, 4],
                          [-1, -1, 0], ["A100"])
    snap.ls_pods = np.array([1, 0, 1], dtype=np.int32)
    snap.cpu_used[:] = [10000, 10000, 40000]
    nodes = np.array([0, 1, 2])
    c = LearnedController(ActionParams(ls_headroom=0.8))
    extra = PodSpec("ex", 4000, 15260, priority=-10, task_type=2, elastic=True)
    # a: (10 + 4) / 16 = 0.875 > 0.8, refused; b hosts no web; c: 44 / 64 = 0.69
    assert c.allowed(extra, snap, nodes).tolist() == [1, 2]
    small = PodSpec("ex2", 2000, 7630, priority=-10, task_type=2, elastic=True)
    assert c.allowed(small, snap, nodes).tolist() == [0, 1, 2]  # (10 + 2) / 16 = 0.75
    core = PodSpec("ex0", 4000, 15260, priority=100, task_type=2)  # the job's minimum too
    web = PodSpec("w", 2000, 4096, priority=1000, task_type=TASK_TYPES.index("web"))
    assert c.allowed(core, snap, nodes).tolist() == [1, 2]
    assert c.allowed(web, snap, nodes).tolist() == [0, 1, 2]
    assert LearnedController(ActionParams()).allowed(extra, snap, nodes).tolist() == [0, 1, 2]
    snap.ls_pods = None  # a view without per-node classes: no quota
    assert c.allowed(extra, snap, nodes).tolist() == [0, 1, 2]


def test_ageing_raises_a_waiting_training_pod_within_its_priority() -> None:
    c = LearnedController(ActionParams(age_s=300.0))
    t = PodSpec("t", 8000, 4096, num_gpu=1, gpu_milli=1000, priority=500, task_type=1)
    b = PodSpec("b", 8000, 4096, priority=100, task_type=2)
    assert c.rank(t, 299.0) == 500.0 and c.rank(t, 600.0) == pytest.approx(500.25)
    assert c.rank(t, 601.0) > c.rank(t, 600.0)  # the longer wait ranks first
    assert c.rank(b, 1e9) == 100.0
    assert LearnedController(ActionParams()).rank(t, 1e9) == 500.0


def test_vector_round_trip_and_bounds() -> None:
    p = ActionParams(w_gpu_h=1.0, w_core_h=0.5, w_count=0.2, w_stop=1.5, train_growth=0.25,
                     batch_growth=0.75, gpu_reserve=0.5, age_s=600.0)
    q = ActionParams.from_vector(p.vector())
    assert q.age_s == pytest.approx(600.0)
    assert ActionParams.from_vector(ActionParams().vector()).age_s == math.inf
    clipped = ActionParams.from_vector([9.0, -1.0, 0.5, 0.5, 2.0, 0.5, 0.5, 0.2, 0.0])
    assert clipped.w_gpu_h == 4.0 and clipped.w_core_h == 0.0 and clipped.train_growth == 1.0
    assert clipped.ls_headroom == 0.5
    assert clipped.age_s == pytest.approx(10 ** 1.5)
    with pytest.raises(ValueError, match=r"gpu_reserve must be within 0\.\.1"):
        ActionParams(gpu_reserve=2.0)


def test_artifact_round_trip_missing_and_bad(tmp_path: Path) -> None:
    p = ActionParams(w_stop=1.0, age_s=900.0)
    save_actions(tmp_path, p, {"version": "t"})
    r, c, m = load_actions(tmp_path)
    assert isinstance(r, CostReclaimer) and r.p == p
    assert isinstance(c, LearnedController) and m == {"version": "t"}
    r, c, m = load_actions(tmp_path / "none")
    assert isinstance(r, DefaultReclaimer) and isinstance(c, StaticController) and m == {}
    (tmp_path / ACTIONS).write_text(json.dumps({"params": {"w_gpu_h": 1.0}}))
    with pytest.raises(ValueError, match=r"actions\.json: want the keys"):
        load_actions(tmp_path)
