"""Training-seed selection: the ranking, the validation run, and the whole loop with resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsan.model.export import DEFAULT_DIR
from dsan.policies.dsan_actions import ACTIONS, ActionParams, save_actions
from dsan.sim.scenario.config import load as load_scenario
from dsan.sim.scenario.runner import run_policy
from dsan.train.scenario_train import ScenarioArgs
from dsan.train.selection import METRICS, rank_key, select, validate


def _row(sla: float, util: float, p99: float = 99.5, cost: float = 1.0) -> dict[str, float]:
    return {"sla_violation_pct": sla, "utilization_pct": util, "p99_task_latency_s": p99,
            "cost": cost}


def test_rank_puts_sla_first_then_utilisation_then_p99_and_cost() -> None:
    rows = [_row(0.2, 80.0), _row(0.04, 70.0), _row(0.04, 74.0), _row(0.04, 74.0, p99=90.0)]
    assert min(rows, key=rank_key) == rows[3]
    assert sorted(rows, key=rank_key) == [rows[3], rows[2], rows[1], rows[0]]
    assert min([_row(0.0, 60.0, cost=5.0), _row(0.0, 60.0, cost=4.0)], key=rank_key)["cost"] == 4


def test_validation_is_what_dsan_sim_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    v = validate("seed-table1", DEFAULT_DIR, (5,), 0.5)
    monkeypatch.setenv("DSAN_MODEL_DIR", str(DEFAULT_DIR))
    r = run_policy(load_scenario("seed-table1"), "dsan", 5, hours=0.5)
    assert v["days"] == [{"seed": 5, **{k: float(r[k]) for k in METRICS}}]
    assert v["utilization_pct"] == r["utilization_pct"] > 0


def test_select_args_are_checked() -> None:
    with pytest.raises(ValueError, match="select-seeds"):
        ScenarioArgs(select_seeds=(1, 1))
    with pytest.raises(ValueError, match="select-seeds"):
        ScenarioArgs(select_seeds=(1, 2), validate_seeds=())
    with pytest.raises(ValueError, match="select-seeds"):
        ScenarioArgs(select_seeds=(1, 2), validate_hours=0.0)
    with pytest.raises(ValueError, match="select-jobs"):
        ScenarioArgs(select_seeds=(1, 2), select_jobs=0)


def test_actions_from_must_name_a_good_actions_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"has no actions\.json"):
        ScenarioArgs(actions_from=str(tmp_path))
    (tmp_path / ACTIONS).write_text('{"params": {"w_count": 1.0}}')
    with pytest.raises(ValueError, match="want the keys"):
        ScenarioArgs(actions_from=str(tmp_path))


def test_select_trains_each_seed_ships_the_best_and_resumes(tmp_path: Path) -> None:
    src = tmp_path / "actions-src"
    src.mkdir()
    actions = save_actions(src, ActionParams(w_count=2.0, ls_headroom=0.8), {})
    a = ScenarioArgs(
        actions_from=str(actions.parent),
        out=str(tmp_path),
        start_hours=(0.0,),
        window_h=0.01,
        imitation_episodes=1,
        imitation_epochs=1,
        dagger_rounds=0,
        iterations=0,
        eval_episodes=1,
        anchor_episodes=1,
        export=False,
        progress=False,
        select_seeds=(1, 2),
        validate_seeds=(5,),
        validate_hours=0.5,
    )
    got = select(a)
    rows = json.loads((tmp_path / "selection.json").read_text())["rows"]
    assert [r["training_seed"] for r in rows] == [1, 2]
    for r in rows:  # each candidate was validated on its own model
        seed_dir = tmp_path / f"seed{r['training_seed']}"
        cached = json.loads((seed_dir / "validation.json").read_text())
        assert cached["model_dir"] == str(seed_dir / "model")
        assert r["sla_violation_pct"] == cached["sla_violation_pct"]
        # validated with the actions it ships with
        assert (seed_dir / "model" / ACTIONS).read_bytes() == actions.read_bytes()
    best = min(rows, key=rank_key)
    assert got["chosen_seed"] == best["training_seed"]
    shipped = tmp_path / "model"
    chosen = tmp_path / f"seed{best['training_seed']}" / "model"
    assert (shipped / "weights.pt").read_bytes() == (chosen / "weights.pt").read_bytes()
    assert (shipped / ACTIONS).read_bytes() == actions.read_bytes()
    manifest = json.loads((shipped / "manifest.json").read_text())
    assert manifest["eval"]["selection"]["chosen_seed"] == best["training_seed"]
    assert manifest["version"].startswith(f"dsan-scenario-{best['training_seed']}-")
    assert len(manifest["eval"]["selection"]["candidates"]) == 2

    # two seeds at a time: the same models, validations and choice as one at a time
    par = select(ScenarioArgs(**{**a.__dict__, "out": str(tmp_path / "par"), "select_jobs": 2}))
    assert par["chosen_seed"] == got["chosen_seed"]
    for s in (1, 2):
        one, two = tmp_path / f"seed{s}", tmp_path / "par" / f"seed{s}"
        assert (one / "model/weights.pt").read_bytes() == (two / "model/weights.pt").read_bytes()
        assert json.loads((one / "validation.json").read_text())["days"] == json.loads(
            (two / "validation.json").read_text()
        )["days"]

    # --resume: trained and validated seeds are kept, not redone
    stamps = {p: p.stat().st_mtime_ns for p in tmp_path.glob("seed*/*.json")}
    again = select(ScenarioArgs(**{**a.__dict__, "resume": True}))
    assert again["chosen_seed"] == got["chosen_seed"]
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps

    # the winner follows the validation: make the other seed the better one by its record
    loser = 3 - got["chosen_seed"]
    (shipped / "stale.pt2").write_bytes(b"from the previous winner")
    record = tmp_path / f"seed{loser}" / "validation.json"
    v = json.loads(record.read_text())
    record.write_text(json.dumps({**v, "sla_violation_pct": -1.0}))
    flipped = select(ScenarioArgs(**{**a.__dict__, "resume": True}))
    assert flipped["chosen_seed"] == loser
    chosen = tmp_path / f"seed{loser}" / "model"
    assert (shipped / "weights.pt").read_bytes() == (chosen / "weights.pt").read_bytes()
    assert json.loads((shipped / "manifest.json").read_text())["version"].startswith(
        f"dsan-scenario-{loser}-"
    )
    assert not (shipped / "stale.pt2").exists()
    (shipped / "manifest.json").unlink()  # not a model directory any more: refused, kept
    with pytest.raises(FileExistsError, match="not a model directory"):
        select(ScenarioArgs(**{**a.__dict__, "resume": True}))
    assert (shipped / "weights.pt").is_file()
