"""The offered-load model behind the v2 calibration: its moments match what the generators
draw, its diurnal peak matches a brute-force convolution, and the shipped rates are the
ones derived from the shipped targets."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from scenario_fixtures import tiny_config

from dsan.sim.scenario.config import ScenarioConfig, load
from dsan.sim.scenario.workload import TRAIN, WorkloadBuilder
from hack.scenario_offered import (
    OMEGA,
    _moments,
    batch_rate_for,
    offered,
    training_moments,
    training_rate_for,
)


def test_training_moment_matches_the_generator() -> None:
    # The generator's own sampling path (quantile table, truncation, one pod per GPU).
    cfg = load("seed-table1")
    b = WorkloadBuilder(cfg)
    b.training(np.random.default_rng(7), np.zeros(6000), False)
    gd = np.array([len(j.pods) * j.stage_work[0] for j in b.build().jobs if j.kind == TRAIN])
    exd, f = training_moments(cfg.training)
    se = gd.std() / np.sqrt(gd.size)
    assert abs(gd.mean() - exd) < 4 * se
    assert gd.max() <= 8 * cfg.training.max_duration_s
    # |F| <= E[x D] always; equality only for durations short against a day.
    assert 0 < f <= exd


def test_diurnal_peak_matches_brute_force_convolution() -> None:
    # Jobs of 2 units lasting 2 h or 10 h (half each), rate 1 + 0.6 cos(w (t - 11 h)) per h.
    d = np.array([7200.0, 36000.0])
    x = np.array([2.0, 2.0])
    exd, f = _moments(np.array([0.5, 0.5]), x, d)
    dt = 60.0
    t = np.arange(0, 5 * 86400, dt)
    lam = (1 + 0.6 * np.cos(OMEGA * (t - 11 * 3600))) / 3600.0
    surv = 0.5 * 2 * ((t < 7200).astype(float) + (t < 36000).astype(float))  # E[x 1{D > tau}]
    occ = np.convolve(lam, surv)[: t.size] * dt
    last_day = occ[-int(86400 / dt) :]
    assert last_day.mean() == pytest.approx(exd / 3600.0, rel=0.01)
    assert last_day.max() == pytest.approx((exd + 0.6 * f) / 3600.0, rel=0.01)


def test_shipped_rates_are_derived_from_the_shipped_targets() -> None:
    cfg = load("seed-table1")
    assert cfg.version == 2
    # Rounded to the nearest 0.5 job/h in the YAML.
    assert cfg.training.jobs_per_h == pytest.approx(training_rate_for(cfg), abs=0.25)
    assert cfg.batch.jobs_per_h == pytest.approx(batch_rate_for(cfg), abs=0.25)
    o = offered(cfg)
    assert 0.65 <= o["gpu_blocked"].mean_frac <= 0.80
    assert o["gpu"].mean_frac < o["gpu_blocked"].mean_frac
    # The diurnal peak stays under capacity on average (queueing only from the noise).
    assert o["gpu_blocked"].peak_frac < 1.0
    assert 0.50 <= o["cpu"].peak_frac <= 0.65
    assert o["mem"].peak_frac < o["cpu"].peak_frac


def replace(cfg: ScenarioConfig, **changes: Any) -> ScenarioConfig:
    return dataclasses.replace(cfg, **changes).validate()


def test_rates_follow_the_targets() -> None:
    cfg = load("seed-table1")
    hi = replace(cfg, load_targets=dataclasses.replace(cfg.load_targets, gpu_mean=0.75))
    assert training_rate_for(hi) > training_rate_for(cfg)
    # A busier GPU side leaves fewer cores for batch at the same CPU target.
    busier = replace(
        cfg, training=dataclasses.replace(cfg.training, jobs_per_h=2 * cfg.training.jobs_per_h)
    )
    assert batch_rate_for(busier) < batch_rate_for(cfg)
    # Setting the derived rates reproduces the targets.
    set_ = replace(hi, training=dataclasses.replace(hi.training, jobs_per_h=training_rate_for(hi)))
    set_ = replace(set_, batch=dataclasses.replace(set_.batch, jobs_per_h=batch_rate_for(set_)))
    o = offered(set_)
    assert o["gpu_blocked"].mean_frac == pytest.approx(0.75)
    assert o["cpu"].peak_frac == pytest.approx(set_.load_targets.cpu_peak)


def test_load_targets_are_validated() -> None:
    with pytest.raises(ValueError, match=r"load_targets\.gpu_mean"):
        tiny_config(load_targets={"gpu_mean": 0.0})
