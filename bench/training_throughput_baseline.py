"""Experience-collection throughput of ANY checkout of this repo (decisions per second), with
the APIs every version has (one episode played at a time, ``dsan.train.distributed.run``),
for the side by side rows of docs/results/training.md: run it against the code before the
lockstep collector right next to ``bench/test_training_throughput.py`` (same episodes per
process, same machine, same minutes). Usage (repo root)::

    git archive c02cd90 | tar -x -C /tmp/dsan-old      # the code before session 2
    DSAN_TRACES=$PWD/../shared/traces PYTHONPATH=/tmp/dsan-old OMP_NUM_THREADS=1 \\
        .venv/bin/python bench/training_throughput_baseline.py

Prints one JSON line per row, with the 1-minute load average.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from typing import Any

import torch

import dsan
from dsan.model.net import DSANNet, ModelConfig
from dsan.train.distributed import DistConfig, run
from dsan.train.ppo import Args

try:  # this checkout: episodes in dsan.train.openb, played by the collector
    from dsan.train.collector import collect
    from dsan.train.openb import EnvConfig, make_episode

    def play_one(ep: Any, model: DSANNet) -> int:
        return len(collect([ep], model, "sample")[0])
except ImportError:  # checkouts before the shared collector
    from dsan.train.env import (  # type: ignore[no-redef,attr-defined]
        EnvConfig,
        make_episode,
    )
    from dsan.train.rollout import run_episode  # type: ignore[attr-defined]

    def play_one(ep: Any, model: DSANNet) -> int:
        return len(run_episode(ep, model, "sample"))

N_NODES = 96
EPISODES = 16  # per collecting process, as bench/test_training_throughput.py


def single() -> float:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = DSANNet(ModelConfig())
    env = EnvConfig(n_nodes=N_NODES)
    make_episode(env, 0)
    t0 = time.perf_counter()
    n = sum(play_one(make_episode(env, s), model) for s in range(EPISODES))
    return n / (time.perf_counter() - t0)


def rpc(workers: int) -> float:
    with tempfile.TemporaryDirectory() as out:
        a = Args(
            out=out,
            n_nodes=N_NODES,
            iterations=2,
            episodes_per_iter=EPISODES,
            eval_episodes=1,
            export=False,
            progress=False,
            ppo_epochs=1,
            minibatch=1024,  # the PPO step is not measured: keep it short
        )
        return float(
            run(a, DistConfig(workers=workers, master_port=29670 + workers))["decisions_per_s"][-1]
        )


def main() -> None:
    src = os.path.dirname(os.path.dirname(os.path.abspath(dsan.__file__)))
    for name, fn in (
        ("single-episode", single),
        ("rpc-1", lambda: rpc(1)),
        ("rpc-2", lambda: rpc(2)),
    ):
        rate = fn()
        print(
            json.dumps(
                {
                    "tree": src,
                    "row": name,
                    "decisions_per_s": round(rate, 1),
                    "load_avg_1min": os.getloadavg()[0],
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
