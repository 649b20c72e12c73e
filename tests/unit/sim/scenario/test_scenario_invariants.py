"""Bookkeeping invariants under random load and random placements (property test)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from scenario_fixtures import tiny_config

from dsan.sim.scenario.engine import Engine
from dsan.sim.scenario.state import PENDING, RUNNING, STARTING, Decision
from dsan.sim.scenario.workload import TRAIN


def _check(eng: Engine, deciding_job: int = -1) -> None:
    # pods of a gang being placed hold resources before they are bound: count pod_node
    placed = eng.pod_node >= 0
    assert np.isin(eng.pod_state[placed], (PENDING, STARTING, RUNNING)).all()
    n = len(eng.snap)
    nodes = eng.pod_node[placed]
    # over-provisioning placeholders hold requests too (none unless the config has them)
    ph = eng.ph
    held = ph.node[ph.node >= 0]
    assert (ph.on_node == np.bincount(held, minlength=n)).all()
    assert not (eng.snap.gpu_count[held] > 0).any()  # CPU nodes only
    cpu, mem = ph.on_node * ph.spec.cpu_milli, ph.on_node * ph.spec.mem_mib
    np.testing.assert_allclose(eng.snap.cpu_used, np.bincount(nodes, eng.pod_cpu[placed], n) + cpu)
    np.testing.assert_allclose(eng.snap.mem_used, np.bincount(nodes, eng.pod_mem[placed], n) + mem)
    assert eng.snap.pod_count is not None
    assert (eng.snap.pod_count == np.bincount(nodes, minlength=n) + ph.on_node).all()
    assert eng.on[held].all()  # a node that holds a placeholder never scales down
    gpu_used = eng.gpu_cap.sum() - eng.snap.gpu_free.sum()
    assert gpu_used == int((eng.pod_gmilli[placed]).sum())
    # gangs are all or nothing: a training job has either every worker placed or none
    for job in eng.wl.jobs:
        if job.kind == TRAIN and job.id != deciding_job:
            states = placed[job.pods]
            assert states.all() or not states.any()


@settings(max_examples=8, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([0, 3]))
def test_random_policy_keeps_books_straight(seed: int, placeholders: int) -> None:
    cfg = tiny_config(
        hours=1.0,
        scale_up={"ready_nodes_first": placeholders > 0},
        overprovisioning={"pods": placeholders, "cpu_milli": 4000, "mem_mib": 8192},
        training={
            "jobs_per_h": 30.0,
            "gpu_count_probs": {"1": 0.5, "2": 0.3, "4": 0.2},
            "duration_quantiles_s": {"1": [60, 900], "2": [60, 900], "4": [60, 900]},
        },
        batch={"jobs_per_h": 6.0, "executors": [2, 4], "duration_median_s": 300.0},
        web={"services": 2, "replicas": [1, 3]},
        besteffort={
            "pods_per_h": 20.0,
            "duration_mean_s": 600.0,
            "gpu_milli_probs": {"500": 0.5, "300": 0.5},
        },
    )
    eng = Engine(cfg, seed)
    rng = np.random.default_rng(seed)
    gen = eng.decisions()
    d: Decision | None = next(gen, None)
    while d is not None:
        _check(eng, d.job_id)
        try:
            d = gen.send(int(rng.choice(d.nodes)))
        except StopIteration:
            d = None
    _check(eng)
    out = eng.summary()
    assert 0.0 <= float(out["utilization_pct"]) <= 100.0  # type: ignore[arg-type]
