"""The actions search's mechanics on a stubbed episode (the real episodes are whole scenario
days): a search over a subset of the fields moves only those, draws what a search over just
those fields always drew, and a continued search starts from a model directory's actions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dsan.policies.dsan_actions import ACTIONS, ActionParams, save_actions
from dsan.train import actions_search as search


def stub_play(a: search.Args, p: ActionParams | None, seed: int) -> dict[str, Any]:
    """A reward peaked at ls_headroom 0.8 and w_count 1.0 (Kubernetes' actions: 0)."""
    r = 0.0 if p is None else -(p.ls_headroom - 0.8) ** 2 - 0.01 * (p.w_count - 1.0) ** 2
    return {"reward": r, "utilization_pct": 50.0, "jct_s": 1.0, "sla_violation_pct": 0.0,
            "p99_task_latency_s": 1.0, "burst_queued": 0, "reclaim_gpu_s": 0.0}


def rows(out: Path) -> list[dict[str, str]]:
    lines = (out / "search.csv").read_text().splitlines()
    head = lines[0].split(",")
    return [dict(zip(head, ln.split(","), strict=True)) for ln in lines[1:]]


def test_a_subset_search_moves_only_its_fields_from_the_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search, "play", stub_play)
    start = ActionParams(w_gpu_h=0.5, w_core_h=1.5, gpu_reserve=0.3)
    (tmp_path / "model").mkdir()
    save_actions(tmp_path / "model", start, {"version": "start"})
    a = search.Args(out=str(tmp_path / "out"), population=4, iterations=2, init_sd=0.5,
                    init_from=str(tmp_path / "model"), search=("ls_headroom",))
    manifest = search.main(a)
    got = rows(tmp_path / "out")
    assert len(got) == 8
    for r in got:  # every other field stays at the start
        assert float(r["w_gpu_h"]) == 0.5 and float(r["gpu_reserve"]) == 0.3
        assert float(r["w_count"]) == 1.0 and r["age_s"] == "inf"
    assert float(got[0]["ls_headroom"]) == 1.0  # the start competes unperturbed
    assert len({r["ls_headroom"] for r in got}) > 2
    shipped = json.loads((tmp_path / "out" / ACTIONS).read_text())["params"]
    assert shipped["w_core_h"] == 1.5 and shipped["ls_headroom"] < 1.0
    assert "--init-from" in manifest["trained_by"] and "--search ls_headroom" in \
        manifest["trained_by"]


def test_a_subset_search_draws_for_its_fields_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The draws do not depend on the fields left out, so adding a field to ActionParams
    leaves what an older search over the others found unchanged."""
    monkeypatch.setattr(search, "play", stub_play)
    search.main(search.Args(out=str(tmp_path / "a"), population=3, iterations=1,
                            search=("w_count",)))
    z = np.random.default_rng(0).standard_normal((3, 1))[:, 0]
    want = np.clip(1.0 + 0.3 * 2.0 * z, 0.0, 2.0)  # default mean 1, sd 0.3 of the bound 0..2
    got = [float(r["w_count"]) for r in rows(tmp_path / "a")]
    assert got == pytest.approx(want.tolist())


def test_unknown_search_fields_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown ActionParams fields"):
        search.Args(search=("nope",))


def test_parallel_episodes_give_the_same_search(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search, "play", stub_play)
    for jobs in (1, 2):
        search.main(search.Args(out=str(tmp_path / str(jobs)), population=3, iterations=2,
                                search=("ls_headroom", "w_count"), jobs=jobs))
    one, two = ([{k: v for k, v in r.items() if k != "wall_s"} for r in rows(tmp_path / j)]
                for j in ("1", "2"))
    assert one == two and len(one) == 6
    assert (json.loads((tmp_path / "1" / ACTIONS).read_text())["params"]
            == json.loads((tmp_path / "2" / ACTIONS).read_text())["params"])


def failing_play(a: search.Args, p: ActionParams | None, seed: int) -> dict[str, Any]:
    if p is not None:
        raise RuntimeError("episode failed")
    return stub_play(a, p, seed)


def test_a_failed_episode_shuts_the_workers_down(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search, "play", failing_play)
    shutdowns: list[bool] = []

    class Recorded(search.ProcessPoolExecutor):
        def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
            shutdowns.append(cancel_futures)
            super().shutdown(wait, cancel_futures=cancel_futures)

    monkeypatch.setattr(search, "ProcessPoolExecutor", Recorded)
    with pytest.raises(RuntimeError, match="episode failed"):
        search.main(search.Args(out=str(tmp_path), population=3, iterations=1,
                                search=("w_count",), jobs=2))
    assert shutdowns == [True]


def test_a_dsan_search_plays_the_node_model_of_its_model_dir(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``--model-dir`` is where the searched actions land; with DSAN's node choice the node
    model must come from there too, or the actions are tuned for another model (the shipped
    one) than the one they are written beside."""
    seen: list[dict[str, Any]] = []

    class Stub:
        reclaimer: Any = None
        controller: Any = None

    def factory(name: str, seed: int, wl: Any, engine: Any, **options: Any) -> Stub:
        seen.append({"name": name, **options})
        return Stub()

    monkeypatch.setattr(search, "default_factory", factory)
    search.with_actions(None, "dsan", "out/cand")("dsan", 1, None, None)  # type: ignore[arg-type]
    search.with_actions(None, "k8s-default", "out/cand")("x", 1, None, None)  # type: ignore[arg-type]
    search.with_actions(None, "dsan")("dsan", 1, None, None)  # type: ignore[arg-type]
    assert seen == [{"name": "dsan", "model_dir": "out/cand"}, {"name": "k8s-default"},
                    {"name": "dsan"}]
