"""The scenario's discrete-event engine: :meth:`Engine.decisions` yields a :class:`Decision`
whenever a pod needs a node and takes the chosen node back via ``send``. Job completions are
found each step as ``min(work_left / rate)``, as contention changes rates all the time.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Generator

import numpy as np

from dsan.policies.base import Scorer
from dsan.sim.scenario.metrics import billed_seconds, p99
from dsan.sim.scenario.progress import ProgressMixin
from dsan.sim.scenario.scheduling import SchedulingMixin
from dsan.sim.scenario.state import ARRIVE, READY, RUNNING, STARTING, WINDOW, Decision, SelectGpus
from dsan.sim.scenario.workload import BATCH, BE, KIND_NAMES, TRAIN, WEB


class Engine(SchedulingMixin, ProgressMixin):
    def attach(self, select_gpus: SelectGpus, hooks: Scorer | None = None) -> None:
        """Use a scorer's GPU choice and bind/release hooks (before the first decision)."""
        self.select_gpus = select_gpus
        self._on_bind = None if hooks is None else hooks.on_bind
        self._on_release = None if hooks is None else hooks.on_release

    def _advance(self, t1: float) -> None:
        """Move the clock to ``t1``: integrate metrics, progress jobs, sample telemetry."""
        t0, dt = self.now, t1 - self.now
        if dt > 0:
            self._sample_telemetry(t1)
            billed = billed_seconds(t0, t1, self.on, self.empty_since, self.cfg.scale_down.grace_s)
            s = self.snap
            used = np.array([s.cpu_used.sum(), s.mem_used.sum(),
                             self.gpu_cap.sum() - s.gpu_free.sum()])
            if self.ph.size:  # placeholders hold requests but use nothing
                used[0] -= self.ph.bound * self.ph.spec.cpu_milli
                used[1] -= self.ph.bound * self.ph.spec.mem_mib
            cap = np.array([s.cpu_cap @ billed, s.mem_cap @ billed, self.gpu_cap @ billed])
            self.acc.used_integral += used * dt
            self.acc.cap_integral += cap
            assert s.hourly_cost is not None
            cost = float(s.hourly_cost @ billed) / 3600.0
            self.acc.cost += cost
            st = self.acc.step
            st.dt_s += dt
            st.cost += cost
            frac = np.where(cap > 0, used * dt / np.maximum(cap, 1e-9), 0.0)
            st.util_integral += float(np.mean(frac)) * dt
            act = self.job_active
            self.job_left[act] -= self.job_rate[act] * dt
            off = self.on & (self.empty_since + self.cfg.scale_down.grace_s <= t1)
            if off.any():
                self.on &= ~off
                for node in np.flatnonzero(off):  # a replaced node comes back with no images
                    self.snap.images[node] = frozenset()  # type: ignore[index]
                    for img in range(len(self.cfg.startup.image_mib)):
                        self.image_ready.pop((int(node), img), None)
        self.now = t1

    def _sample_telemetry(self, t1: float) -> None:
        """Write the samples at 10 s boundaries in (now, t1]: state is constant in between."""
        iv = self.cfg.metrics.telemetry_interval_s
        k = int(t1 // iv)
        if k == self.last_sample:
            return
        steps = min(k - self.last_sample, self.cfg.metrics.telemetry_len)
        self.last_sample = k
        s = self.snap
        tel = s.telemetry
        assert tel is not None and s.telemetry_age_s is not None
        gpu = s.gpu_count > 0
        gcap = np.maximum(self.gpu_cap, 1.0)
        gpu_util = np.where(gpu, self.gpu_busy / gcap, 0.0)
        sample = np.stack([
            np.minimum(1.0, (self.demand + self.web_demand) / s.cpu_cap),
            (s.mem_used - self.ph.held_mem() if self.ph.size else s.mem_used) / s.mem_cap,
            gpu_util,
            np.where(gpu, (self.gpu_cap - s.gpu_free.sum(axis=1)) / gcap, 0.0),
            np.where(gpu & self.on, 0.25 + 0.75 * gpu_util, 0.0),
        ], axis=1).astype(np.float32)
        tel[:, :-steps] = tel[:, steps:]
        tel[:, -steps:] = sample[:, None, :]
        s.telemetry_age_s[:] = t1 - k * iv
        s.telemetry_version += 1  # DSAN's cached node embeddings are now stale

    def decisions(self) -> Generator[Decision, int, None]:
        """Run to the horizon, yielding one :class:`Decision` per pod placement."""
        while True:
            t_next = min(self.heap[0][0] if self.heap else math.inf, self._next_completion(),
                         self.horizon)
            self._advance(t_next)
            if t_next >= self.horizon:
                break
            while self.heap and self.heap[0][0] <= self.now:
                _, _, kind, a, b = heapq.heappop(self.heap)
                self._event(kind, a, b)
            self._completions()
            yield from self._schedule()
            self._rates()
        self._finish()

    def _event(self, kind: int, a: int, b: int) -> None:
        if kind == ARRIVE:
            job = self.wl.jobs[a]
            pods = job.pods[:1] if job.kind == BATCH else job.pods
            self._submit(pods, job.kind == TRAIN)
        elif kind == READY:
            if self.pod_epoch[a] == b and self.pod_state[a] == STARTING:
                self._ready(a)
        elif kind == WINDOW:
            self._window()
            nxt = self.now + self.cfg.metrics.web_window_s
            if nxt < self.horizon:
                self._push(nxt, WINDOW, 0)

    def _ready(self, p: int) -> None:
        self.pod_state[p] = RUNNING
        if np.isnan(self.pod_start[p]):
            self.pod_start[p] = self.now
        node, kind = int(self.pod_node[p]), int(self.pod_kind[p])
        job = self.wl.jobs[self.pod_job[p]]
        if kind != WEB:
            self.demand[node] += self.pod_cpu[p] * self.pod_use[p]
        self.gpu_busy[node] += self.pod_gmilli[p] * self.pod_act[p]
        if kind == TRAIN:
            if all(self.pod_state[q] == RUNNING for q in job.pods):
                self.job_active[job.id] = True
                self.job_loc[job.id] = self._locality(job.pods)
                delay = self.now - job.submit
                self.acc.sla("training", int(delay > self.cfg.training.start_delay_limit_s))
        elif kind == BATCH:
            if p == job.pods[0]:
                self.job_active[job.id] = True
                self._submit(job.pods[1:], False)
        elif kind == BE:
            self.job_active[job.id] = True
        else:
            self._web_load()

    def _finish(self) -> None:
        for job in self.wl.jobs:
            if not np.isnan(self.job_done[job.id]) or job.submit >= self.horizon:
                continue
            if job.kind == BATCH and job.deadline < self.horizon:
                self.acc.sla("batch", 1)
            if (job.kind == TRAIN and not self.job_active[job.id]
                    and self.horizon - job.submit > self.cfg.training.start_delay_limit_s):
                self.acc.sla("training", 1)

    def summary(self) -> dict[str, object]:
        sub = ~np.isnan(self.pod_submit)
        lat = np.where(np.isnan(self.pod_start), self.horizon, self.pod_start) - self.pod_submit
        wait = np.where(np.isnan(self.pod_bind), self.horizon, self.pod_bind) - self.pod_submit
        by_kind = {KIND_NAMES[k]: wait[sub & (self.pod_kind == k)] for k in range(len(KIND_NAMES))}
        burst = np.array([self.wl.jobs[j].burst for j in self.pod_job], dtype=bool)
        if burst.any():
            by_kind["burst"] = wait[sub & burst]
        out = self.acc.summary(lat[sub], wait[sub], self.cfg.metrics.queue_threshold_s, by_kind)
        out["p99_by_kind_s"] = {
            KIND_NAMES[k]: p99(lat[sub & (self.pod_kind == k)]) for k in range(len(KIND_NAMES))
        }
        if burst.any():
            out["burst"] = self._burst_summary()
        out["p99_tail_causes"] = self._tail_causes(lat[sub], wait[sub])
        if self.ph.size:
            out["overprovisioning"] = self.ph.summary()
        out["pods_submitted"] = int(sub.sum())
        out["sim_hours"] = self.horizon / 3600.0
        return out

    def _tail_causes(self, lat: np.ndarray, wait: np.ndarray) -> dict[str, int]:
        """What the pods at or above the P99 latency waited for, first match wins: a bind (over
        the queue threshold), a scaled-down node's boot, an image pull, or only the start."""
        if lat.size == 0:
            return {}
        tail = lat >= p99(lat)
        startup = lat - wait
        st = self.cfg.startup
        queued = wait > self.cfg.metrics.queue_threshold_s
        boot = ~queued & (startup >= st.node_boot_s)
        pull = ~queued & ~boot & (startup > st.container_start_s + 1e-6)
        start = ~queued & ~boot & ~pull
        causes = (("queued", queued), ("boot", boot), ("pull", pull), ("start", start))
        return {k: int((tail & m).sum()) for k, m in causes}

    def _burst_summary(self) -> dict[str, float]:
        """Job-level view of the burst: a gang binds at once, so its wait is its first pod's."""
        jobs = [j for j in self.wl.jobs if j.burst]
        first = np.array([self.pod_bind[j.pods[0]] for j in jobs])
        submit = np.array([j.submit for j in jobs])
        wait = np.where(np.isnan(first), self.horizon, first) - submit
        thr = self.cfg.metrics.queue_threshold_s
        return {
            "jobs": len(jobs),
            "jobs_started": int((~np.isnan(first)).sum()),
            "queued_jobs": int((wait > thr).sum()),
            "mean_job_wait_s": float(wait.mean()),
            "gpus_requested": int(sum(len(j.pods) for j in jobs)),
        }
