"""Distributed DSAN training on torch.distributed.rpc (TensorPipe), with a shadow validator.

Ranks: 0 = parameter server (PS, also the driver), 1..N = rollout workers, N+1 = shadow
validator. One iteration:

1. the PS sends the current weights and version to every worker (``rpc_async``); each plays
   ``episodes_per_iter`` episodes with its own simulator, all in lockstep (one batched head
   call per step, :func:`dsan.train.rollout.collect`), and returns the rollouts;
2. the PS aggregates them and takes the PPO step (:func:`dsan.train.ppo.ppo_update`):
   version v+1;
3. the shadow validator scores v+1 greedily on held-out episodes; if the score drops more
   than ``rollback_threshold`` allocation points below the last good version, the PS
   restores the last good weights and optimiser state and logs a ``rollback`` event;
   otherwise v+1 becomes the last good version.

The same code runs across hosts: every process calls :func:`run` with its rank and the
rendezvous address (``--master-addr/--master-port``). ``inject_degraded_at`` corrupts the
weights after that iteration's update, to prove the rollback (tests and demos only).
"""

from __future__ import annotations

import copy
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp

from dsan.model.export import save
from dsan.model.net import DSANNet, ModelConfig
from dsan.train.env import EnvConfig, make_episode
from dsan.train.ppo import EVAL_SEED_BASE, Args, _CsvLog, ppo_update
from dsan.train.rollout import Rollout, collect


@dataclass
class DistConfig:
    workers: int = 2
    master_addr: str = "127.0.0.1"
    master_port: int = 29533
    rollback_threshold: float = 1.0  # allocation percentage points
    inject_degraded_at: int = -1
    rpc_timeout_s: float = 600.0

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError("DistConfig.workers must be >= 1")
        if self.rollback_threshold < 0:
            raise ValueError("DistConfig.rollback_threshold must be >= 0")


# --- remote functions (run in the worker / shadow processes) --------------------------------
_MODEL: DSANNet | None = None


def _local_model(cfg: dict[str, Any], state: dict[str, torch.Tensor]) -> DSANNet:
    global _MODEL
    if _MODEL is None:
        _MODEL = DSANNet(ModelConfig(**cfg))
    _MODEL.load_state_dict(state)
    return _MODEL.eval()


def play(
    cfg: dict[str, int], state: dict[str, torch.Tensor], env: EnvConfig, seeds: list[int]
) -> tuple[list[Rollout], float, float]:
    """Worker: play one episode per seed with the given weights, all in lockstep (one batched
    head call per step, :func:`dsan.train.rollout.collect`); returns rollouts, wall seconds
    and CPU seconds (the CPU time is what a busy shared machine does not inflate much).
    Rollouts pickle as a few flat arrays each, so shipping them back is cheap."""
    torch.set_num_threads(1)
    model = _local_model(cfg, state)
    t0, c0 = time.perf_counter(), time.process_time()
    eps = [make_episode(env, s) for s in seeds]
    ros = collect(eps, model, "sample", rng=np.random.default_rng(seeds[0] if seeds else 0))
    return ros, time.perf_counter() - t0, time.process_time() - c0


def validate(
    cfg: dict[str, int], state: dict[str, torch.Tensor], env: EnvConfig, seeds: list[int]
) -> float:
    """Shadow: greedy allocation % of the given weights on held-out episodes (the decisions
    :func:`dsan.train.ppo.evaluate` takes, played in lockstep)."""
    torch.set_num_threads(1)
    eps = [make_episode(env, s) for s in seeds]
    ros = collect(eps, _local_model(cfg, state), "greedy", keep=False)
    return float(np.mean([r.alloc_pct for r in ros]))


