"""The scenario stage (``dsan train --scenario``): imitation of the teacher with DAgger (a
cloned policy drifts into states the teacher never visits), then PPO, on windows of the
seed scenario, starting from the openb stage with the encoders, prior scale and skip frozen
and the residual gated off without telemetry (:mod:`dsan.train.gate`).
"""

from __future__ import annotations

import shutil
import time
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dsan.features.target import TargetWorkload
from dsan.model.net import DSANNet
from dsan.policies.dsan_actions import ACTIONS, load_actions
from dsan.sim.scenario.cluster import build_cluster
from dsan.sim.scenario.config import load as load_scenario
from dsan.sim.scenario.workload import generate
from dsan.train.anchor import OpenbAnchor
from dsan.train.collector import collect, softmax_choice
from dsan.train.gate import freeze, gate, gate_margin
from dsan.train.rollout import Rollout
from dsan.train.rundir import RunDir
from dsan.train.skipweights import openb_stage
from dsan.train.teachers import Composite
from dsan.train.updates import imitation_update, ppo_update
from dsan.train.window import ScenarioReward, WindowConfig, WindowEnv

EVAL_SEED_BASE = 10_000
#: metrics.csv's columns of the scenario stage (every float of a row also goes to TensorBoard).
SCENARIO_FIELDS = ("iteration", "phase", "loss", "reward", "eval_reward", "eval_utilization_pct",
                   "eval_sla_violation_pct", "eval_cost", "eval_p99_task_latency_s",
                   "eval_queueing_events", "pg", "vf", "ent", "kl", "wall_s")


@dataclass
class ScenarioArgs:
    scenario: str = "seed-table1"
    out: str = "out/train-scenario"
    seed: int = 1
    init_model: str = ""  # "" = a fresh residual DSAN (hidden 32) seeded by ``seed``
    openb_skip: str = ""  # the openb stage's search result (JSON)
    start_hours: tuple[float, ...] = (0.0, 8.0, 10.0, 12.0, 14.0)
    window_h: float = 1.0
    record_every: int = 2
    imitation_episodes: int = 10
    imitation_epochs: int = 6
    dagger_rounds: int = 4
    dagger_episodes: int = 2
    iterations: int = 3
    episodes_per_iter: int = 1
    eval_episodes: int = 2
    lr: float = 1e-2
    ppo_lr: float = 1e-4
    gamma: float = 1.0
    gae_lambda: float = 0.95
    clip: float = 0.2
    ppo_epochs: int = 2
    minibatch: int = 64
    ent_coef: float = 0.001
    vf_coef: float = 0.5
    w_util: float = 0.4
    w_completion: float = 0.3
    w_cost: float = 0.2
    w_sla: float = 0.1
    sla_shaping: float = 1.0
    imitate_gpu_pods: bool = True  # False: GPU pods keep the openb ranking on the scenario too
    class_by_priority: bool = False  # imitation classes are (task type, priority)
    #: Imitation targets: the teacher's nodes within this many points of its best; < 0 = the
    #: teacher's own ``tolerance``.
    imitation_tolerance: float = -1.0
    anchor_episodes: int = 2
    anchor_coef: float = 0.0  # the gate keeps openb; the anchor then only checks
    resume: bool = False
    model_dir: str = ""
    #: A model directory whose ``actions.json`` (the actions beyond node choice,
    #: :mod:`dsan.train.actions_search`) ships beside the node model: the selection's
    #: validation days play with it; "" = Kubernetes' actions.
    actions_from: str = ""
    export: bool = True
    progress: bool = True
    #: Train each of these seeds and ship the one best on full validation days
    #: (:mod:`dsan.train.selection`); empty = train ``seed`` alone.
    select_seeds: tuple[int, ...] = ()
    validate_seeds: tuple[int, ...] = (10_001, 10_002, 10_003)
    validate_hours: float = 24.0
    select_jobs: int = 1  # seeds trained and validated in parallel processes

    def __post_init__(self) -> None:
        if self.window_h <= 0 or not self.start_hours or self.record_every < 1:
            raise ValueError("ScenarioArgs: window_h > 0, start_hours and record_every >= 1")
        if self.iterations < 0 or self.imitation_episodes < 0:
            raise ValueError("ScenarioArgs: iterations and imitation_episodes must be >= 0")
        if self.minibatch < 1 or self.episodes_per_iter < 1 or self.eval_episodes < 1:
            raise ValueError("ScenarioArgs: minibatch, episodes_per_iter and eval_episodes "
                             "must be >= 1")
        if self.select_seeds and (
            not self.validate_seeds
            or self.validate_hours <= 0
            or self.select_jobs < 1
            or len(set(self.select_seeds)) != len(self.select_seeds)
        ):
            raise ValueError(
                "ScenarioArgs: --select-seeds needs distinct seeds, --validate-seeds, "
                "--validate-hours > 0 and --select-jobs >= 1"
            )
        if self.actions_from:  # a missing or bad file fails now, not after the training
            if not (Path(self.actions_from) / ACTIONS).is_file():
                raise ValueError(f"ScenarioArgs: {self.actions_from} has no {ACTIONS}")
            load_actions(self.actions_from)


