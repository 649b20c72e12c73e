"""Distributed openb PPO on torch.distributed.rpc (``dsan train --workers N``): rank 0 the
parameter server (PS), 1..N rollout workers, N+1 a shadow validator.

Per iteration the workers play with the PS's weights and keep their rollouts; the PPO step
takes their gradients per minibatch (:mod:`dsan.train.learner`: shipping the rollouts to the
PS instead cost about as much as collecting them); the shadow scores the new version and a
drop over ``rollback_threshold`` allocation points restores the last good one.
``inject_degraded_at`` corrupts an iteration's weights to prove the rollback (tests).
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp

from dsan.model.export import save
from dsan.model.net import DSANNet, ModelConfig
from dsan.train.collector import collect
from dsan.train.learner import Grad, LocalLearner, Share, global_moments, ppo_rounds
from dsan.train.openb import EnvConfig, make_episode
from dsan.train.paramserver import ParameterServer
from dsan.train.ppo import EVAL_SEED_BASE, PPO_FIELDS, Args
from dsan.train.rollout import RowStore
from dsan.train.rundir import RunDir


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


_LEARNER: LocalLearner | None = None
_ROWS = RowStore()  # the worker's feature rows, reused every round


def play(
    cfg: dict[str, int],
    state: dict[str, torch.Tensor],
    env: EnvConfig,
    seeds: list[int],
    a: Args,
    minibatch: int,
) -> Share:
    """Worker: one episode per seed in lockstep, the rollouts kept here; returns only what
    the PS needs to run the rounds."""
    global _LEARNER
    torch.set_num_threads(1)
    _LEARNER = None  # free the previous iteration's rollouts before playing new ones
    _ROWS.reset()  # ... and write the new ones over their feature rows
    model = _local_model(cfg, state)
    c0, r0 = time.process_time(), resource.getrusage(resource.RUSAGE_SELF)
    eps = [make_episode(env, s) for s in seeds]
    rng = np.random.default_rng(seeds[0] if seeds else 0)
    ros = collect(eps, model, "sample", rng=rng, store=_ROWS)
    _LEARNER = LocalLearner(model, ros, a, minibatch, rng)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    return _LEARNER.share(time.process_time() - c0, r1.ru_stime - r0.ru_stime,
                          r1.ru_minflt - r0.ru_minflt)


def gradient(params: torch.Tensor, epoch: int, k: int, mu: float, sd: float) -> Grad:
    """Worker: the gradient on this worker's k-th minibatch."""
    assert _LEARNER is not None, "gradient() before play()"
    return _LEARNER.grad(params, epoch, k, mu, sd)


def validate(
    cfg: dict[str, int], state: dict[str, torch.Tensor], env: EnvConfig, seeds: list[int]
) -> float:
    """Shadow: the greedy allocation % of the weights on held-out episodes."""
    torch.set_num_threads(1)
    eps = [make_episode(env, s) for s in seeds]
    ros = collect(eps, _local_model(cfg, state), "greedy", keep=False)
    return float(np.mean([r.summary["alloc_pct"] for r in ros]))


#: Per-iteration measures the driver's summary lists.
MEASURES = ("decisions", "decisions_per_s", "decisions_per_worker_cpu_s", "update_s",
            "iteration_s", "worker_sys_s", "worker_minflt")


