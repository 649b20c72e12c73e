"""Metric formulas on values worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from dsan.sim.scenario import contention as ct
from dsan.sim.scenario.metrics import billed_seconds, p99, queueing, utilization


def test_utilization_is_time_weighted_used_over_allocatable() -> None:
    u = utilization(np.array([50.0, 25.0, 30.0]), np.array([100.0, 100.0, 40.0]))
    assert u["cpu_util_pct"] == pytest.approx(50.0)
    assert u["mem_util_pct"] == pytest.approx(25.0)
    assert u["gpu_util_pct"] == pytest.approx(75.0)
    assert u["utilization_pct"] == pytest.approx(50.0)


def test_utilization_without_gpu_capacity_counts_zero() -> None:
    assert utilization(np.array([1.0, 1.0, 0.0]), np.array([2.0, 4.0, 0.0]))["gpu_util_pct"] == 0


def test_p99_is_nearest_rank() -> None:
    assert p99(np.arange(1.0, 101.0)) == 99.0
    assert p99(np.arange(1.0, 201.0)) == 198.0
    assert p99(np.array([7.0])) == 7.0
    assert p99(np.array([])) == 0.0


def test_billed_seconds_stop_after_grace() -> None:
    on = np.array([True, True, True, False])
    empty = np.array([np.inf, 0.0, 450.0, 0.0])
    got = billed_seconds(500.0, 1000.0, on, empty, 600.0)
    # busy: all 500 s; empty since 0: off at 600 -> 100 s; empty since 450: off at 1050; off: 0
    np.testing.assert_allclose(got, [500.0, 100.0, 500.0, 0.0])


def test_queueing_counts_waits_over_threshold() -> None:
    events, mean = queueing(np.array([0.0, 31.0, 100.0, 30.0]), 30.0)
    assert events == 2
    assert mean == pytest.approx(40.25)


def test_node_speed() -> None:
    speed = ct.node_speed(np.array([8.0, 16.0, 32.0]), np.array([16.0, 16.0, 16.0]), 0.8, 1.0)
    # D = 0.5: uncontended; D = 1: 1/(1+0.2); D = 2: (1/2)/(1+1.2)
    np.testing.assert_allclose(speed, [1.0, 1 / 1.2, 0.5 / 2.2])


def test_mm1_tail() -> None:
    lam, mu = np.array([70.0, 120.0]), np.array([100.0, 100.0])
    np.testing.assert_allclose(ct.mm1_tail(lam, mu, 0.25), [np.exp(-7.5), 1.0])


def test_service_violations_mixture_and_empty_service() -> None:
    svc = np.array([0, 0, 1])
    lam = np.array([70.0, 70.0, 70.0])
    # service 0: one fast and one slow replica -> mean tail (5.5e-4 + 1)/2 > 1 %: violated
    mu = np.array([100.0, 60.0, 100.0])
    v = ct.service_violations(svc, lam, mu, 0.25, 3, np.array([2, 1, 0]))
    assert v.tolist() == [True, False, True]  # service 2 has no running replica


def test_diurnal_rho_peak_and_trough() -> None:
    assert ct.diurnal_rho(14 * 3600, 0.2, 0.7, 14.0) == pytest.approx(0.7)
    assert ct.diurnal_rho(2 * 3600, 0.2, 0.7, 14.0) == pytest.approx(0.2)
