"""The openb PPO trainer (``dsan train``), CleanRL style: one ``Args`` dataclass, an
imitation warm start (the teacher's best nodes, ``-log sum_{j in best} p_j``), then PPO on
openb episodes (:mod:`dsan.train.openb`). Logs ``metrics.csv``; ``ckpt.pt`` allows
``--resume``. The shipped model does not use it; :mod:`dsan.train.distributed` reuses it.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from dsan.model.net import DSANNet, ModelConfig
from dsan.train.collector import collect
from dsan.train.openb import WORKLOADS, EnvConfig, RewardWeights, make_episode
from dsan.train.rundir import RunDir
from dsan.train.teachers import OPENB_TEACHERS, make_teacher
from dsan.train.updates import imitation_update, ppo_update


@dataclass
class Args:
    out: str = "out/train"
    seed: int = 1
    hidden: int = 32
    head: str = "mlp"  # "residual": FGD score x learned scale + zero-init residual
    n_nodes: int = 96
    workloads: tuple[str, ...] = WORKLOADS
    teacher: str = "auto"  # "auto" = the best of TEACHERS_AUTO on held-out training episodes
    imitation_episodes: int = 6
    imitation_epochs: int = 4
    iterations: int = 4
    episodes_per_iter: int = 2
    eval_episodes: int = 2
    lr: float = 1e-3
    ppo_lr: float = 2e-4
    gamma: float = 1.0
    gae_lambda: float = 0.95
    clip: float = 0.2
    ppo_epochs: int = 3
    minibatch: int = 64
    ent_coef: float = 0.003
    vf_coef: float = 0.5
    w_util: float = 0.4
    w_completion: float = 0.3
    w_cost: float = 0.2
    w_sla: float = 0.1
    frag_shaping: float = 0.4
    resume: bool = False
    model_dir: str = ""  # where the exported model goes; "" = <out>/model
    export: bool = True
    progress: bool = True

    def __post_init__(self) -> None:
        if self.hidden < 4 or self.n_nodes < 2 or self.iterations < 0:
            raise ValueError("Args: hidden >= 4, n_nodes >= 2 and iterations >= 0 are required")
        if self.minibatch < 1 or self.ppo_epochs < 0 or self.episodes_per_iter < 1:
            raise ValueError("Args: minibatch >= 1, ppo_epochs >= 0 and episodes_per_iter >= 1 "
                             "are required")
        if self.eval_episodes < 1:  # the best version is chosen on them
            raise ValueError("Args: eval_episodes >= 1 is required")
        if self.teacher != "auto" and self.teacher not in OPENB_TEACHERS:
            raise ValueError(f"Args.teacher {self.teacher!r} is not a heuristic DSAN can imitate")

    def env(self) -> EnvConfig:
        w = RewardWeights(self.w_util, self.w_completion, self.w_cost, self.w_sla,
                          self.frag_shaping)
        return EnvConfig(workloads=tuple(self.workloads), n_nodes=self.n_nodes, reward=w)


def evaluate(
    model: DSANNet | None, env: EnvConfig, seeds: list[int], policy: str | None = None
) -> float:
    """Mean allocation % over held-out episodes (greedy model, or a heuristic by name)."""
    out = []
    for s in seeds:  # one at a time: a lockstep batch could break near-ties another way
        ep = make_episode(env, s)
        if policy is None:
            (ro,) = collect([ep], model, "greedy", keep=False)
        else:
            sc = make_teacher(policy, ep.target, seed=s)
            (ro,) = collect([ep], None, "teacher", sc, np.random.default_rng(s), keep=False)
        out.append(ro.summary["alloc_pct"])
    return float(np.mean(out))


TEACHERS_AUTO = ("fgd-pack", "fgd", "bestfit")
EVAL_SEED_BASE = 10_000  # held-out episode seeds never overlap training seeds (< 10_000)
#: metrics.csv's columns (``event``: the distributed trainer's accept or rollback).
PPO_FIELDS = ("iteration", "phase", "loss", "reward", "eval_alloc_pct", "decisions_per_s",
              "pg", "vf", "ent", "kl", "wall_s", "event")


def train(a: Args) -> dict[str, Any]:
    run = RunDir(a.out, PPO_FIELDS, a.seed, a.resume)
    env = a.env()
    model = DSANNet(ModelConfig(hidden=a.hidden, head=a.head))
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    eval_seeds = [EVAL_SEED_BASE + i for i in range(a.eval_episodes)]
    state = run.restore(model, opt)
    rng = run.rng
    baselines = state.get("baselines") or {
        p: evaluate(None, env, eval_seeds, p) for p in TEACHERS_AUTO
    }
    teacher = a.teacher if a.teacher != "auto" else max(baselines, key=lambda p: baselines[p])
    if teacher not in baselines:
        baselines[teacher] = evaluate(None, env, eval_seeds, teacher)
    parity_at = max(baselines.values())  # "best-heuristic parity"
    parity_s = state.get("parity_s")
    if run.start_it == 0:
        eps = []
        for _ in range(a.imitation_episodes):
            ep = make_episode(env, int(rng.integers(10_000)))
            eps += collect([ep], None, "teacher", make_teacher(teacher, ep.target, a.seed), rng)
        il = imitation_update(model, opt, eps, a.imitation_epochs, a.minibatch, rng)
        score = best = evaluate(model, env, eval_seeds)
        if parity_s is None and score >= parity_at - 1e-9:
            parity_s = run.wall_s()
        run.log.write({"iteration": -1, "phase": "imitation", "loss": il,
                       "eval_alloc_pct": score, "wall_s": run.wall_s()})
        for g in opt.param_groups:
            g["lr"] = a.ppo_lr
        # The warm-started model is the first "best": PPO must beat it to replace it.
        run.save_best(model)
    elif "best" in state:  # best.pt's score: the resumed model may be worse than it
        best = float(state["best"])
    else:  # a checkpoint from before it recorded the best score
        best = evaluate(model, env, eval_seeds)
    bar = tqdm(range(run.start_it, a.iterations), disable=not a.progress, desc="ppo")
    for it in bar:
        t_col = time.perf_counter()
        todo = [make_episode(env, int(rng.integers(10_000))) for _ in range(a.episodes_per_iter)]
        ros = collect(todo, model, "sample", rng=rng)
        col_s = time.perf_counter() - t_col
        decisions = sum(len(r) for r in ros)
        st = ppo_update(model, opt, ros, a, rng)
        score = evaluate(model, env, eval_seeds)
        if parity_s is None and score >= parity_at - 1e-9:
            parity_s = run.wall_s()
        rew = float(np.mean([sum(r.reward) for r in ros]))
        bar.set_postfix(reward=f"{rew:.3f}", alloc=f"{score:.2f}",
                        teacher=f"{baselines[teacher]:.2f}")
        run.log.write({"iteration": it, "phase": "ppo", "reward": rew, "eval_alloc_pct": score,
                       "decisions_per_s": decisions / col_s, "wall_s": run.wall_s(), **st})
        if score >= best:
            best = score
            run.save_best(model)
        run.checkpoint(model, opt, it, baselines=baselines, parity_s=parity_s, best=best)
    run.load_best(model)
    summary = {
        "eval_alloc_pct": evaluate(model, env, eval_seeds),
        "baselines_alloc_pct": baselines,
        "teacher": teacher,
        "wall_s": run.wall_s(),
        "parity_wall_s": parity_s,
        "eval_seeds": eval_seeds,
    }
    return run.finish(model, summary, a.model_dir, f"dsan-{a.seed}-{int(time.time())}",
                      asdict(a), a.export)