# --- parameter server -------------------------------------------------------------------------
class ParameterServer:
    """Holds the global model, its version and the last version the shadow accepted."""

    def __init__(self, model: DSANNet, opt: torch.optim.Optimizer, threshold: float) -> None:
        self.model, self.opt, self.threshold = model, opt, threshold
        self.version = 0
        self.good_version = 0
        self.good_score = -float("inf")
        self._good = self._snapshot()
        self.rollbacks: list[dict[str, Any]] = []

    def _snapshot(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        return copy.deepcopy(self.model.state_dict()), copy.deepcopy(self.opt.state_dict())

    def weights(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}

    def bump(self) -> int:
        self.version += 1
        return self.version

    def judge(self, score: float) -> bool:
        """Accept the current version (True) or roll back to the last good one (False)."""
        if score >= self.good_score - self.threshold:
            self.good_score = (
                max(self.good_score, score) if self.good_score > -float("inf") else score
            )
            self.good_version = self.version
            self._good = self._snapshot()
            return True
        self.rollbacks.append(
            {
                "from_version": self.version,
                "to_version": self.good_version,
                "score": score,
                "good_score": self.good_score,
            }
        )
        self.model.load_state_dict(self._good[0])
        self.opt.load_state_dict(self._good[1])
        return False


def _driver(a: Args, d: DistConfig) -> dict[str, Any]:
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    rng = np.random.default_rng(a.seed)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    env = a.env()
    model = DSANNet(ModelConfig(hidden=a.hidden, head=a.head))
    init = a.extra.get("init_weights")
    if init:
        model.load_state_dict(torch.load(init, weights_only=True))
    ps = ParameterServer(
        model, torch.optim.Adam(model.parameters(), lr=a.ppo_lr), d.rollback_threshold
    )
    cfg = model.cfg.to_dict()
    workers = [f"worker{i}" for i in range(1, d.workers + 1)]
    eval_seeds = [EVAL_SEED_BASE + i for i in range(a.eval_episodes)]
    log = _CsvLog(out / "metrics.csv", resume=False)
    t0 = time.perf_counter()
    ps.judge(rpc.rpc_sync("shadow", validate, args=(cfg, ps.weights(), env, eval_seeds)))
    throughput: list[float] = []
    per_cpu: list[float] = []
    for it in range(a.iterations):
        state = ps.weights()
        futs = [
            rpc.rpc_async(
                w,
                play,
                args=(
                    cfg,
                    state,
                    env,
                    [int(s) for s in rng.integers(10_000, size=a.episodes_per_iter)],
                ),
            )
            for w in workers
        ]
        t_col = time.perf_counter()
        results = [f.wait() for f in futs]
        wall = time.perf_counter() - t_col
        ros = [r for rs, _, _ in results for r in rs]
        decisions = sum(len(r) for r in ros)
        throughput.append(decisions / wall)
        per_cpu.append(decisions / max(sum(c for _, _, c in results), 1e-9))
        st = ppo_update(ps.model, ps.opt, ros, a, rng)
        v = ps.bump()
        if it == d.inject_degraded_at:
            with torch.no_grad():  # a deliberately broken version: prefer the worst nodes
                ps.model.head.skip.weight.mul_(-50.0)
                ps.model.head.skip.bias.zero_()
        score = rpc.rpc_sync("shadow", validate, args=(cfg, ps.weights(), env, eval_seeds))
        ok = ps.judge(score)
        log.write(
            {
                "iteration": it,
                "phase": "ppo-dist",
                "reward": float(np.mean([sum(r.reward) for r in ros])),
                "eval_alloc_pct": score,
                "decisions_per_s": decisions / wall,
                "wall_s": time.perf_counter() - t0,
                "event": "accept" if ok else f"rollback v{v}->v{ps.good_version}",
                **st,
            }
        )
        if not ok:
            print(
                f"[dsan train] shadow rejected version {v} (alloc {score:.2f}% < "
                f"{ps.good_score:.2f}% - {d.rollback_threshold}): "
                f"rolled back to v{ps.good_version}",
                flush=True,
            )
    summary = {
        "workers": d.workers,
        "versions": ps.version,
        "good_version": ps.good_version,
        "good_score": ps.good_score,
        "rollbacks": ps.rollbacks,
        "decisions_per_s": throughput,
        "decisions_per_worker_cpu_s": per_cpu,
        "wall_s": time.perf_counter() - t0,
        "final_weights_equal_good": all(
            torch.equal(a_, b_)
            for a_, b_ in zip(ps.model.state_dict().values(), ps._good[0].values(), strict=True)
        ),
    }
    save(
        ps.model,
        out / "model",
        version=f"dsan-dist-{ps.good_version}",
        training=asdict(a),
        evaluation={"eval_alloc_pct": ps.good_score},
        exports=a.export,
    )
    return summary


def _entry(rank: int, world: int, a: Args, d: DistConfig, result: Any) -> None:
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = d.master_addr, str(d.master_port)
    torch.set_num_threads(1)
    name = "ps" if rank == 0 else ("shadow" if rank == world - 1 else f"worker{rank}")
    opts = rpc.TensorPipeRpcBackendOptions(
        num_worker_threads=4,
        rpc_timeout=d.rpc_timeout_s,
        init_method=f"tcp://{d.master_addr}:{d.master_port}",
        _transports=["uv"],
    )
    rpc.init_rpc(name, rank=rank, world_size=world, rpc_backend_options=opts)
    try:
        if rank == 0:
            out = _driver(a, d)
            if result is not None:
                result.update(out)
    finally:
        rpc.shutdown()


def run(a: Args, d: DistConfig, rank: int | None = None) -> dict[str, Any]:
    """Spawn PS + workers + shadow locally (``rank`` None), or run one rank of a multi-host job."""
    world = d.workers + 2
    if rank is not None:
        _entry(rank, world, a, d, None)
        return {}
    with mp.Manager() as mgr:
        result = mgr.dict()
        mp.spawn(_entry, args=(world, a, d, result), nprocs=world, join=True)
        return dict(result)
