"""DSAN experience collection throughput (scheduling decisions per second) and time to
best-heuristic parity, measured side by side in one session:

* ``single``: one process playing episodes (no RPC);
* ``rpc-1`` / ``rpc-2``: the distributed trainer with 1 and 2 rollout workers on
  torch.distributed.rpc (TensorPipe, loopback), parameter server and shadow validator in
  their own processes; throughput = decisions collected / wall time of the collection round
  (rollouts shipped back to the PS included), taken from the last iteration.
* ``parity``: a short single-process training run; wall seconds until the greedy policy's
  held-out allocation reaches the best heuristic's (None if it did not within the budget).

Run: ``.venv/bin/python -m pytest -q bench/test_training_throughput.py --benchmark-only``.
Results are appended to the benchmark JSON's extra_info; docs/results/training.md quotes them.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from dsan.model.net import DSANNet, ModelConfig
from dsan.train.distributed import DistConfig, run
from dsan.train.env import EnvConfig, make_episode
from dsan.train.ppo import Args, train
from dsan.train.rollout import run_episode

N_NODES = 96
EPISODES = 2


def _single() -> float:
    torch.set_num_threads(1)
    model = DSANNet(ModelConfig())
    env = EnvConfig(n_nodes=N_NODES)
    t0, decisions = time.perf_counter(), 0
    for s in range(EPISODES):
        decisions += len(
            run_episode(make_episode(env, s), model, "sample", rng=np.random.default_rng(s))
        )
    return decisions / (time.perf_counter() - t0)


@pytest.mark.benchmark(group="training-throughput")
def test_collection_single_process(benchmark) -> None:  # type: ignore[no-untyped-def]
    rate = benchmark.pedantic(_single, rounds=1, iterations=1)
    benchmark.extra_info["decisions_per_s"] = rate
    assert rate > 0


@pytest.mark.benchmark(group="training-throughput")
@pytest.mark.parametrize("workers", [1, 2])
def test_collection_rpc_workers(benchmark, tmp_path, workers: int) -> None:  # type: ignore[no-untyped-def]
    a = Args(
        out=str(tmp_path),
        n_nodes=N_NODES,
        iterations=2,
        episodes_per_iter=EPISODES // workers or 1,
        eval_episodes=1,
        export=False,
        progress=False,
        ppo_epochs=1,
    )
    d = DistConfig(workers=workers, master_port=29650 + workers)
    summary = benchmark.pedantic(run, args=(a, d), rounds=1, iterations=1)
    benchmark.extra_info["decisions_per_s"] = summary["decisions_per_s"][-1]
    benchmark.extra_info["workers"] = workers
    assert summary["decisions_per_s"][-1] > 0


@pytest.mark.benchmark(group="training-throughput")
def test_wall_time_to_best_heuristic_parity(benchmark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    a = Args(
        out=str(tmp_path),
        n_nodes=64,
        imitation_episodes=6,
        imitation_epochs=6,
        lr=3e-3,
        iterations=3,
        episodes_per_iter=1,
        eval_episodes=2,
        export=False,
        progress=False,
    )
    summary = benchmark.pedantic(train, args=(a,), rounds=1, iterations=1)
    benchmark.extra_info.update(
        parity_wall_s=summary["parity_wall_s"],
        eval_alloc_pct=summary["eval_alloc_pct"],
        baselines=summary["baselines_alloc_pct"],
        teacher=summary["teacher"],
    )