def play(
    a: ScenarioArgs,
    seed: int,
    start_h: float,
    model: DSANNet | None,
    mode: str,
    rng: np.random.Generator,
) -> Rollout:
    """One window of seed ``seed`` starting at ``start_h``, the teacher warming it up."""
    cfg = load_scenario(a.scenario)
    gpu_models = build_cluster(cfg.cluster, cfg.metrics.telemetry_len).gpu_models
    target = TargetWorkload.from_pods(generate(cfg, seed).pods, gpu_models)  # the run's own
    teacher = Composite(target)
    if a.imitation_tolerance >= 0:
        teacher.tolerance = a.imitation_tolerance
    win = WindowConfig(start_h, a.window_h)
    reward = ScenarioReward(a.w_util, a.w_completion, a.w_cost, a.w_sla, a.sla_shaping)
    env = WindowEnv(win, reward, seed, cfg, teacher, target, rng)
    # Rows are kept only with a model: the steps keep their node embeddings.
    (ro,) = collect([env], model, mode, teacher, rng, keep=model is not None,
                    record_every=a.record_every, label_gpu_pods=a.imitate_gpu_pods,
                    choose=softmax_choice)
    return ro


def evaluate(a: ScenarioArgs, model: DSANNet | None) -> dict[str, float]:
    """Greedy model (or the teacher, ``model=None``) on held-out seeds: reward and metrics."""
    rows = []
    for i in range(a.eval_episodes):
        start = a.start_hours[i % len(a.start_hours)]
        mode = "teacher" if model is None else "greedy"
        ro = play(a, EVAL_SEED_BASE + i, start, model, mode, np.random.default_rng(i))
        rows.append({"reward": ro.total, **ro.summary})
    return {k: float(np.mean([r[k] for r in rows])) for k in rows[0]} if rows else {}


def train(a: ScenarioArgs) -> dict[str, Any]:
    from torch.utils.tensorboard import SummaryWriter
    from tqdm import tqdm

    run = RunDir(a.out, SCENARIO_FIELDS, a.seed, a.resume)
    model, manifest = openb_stage(a.init_model, a.seed, a.openb_skip)
    gate(model)
    params = freeze(model.train())
    anchor = OpenbAnchor(model, a.anchor_episodes, a.anchor_coef)
    opt = torch.optim.Adam(params, lr=a.lr)
    tb = SummaryWriter(str(run.path / "tb"))
    state = run.restore(model, opt)
    rng = run.rng
    teacher_eval = state.get("teacher_eval") or evaluate(a, None)
    balance = "task-priority" if a.class_by_priority else "task"
    extra = partial(anchor.loss, model, rng)  # the openb anchor: 0 unless anchor_coef > 0

    def window(mode: str, start: int | None = None) -> Rollout:
        """A window of a fresh training seed: start hour ``start`` of ``a.start_hours``
        (cycled, so every window, web placement at 0 h too, is seen), else one drawn."""
        seed, hours = int(rng.integers(10_000)), a.start_hours
        h = float(rng.choice(hours)) if start is None else hours[start % len(hours)]
        return play(a, seed, h, model, mode, rng)

    if not state:
        ros = [window("teacher", i) for i in range(a.imitation_episodes)]
        loss = imitation_update(
            model, opt, ros, a.imitation_epochs, a.minibatch, rng, balance, extra
        )
        for r in range(a.dagger_rounds):  # the model drives, the teacher labels its states
            ros += [window("dagger", r + i) for i in range(a.dagger_episodes)]
            loss = imitation_update(model, opt, ros, 1, a.minibatch, rng, balance, extra)
        ev = evaluate(a, model)
        run.log.write({"iteration": -1, "phase": "imitation", "loss": loss, **_eval(ev),
                       "wall_s": run.wall_s()}, tb)
        for g in opt.param_groups:
            g["lr"] = a.ppo_lr
        run.save_best(model)
        state = {"best": ev.get("reward", -np.inf)}
    best = float(state.get("best", -np.inf))
    bar = tqdm(range(run.start_it, a.iterations), disable=not a.progress, desc="ppo-scenario")
    for it in bar:
        ros = [window("sample") for _ in range(a.episodes_per_iter)]
        st = ppo_update(model, opt, ros, a, rng, extra)
        ev = evaluate(a, model)
        rew = float(np.mean([sum(r.reward) for r in ros]))
        bar.set_postfix(reward=f"{rew:.3f}", util=f"{ev['utilization_pct']:.1f}",
                        sla=f"{ev['sla_violation_pct']:.2f}")
        run.log.write({"iteration": it, "phase": "ppo", "reward": rew, **_eval(ev), **st,
                       "wall_s": run.wall_s()}, tb)
        if ev["reward"] >= best:
            best = ev["reward"]
            run.save_best(model)
        run.checkpoint(model, opt, it, teacher_eval=teacher_eval, best=best)
    tb.close()
    run.load_best(model)
    summary = {
        "eval": evaluate(a, model),
        "teacher_eval": teacher_eval,
        "wall_s": run.wall_s(),
        "init_model": manifest.get("version"),
        **anchor.check(model),
        "openb_gate_margin": max(
            (gate_margin(model, torch.from_numpy(np.concatenate(r.x))) for r in anchor.rollouts),
            default=float("-inf"),
        ),
    }
    out = run.finish(model, summary, a.model_dir, f"dsan-scenario-{a.seed}-{int(time.time())}",
                     {**manifest.get("training", {}), "scenario_stage": asdict(a)}, a.export)
    src, dst = Path(a.actions_from) / ACTIONS, Path(a.model_dir or run.path / "model") / ACTIONS
    if a.actions_from and src.resolve() != dst.resolve():
        shutil.copyfile(src, dst)
    return out


def _eval(ev: dict[str, float]) -> dict[str, float]:
    return {f"eval_{k}": v for k, v in ev.items()}