def _step(ps: ParameterServer, a: Args, d: DistConfig, workers: list[str], cfg: dict[str, Any],
          env: EnvConfig, rng: np.random.Generator) -> tuple[list[float], dict[str, float],
                                                           dict[str, float]]:
    """Workers play with the PS's weights, then the PPO step on its model: each episode's
    reward, the loss parts and the iteration's measures."""
    state, t0 = ps.weights(), time.perf_counter()
    seeds = [[int(s) for s in rng.integers(10_000, size=a.episodes_per_iter)] for _ in workers]
    # each worker's minibatches hold minibatch / workers steps: a round sees `minibatch`
    mb = max(1, a.minibatch // d.workers)
    futs = [rpc.rpc_async(w, play, args=(cfg, state, env, ss, a, mb))
            for w, ss in zip(workers, seeds, strict=True)]
    shares: list[Share] = [f.wait() for f in futs]
    t_up = time.perf_counter()
    mu, sd = global_moments(shares)

    def submit(j: int, params: torch.Tensor, e: int, k: int) -> Any:
        return rpc.rpc_async(workers[j], gradient, args=(params, e, k, mu, sd))

    stats = ppo_rounds(ps.model, ps.opt, submit, [s.minibatches for s in shares])
    n = sum(s.decisions for s in shares)
    m = {"decisions": n, "decisions_per_s": n / (t_up - t0),
         "decisions_per_worker_cpu_s": n / max(sum(s.cpu_s for s in shares), 1e-9),
         "update_s": time.perf_counter() - t_up,
         "worker_sys_s": sum(s.sys_s for s in shares),
         "worker_minflt": sum(s.minflt for s in shares)}
    return [r for s in shares for r in s.episode_rewards], stats, m


def _driver(a: Args, d: DistConfig) -> dict[str, Any]:
    run = RunDir(a.out, PPO_FIELDS, a.seed, resume=False)
    rng = run.rng
    env = a.env()
    model = DSANNet(ModelConfig(hidden=a.hidden, head=a.head))
    opt = torch.optim.Adam(model.parameters(), lr=a.ppo_lr)
    ps = ParameterServer(model, opt, d.rollback_threshold)
    cfg = model.cfg.to_dict()
    workers = [f"worker{i}" for i in range(1, d.workers + 1)]
    eval_seeds = [EVAL_SEED_BASE + i for i in range(a.eval_episodes)]
    ps.judge(rpc.rpc_sync("shadow", validate, args=(cfg, ps.weights(), env, eval_seeds)))
    hist: dict[str, list[float]] = {k: [] for k in MEASURES}
    for it in range(a.iterations):
        t_it = time.perf_counter()
        rewards, stats, m = _step(ps, a, d, workers, cfg, env, rng)
        v = ps.bump()
        if it == d.inject_degraded_at:
            with torch.no_grad():  # a deliberately broken version: prefer the worst nodes
                ps.model.head.skip.weight.mul_(-50.0)
                ps.model.head.skip.bias.zero_()
        score = rpc.rpc_sync("shadow", validate, args=(cfg, ps.weights(), env, eval_seeds))
        ok = ps.judge(score)
        m["iteration_s"] = time.perf_counter() - t_it  # collection + PPO step + validation
        for k, x in m.items():
            hist[k].append(x)
        run.log.write({"iteration": it, "phase": "ppo-dist",
                   "reward": float(np.mean(rewards)) if rewards else 0.0,
                   "eval_alloc_pct": score, "decisions_per_s": m["decisions_per_s"],
                   "wall_s": run.wall_s(),
                   "event": "accept" if ok else f"rollback v{v}->v{ps.good_version}", **stats})
        if not ok:
            print(f"[dsan train] shadow rejected version {v} (alloc {score:.2f}% < "
                  f"{ps.good_score:.2f}% - {d.rollback_threshold}): "
                  f"rolled back to v{ps.good_version}", flush=True)
    summary = {
        "workers": d.workers,
        "versions": ps.version,
        "good_version": ps.good_version,
        "good_score": ps.good_score,
        "rollbacks": ps.rollbacks,
        **{k: hist[k] for k in MEASURES[:5]},
        "wall_s": run.wall_s(),
        **{k: hist[k] for k in MEASURES[5:]},
        "final_weights_equal_good": ps.holds_good_weights(),
    }
    save(ps.model, run.path / "model", version=f"dsan-dist-{ps.good_version}", training=asdict(a),
         evaluation={"eval_alloc_pct": ps.good_score}, exports=a.export)
    return summary


def _entry(rank: int, world: int, a: Args, d: DistConfig, result: Any) -> None:
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = d.master_addr, str(d.master_port)
    torch.set_num_threads(1)
    name = "ps" if rank == 0 else ("shadow" if rank == world - 1 else f"worker{rank}")
    opts = rpc.TensorPipeRpcBackendOptions(
        num_worker_threads=4, rpc_timeout=d.rpc_timeout_s,
        init_method=f"tcp://{d.master_addr}:{d.master_port}", _transports=["uv"])
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
