"""Ring buffer and window means, with a controlled clock."""

from __future__ import annotations

import numpy as np
import pytest

from deviceplugin.backend import COL, N_FIELDS
from deviceplugin.fake import FakeBackend
from deviceplugin.sampler import TelemetrySampler, forward_fill


class Wall:
    def __init__(self) -> None:
        self.t = 1_000.0

    def __call__(self) -> float:
        return self.t


def _sampler(util: list[float] | None = None, horizon: int = 60) -> tuple[TelemetrySampler,
                                                                            Wall, FakeBackend]:
    wall = Wall()
    state = {"u": np.zeros(2)}
    b = FakeBackend(2, util_curve=lambda t: state["u"], clock=lambda: wall.t)
    s = TelemetrySampler(b, 2, interval_s=1.0, window_s=10, horizon_s=horizon, wall=wall)
    s.state = state  # type: ignore[attr-defined]
    return s, wall, b


def test_forward_fill() -> None:
    a = np.array([[np.nan, 1.0], [2.0, np.nan], [np.nan, np.nan], [5.0, 6.0]])
    out = forward_fill(a)
    assert np.array_equal(out[1:], np.array([[2.0, 1.0], [2.0, 1.0], [5.0, 6.0]]))
    assert np.isnan(out[0, 0])


def test_windows_are_means_oldest_first() -> None:
    s, wall, _ = _sampler()
    for step in range(30):  # t = 1000..1029, util = 0, 1, ..., 29 on GPU 0
        wall.t = 1000.0 + step
        s.state["u"] = np.array([float(step), 50.0])  # type: ignore[attr-defined]
        s.sample_once()
    end, win = s.windows(now=1029.5)
    assert end == 1029.5 and win.shape == (3, 2, N_FIELDS)
    # Windows (1019.5, 1029.5], (1009.5, 1019.5], (999.5, 1009.5] -> steps 20..29, 10..19, 0..9
    assert win[:, 0, COL["util"]].tolist() == [4.5, 14.5, 24.5]
    assert win[:, 1, COL["util"]].tolist() == [50.0, 50.0, 50.0]


def test_horizon_drops_old_samples_and_ring_wraps() -> None:
    s, wall, _ = _sampler(horizon=20)
    for step in range(100):
        wall.t = 1000.0 + step
        s.state["u"] = np.array([float(step), 0.0])  # type: ignore[attr-defined]
        s.sample_once()
    _, win = s.windows(now=1099.5)
    assert win.shape[0] == 2
    assert win[-1, 0, COL["util"]] == pytest.approx(np.mean(np.arange(90, 100)))
    assert s.samples == 100 and s.capacity == 22


def test_removed_gpu_repeats_last_known_window() -> None:
    s, wall, b = _sampler()
    for step in range(20):
        wall.t = 1000.0 + step
        s.state["u"] = np.array([10.0, 20.0])  # type: ignore[attr-defined]
        if step == 10:
            b.remove(1)
        s.sample_once()
    _, win = s.windows(now=1019.5)
    assert win[:, 1, COL["util"]].tolist() == [20.0, 20.0]  # carried forward, never NaN
    latest = s.latest()
    assert latest is not None and np.isnan(latest[1][1]).all()


def test_no_samples_yet() -> None:
    s, _, _ = _sampler()
    assert s.latest() is None
    assert s.windows()[1].shape == (0, 2, N_FIELDS)


def test_background_thread_samples_at_interval() -> None:
    b = FakeBackend(8)
    s = TelemetrySampler(b, 8, interval_s=0.02, window_s=1, horizon_s=10)
    s.start()
    try:
        import time

        time.sleep(0.3)
    finally:
        s.stop()
    # Loose lower bound: 6 engineers share 2 cores. The upper bound is the point: a late
    # sampler skips ahead instead of bursting to catch up.
    assert 3 <= s.samples <= 17 and s.errors == 0 and s.cpu_seconds > 0


def test_failing_backend_is_counted_and_the_thread_keeps_going() -> None:
    b = FakeBackend(2)
    calls = {"n": 0}

    def flaky(t: float) -> np.ndarray:
        calls["n"] += 1
        if calls["n"] % 2:
            raise RuntimeError("driver hiccup")
        return np.array([1.0, 2.0])

    b.util_curve = flaky
    s = TelemetrySampler(b, 2, interval_s=0.01, window_s=1, horizon_s=10)
    s.start()
    try:
        import time

        time.sleep(0.3)
    finally:
        s.stop()
    assert s.errors >= 3 and s.samples >= 3
    latest = s.latest()
    assert latest is not None and latest[1][:, COL["util"]].tolist() == [1.0, 2.0]
