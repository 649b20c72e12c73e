"""The telemetry sampler: reads every GPU at a fixed interval into a ring buffer and turns
the buffer into fixed windows (means of ``window_s`` seconds over the last ``horizon_s``).

The hot path (:meth:`TelemetrySampler.sample_once`) is one backend call into a preallocated
``(n_gpus, N_FIELDS)`` array and one row copy: no per-GPU Python, no allocation, no logging.
CPU time spent sampling is measured with ``time.thread_time`` and exported, so the 1 %-of-a-
core budget is visible in production, not only in the benchmark.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Final

import numpy as np

from deviceplugin.backend import COL, N_FIELDS, GPUBackend

log = logging.getLogger(__name__)
#: Rate columns integrated into running totals, because dcgm-exporter exports them as
#: counters (KB transferred since the agent started): Prometheus users take rate() of them.
TOTAL_FIELDS: Final = ("pcieTxKBps", "pcieRxKBps", "nvlinkKBps")
_TOTALS = slice(COL[TOTAL_FIELDS[0]], COL[TOTAL_FIELDS[-1]] + 1)
assert [COL[f] for f in TOTAL_FIELDS] == list(range(_TOTALS.start, _TOTALS.stop))


def forward_fill(a: np.ndarray) -> np.ndarray:
    """Replace NaNs along axis 0 by the last finite value before them (vectorised)."""
    idx = np.where(np.isnan(a), 0, np.arange(a.shape[0]).reshape(-1, *([1] * (a.ndim - 1))))
    np.maximum.accumulate(idx, axis=0, out=idx)
    return np.take_along_axis(a, idx, axis=0)


class TelemetrySampler:
    def __init__(
        self,
        backend: GPUBackend,
        n_gpus: int,
        interval_s: float = 1.0,
        window_s: int = 10,
        horizon_s: int = 300,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.backend = backend
        self.n = n_gpus
        self.interval_s = interval_s
        self.window_s = window_s
        self.horizon_s = horizon_s
        self._wall = wall
        # One spare slot so a full horizon of samples fits even with timer jitter.
        self.capacity = math.ceil(horizon_s / interval_s) + 2
        self._ring = np.full((self.capacity, n_gpus, N_FIELDS), np.nan)
        self._times = np.full(self.capacity, np.nan)
        self._scratch = np.empty((n_gpus, N_FIELDS))
        #: KB since start per GPU, columns as TOTAL_FIELDS; see totals().
        self._totals = np.zeros((n_gpus, len(TOTAL_FIELDS)))
        self._inc = np.empty((n_gpus, len(TOTAL_FIELDS)))
        self._nan = np.empty((n_gpus, len(TOTAL_FIELDS)), dtype=bool)
        self._last_mono: float | None = None
        self._pos = 0
        self._lock = threading.Lock()
        self.samples = 0
        self.errors = 0
        self.cpu_seconds = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- hot path -------------------------------------------------------------------------
    def sample_once(self) -> None:
        t_cpu = time.thread_time()
        now = self._wall()
        mono = time.monotonic()
        try:
            self.backend.sample(self._scratch)
        except Exception:
            self.errors += 1
            raise
        # Each rate is the mean since the previous sample (NVML's byte counters), so rate x
        # elapsed time adds back what was transferred; an unsupported (NaN) rate adds 0.
        dt = 0.0 if self._last_mono is None else mono - self._last_mono
        self._last_mono = mono
        np.multiply(self._scratch[:, _TOTALS], dt, out=self._inc)
        np.isnan(self._inc, out=self._nan)
        self._inc[self._nan] = 0.0
        with self._lock:
            self._totals += self._inc
            self._ring[self._pos] = self._scratch
            self._times[self._pos] = now
            self._pos = (self._pos + 1) % self.capacity
            self.samples += 1
        self.cpu_seconds += time.thread_time() - t_cpu

    # --- readers --------------------------------------------------------------------------
    def latest(self) -> tuple[float, np.ndarray] | None:
        """(wall time, copy of the newest ``(n, N_FIELDS)`` row), or None before any sample."""
        with self._lock:
            if self.samples == 0:
                return None
            last = (self._pos - 1) % self.capacity
            return float(self._times[last]), self._ring[last].copy()

    def totals(self) -> np.ndarray:
        """Copy of the running totals ``(n, len(TOTAL_FIELDS))`` in KB: monotonic, reset
        only when the agent restarts (which Prometheus's rate() handles as a counter reset)."""
        with self._lock:
            return self._totals.copy()

    def windows(self, now: float | None = None) -> tuple[float, np.ndarray]:
        """(end time, means of shape ``(W, n, N_FIELDS)``, oldest window first).

        Window 0 from the end covers ``(now - window_s, now]``. Samples a GPU could not read
        (NaN) are left out of its means; a window with no readings repeats the previous one;
        a series with no reading at all is 0. ``W`` grows to ``horizon_s // window_s``."""
        now = self._wall() if now is None else now
        with self._lock:
            times = self._times.copy()
            ring = self._ring.copy()
        age = now - times
        keep = np.isfinite(age) & (age >= 0) & (age < self.horizon_s)
        if not keep.any():
            return now, np.zeros((0, self.n, N_FIELDS))
        k = (age[keep] // self.window_s).astype(np.intp)  # 0 = newest window
        vals = ring[keep]
        n_win = int(k.max()) + 1
        ok = ~np.isnan(vals)
        sums = np.zeros((n_win, self.n, N_FIELDS))
        counts = np.zeros((n_win, self.n, N_FIELDS))
        np.add.at(sums, k, np.where(ok, vals, 0.0))
        np.add.at(counts, k, ok)
        with np.errstate(invalid="ignore", divide="ignore"):
            means = sums / counts  # NaN where a window has no reading
        means = forward_fill(means[::-1])  # oldest first, then carry values forward
        return now, np.nan_to_num(means, nan=0.0)

    # --- thread ----------------------------------------------------------------------------
    def try_sample(self) -> bool:
        """:meth:`sample_once` that never raises: a failure is counted and logged."""
        try:
            self.sample_once()
        except Exception:
            if self.errors & (self.errors - 1) == 0:  # 1st, 2nd, 4th...: no log flood
                log.exception("sampling failed (%d so far); continuing", self.errors)
            return False
        return True

    def _run(self) -> None:
        # Deadline-based so the interval does not drift by the sampling time itself.
        next_at = time.monotonic()
        while not self._stop.is_set():
            self.try_sample()
            next_at += self.interval_s
            delay = next_at - time.monotonic()
            if delay < 0:  # fell behind (suspended, overloaded): skip, do not burst
                next_at = time.monotonic()
                delay = 0.0
            self._stop.wait(delay)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)
        self._thread.start()

    @property
    def crashed(self) -> bool:
        """Its thread ended without stop() (a bug): /healthz fails, kubelet restarts us."""
        return self._thread is not None and not self._thread.is_alive() and not self._stop.is_set()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
