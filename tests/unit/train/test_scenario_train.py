"""Scenario training: the per-task-type teacher, windows played in DAgger and teacher mode,
train/resume, CLI. The window's own reward and node inputs are test_window.py's."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import torch

from dsan.api.types import TASK_TYPES
from dsan.core.snapshot import ClusterSnapshot, PodSpec
from dsan.model.export import DEFAULT_DIR, load
from dsan.sim.scenario.cluster import build_cluster
from dsan.sim.scenario.config import load as load_scenario
from dsan.train.collector import collect, softmax_choice
from dsan.train.gate import TRAINED
from dsan.train.scenario_train import ScenarioArgs, train
from dsan.train.teachers import Composite
from dsan.train.window import ScenarioReward, WindowConfig, WindowEnv

CFG = load_scenario("seed-table1")


def _snap() -> ClusterSnapshot:
    return build_cluster(CFG.cluster, CFG.metrics.telemetry_len)


def _pod(kind: str, cpu: float = 4000.0) -> PodSpec:
    return PodSpec("p", cpu, 8192.0, task_type=TASK_TYPES.index(kind), image=2)


def test_composite_packs_cpu_pods_on_warm_cool_cpu_nodes() -> None:
    snap = _snap()
    small = np.flatnonzero((snap.cpu_cap == 16000) & (snap.gpu_count == 0))
    big = np.flatnonzero((snap.cpu_cap == 64000) & (snap.gpu_count == 0))
    gpu = np.flatnonzero(snap.gpu_count > 0)
    warm_cool, warm_hot, big_warm = int(small[0]), int(small[1]), int(big[0])
    snap.cpu_used[warm_cool] = 6000.0  # 10 of 16 cores after a 4-core pod: cool
    snap.cpu_used[warm_hot] = 12000.0  # 14 or 16 of 16 after: over the 0.8 threshold
    snap.cpu_used[big_warm] = 60000.0  # 64 of 64 after: hot, but big nodes host no web
    assert snap.pod_count is not None
    snap.pod_count[[warm_cool, warm_hot, big_warm]] = 1
    t = Composite(None)
    cand = np.array([warm_hot, warm_cool, int(small[2]), int(gpu[0])], dtype=np.int64)
    # Web: the warm node that stays cool (not the hot one, the cold one, or a GPU node).
    assert cand[np.argmax(t.score(_pod("web", 2000.0), snap, cand))] == warm_cool
    # Batch may run a big node hot (no web there) rather than boot a cold node.
    cand2 = np.append(cand, [big_warm, int(big[1])])
    assert cand2[np.argmax(t.score(_pod("batch"), snap, cand2))] == big_warm
    # Without the big nodes the batch pod still avoids the hot small node and the GPU node.
    assert cand[np.argmax(t.score(_pod("batch"), snap, cand))] == warm_cool


def test_dagger_window_keeps_labelled_steps_with_their_embeddings() -> None:
    model, _ = load(DEFAULT_DIR)
    win = WindowConfig(start_h=0.0, len_h=0.01)  # the web replicas' placements at 0 h
    t = Composite(None)
    ep = WindowEnv(win, ScenarioReward(), 2, CFG, t)
    (ro,) = collect([ep], model, "dagger", t, np.random.default_rng(0), choose=softmax_choice)
    assert len(ro) > 5 and ep.obs is None
    assert all(b.any() for b in ro.teacher)  # every kept step has a teacher label
    assert ro.nodes is None  # the encoders are frozen here: the steps keep embeddings
    assert all(
        x.shape[0] == e.shape[0] == b.size == c.size
        for x, e, b, c in zip(ro.x, ro.emb, ro.teacher, ro.cand, strict=True)
    )
    assert ro.total == pytest.approx(sum(ro.reward))
    assert set(ro.summary) >= {"utilization_pct", "sla_violation_pct"}


def test_train_logs_checkpoints_resumes_and_freezes(tmp_path: Path) -> None:
    kw = dict(
        out=str(tmp_path),
        start_hours=(0.0,),
        window_h=0.01,
        imitation_episodes=1,
        imitation_epochs=1,
        dagger_rounds=1,
        dagger_episodes=1,
        eval_episodes=1,
        anchor_episodes=1,
        export=False,
        progress=False,
    )
    from dsan.train.skipweights import openb_stage

    torch.manual_seed(1)  # train() seeds the same way before building its start model
    a = ScenarioArgs()
    init, _ = openb_stage(a.init_model, a.seed, a.openb_skip)
    train(ScenarioArgs(iterations=1, **kw))  # type: ignore[arg-type]
    assert (tmp_path / "ckpt.pt").is_file() and (tmp_path / "model" / "weights.pt").is_file()
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))
    train(ScenarioArgs(iterations=2, resume=True, **kw))  # type: ignore[arg-type]
    rows = list(csv.DictReader((tmp_path / "metrics.csv").open()))
    assert [r["iteration"] for r in rows] == ["-1", "0", "1"]
    assert all(r["eval_reward"] for r in rows)
    out, _ = load(tmp_path / "model")
    before, after = dict(init.named_parameters()), dict(out.named_parameters())
    for name in before:
        same = torch.equal(before[name], after[name])
        assert same or name.startswith(TRAINED), name
    assert any(not torch.equal(before[n], after[n]) for n in before if n.startswith(TRAINED))


def test_cli_scenario_mode_builds_scenario_args() -> None:
    import argparse

    from dsan.train import cli

    p = argparse.ArgumentParser()
    cli.add_parser(p.add_subparsers())
    ns = p.parse_args(
        ["train", "--scenario", "seed-table1", "--start-hours", "9", "11", "--iterations", "3"]
    )
    kw = cli.given(ScenarioArgs, ns)
    a = ScenarioArgs(**{**kw, "scenario": ns.scenario})
    assert a.start_hours == (9.0, 11.0) and a.iterations == 3 and a.window_h == 1.0
    sel = p.parse_args(
        ["train", "--scenario", "s", "--select-seeds", "1", "2", "--validate-hours", "6"]
    )
    assert cli.given(ScenarioArgs, sel) == {
        "scenario": "s", "select_seeds": (1, 2), "validate_hours": 6.0
    }
    b = cli.given(cli.Args, p.parse_args(["train", "--workloads", "x.csv"]))
    assert b == {"workloads": ("x.csv",)}


def test_gpu_pods_get_no_imitation_label_unless_asked() -> None:
    from dsan.features import FEATURE_NAMES

    col = FEATURE_NAMES.index("pod_num_gpu")
    model, _ = load(DEFAULT_DIR)
    kept = {}
    for label in (False, True):
        t = Composite(None)
        ep = WindowEnv(WindowConfig(start_h=0.0, len_h=0.3), ScenarioReward(), 3, CFG, t)
        (ro,) = collect([ep], model, "teacher", Composite(ep.target), label_gpu_pods=label,
                        choose=softmax_choice)
        kept[label] = sum(int(x[0, col] > 0) for x in ro.x)
    assert kept[False] == 0 and kept[True] > 0


def test_openb_stage_writes_the_skip_weights(tmp_path: Path) -> None:
    import json

    from dsan.features import FEATURE_NAMES
    from dsan.train.skipweights import openb_stage

    path = tmp_path / "skip.json"
    path.write_text(json.dumps({"features": ["least_allocated"], "weights": [0.25]}))
    model, manifest = openb_stage("", 1, str(path))
    w = model.head.skip.weight[0]
    assert float(w[FEATURE_NAMES.index("least_allocated")]) == pytest.approx(0.25)
    assert float(w.abs().sum()) == pytest.approx(0.25)
    assert float(torch.nn.functional.softplus(model.head.prior_scale)) == pytest.approx(1.0)
    assert manifest["training"]["skip_weights"] == {"least_allocated": 0.25}


def test_imitation_tolerance_narrows_the_teacher_labels() -> None:
    from dsan.train.scenario_train import play

    model, _ = load(DEFAULT_DIR)  # rows are kept only with a model (features, embeddings)
    labels = {}
    for tol in (-1.0, 0.0):
        a = ScenarioArgs(window_h=0.05, record_every=1, imitation_tolerance=tol)
        ro = play(a, 3, 10.0, model, "teacher", np.random.default_rng(0))
        labels[tol] = ro.teacher
    assert len(labels[-1.0]) == len(labels[0.0]) > 5  # the placements at the 10 h peak
    for wide, exact in zip(labels[-1.0], labels[0.0], strict=True):
        assert exact.any() and not (exact & ~wide).any()  # a subset of the teacher's class
    # 2 points (the teacher's own tolerance) also admit powered nodes a little less full
    assert sum(int(w.sum()) for w in labels[-1.0]) > sum(int(e.sum()) for e in labels[0.0])
