"""The scenario's discrete-event engine: :meth:`Engine.decisions` yields a :class:`Decision`
whenever a pod needs a node and takes the chosen node back via ``send``. Job completions are
found each step as ``min(work_left / rate)``, as contention changes rates all the time.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Generator

import numpy as np

from dsan.api.types import TASK_TYPES
from dsan.policies.base import Scorer
from dsan.sim.scenario import preemption
from dsan.sim.scenario.metrics import billed_seconds, p99, queued_mean_wait, utilization
from dsan.sim.scenario.progress import ProgressMixin
from dsan.sim.scenario.scheduling import SchedulingMixin
from dsan.sim.scenario.state import ARRIVE, READY, RUNNING, STARTING, WINDOW, Decision
from dsan.sim.scenario.workload import BATCH, BE, KIND_NAMES, TRAIN, WEB

#: Version 3's P99 task latency is over these classes' jobs; best effort is reported apart.
LATENCY_SENSITIVE = (TRAIN, BATCH, WEB)


class Engine(SchedulingMixin, ProgressMixin):
    def attach(self, scorer: Scorer) -> None:
        """Use a scorer's GPU choice and bind/release hooks, and from version 3 on its
        reclaimer and controller (before the first decision). Version 2 runs every policy
        under Kubernetes' preemption and no controller, as its numbers were published."""
        self.select_gpus = scorer.select_gpus
        self.hooks = scorer
        if self.v3:
            self.reclaimer = preemption.simulated(scorer.reclaimer)
            self.controller = scorer.controller

    def _advance(self, t1: float) -> None:
        """Move the clock to ``t1``: integrate metrics (from ``t0`` on: the warm-up is not
        measured; an event at ``t0`` splits the interval), progress jobs, sample telemetry."""
        t0, dt = self.now, t1 - self.now
        if dt > 0:
            self._sample_telemetry(t1)
            sd = self.cfg.scale_down
            billed = billed_seconds(t0, t1, self.on, self.empty_since,
                                    sd.grace_s if sd.enabled else np.inf)
            if t0 >= self.t0:
                self._measure(dt, billed)
            act = self.job_active
            self.job_left[act] -= self.job_rate[act] * dt
            off = self.on & (self.empty_since + sd.grace_s <= t1)
            if sd.enabled and off.any():
                self.on &= ~off
                for node in np.flatnonzero(off):  # a replaced node comes back with no images
                    self.snap.images[node] = frozenset()  # type: ignore[index]
                    for img in range(len(self.cfg.startup.image_mib)):
                        self.image_ready.pop((int(node), img), None)
        self.now = t1

    def _measure(self, dt: float, billed: np.ndarray) -> None:
        s = self.snap
        if self.v3:  # measured use over the capacity of every node
            cpu = np.minimum(self.demand + self.web_demand, s.cpu_cap).sum()
            mem = s.mem_used.sum() - (self.ph.held_mem().sum() if self.ph.size else 0.0)
            self.acc.usage_integral += np.array([cpu, mem, self.gpu_busy.sum()]) * dt
            self.acc.capacity_integral += np.array([s.cpu_cap.sum(), s.mem_cap.sum(),
                                                    self.gpu_cap.sum()]) * dt
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
            if job.burst and not self.burst_capacity and self.v3:
                self._record_burst_capacity()
            # Batch: the driver first; training: the gang of its minimum workers.
            pods = job.pods[:1] if job.kind == BATCH else job.pods[:int(self.job_base[a])]
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
        base = job.pods[:int(self.job_base[job.id])]
        if kind == TRAIN:
            if self.job_active[job.id]:  # an elastic extra worker joined: grow, restart
                self._resize(job.id, grow=True)
            elif all(self.pod_state[q] == RUNNING for q in base):
                self.job_active[job.id] = True
                self.job_loc[job.id] = self._locality(job.pods)
                self._started(job.id, base)
                delay = self.now - job.submit
                if job.submit >= self.t0:
                    self.acc.sla("training", int(delay > self.cfg.training.start_delay_limit_s))
                if len(base) < len(job.pods):
                    self._submit(self._granted(job.id), False)
            return
        if kind == BATCH and p == job.pods[0]:  # the driver runs: submit its executors
            self.job_active[job.id] = True
            self._submit(job.pods[1:len(base)] + self._granted(job.id), False)
        elif kind == BE:
            self.job_active[job.id] = True
        elif kind == WEB:
            self._web_load()
        if np.isnan(self.job_start[job.id]) and all(self.pod_state[q] == RUNNING for q in base):
            self._started(job.id, base)

    def _granted(self, j: int) -> list[int]:
        """The pods above job ``j``'s minimum that the controller grants it (all of them
        under Kubernetes); the others are never submitted."""
        job = self.wl.jobs[j]
        base, top = int(self.job_base[j]), len(job.pods)
        n = self.controller.grant(TASK_TYPES[job.kind], base, top)
        if not base <= n <= top:
            raise ValueError(f"controller {self.controller.name!r} granted {n} pods to a job "
                             f"of {base}..{top}")
        return job.pods[base:n]

    def _started(self, j: int, base: list[int]) -> None:
        """The job's base pods all run: its start latency, and its wait for binds (a batch
        job waits for its driver, then for its minimum executors)."""
        self.job_start[j] = self.now
        waits = self.pod_bind[base] - self.pod_submit[base]
        self.job_wait[j] = (float(waits[0]) + float(waits[1:].max(initial=0.0))
                            if self.job_kind[j] == BATCH else float(waits.max()))

    def _finish(self) -> None:
        for job in self.wl.jobs:
            if (not np.isnan(self.job_done[job.id]) or job.submit >= self.horizon
                    or job.submit < self.t0):
                continue
            if job.kind == BATCH and job.deadline < self.horizon:
                self.acc.sla("batch", 1)
            if (job.kind == TRAIN and not self.job_active[job.id]
                    and self.horizon - job.submit > self.cfg.training.start_delay_limit_s):
                self.acc.sla("training", 1)

    def summary(self) -> dict[str, object]:
        """Table 1 (docs/scenarios.md, *Metrics*). Version 2 counts every pod submitted;
        version 3 (*Version 3 metrics*) counts jobs submitted in the measured window [t0,
        horizon), each once, its P99 and waits over the latency-sensitive classes only, and
        measures utilisation."""
        h, thr = self.horizon, self.cfg.metrics.queue_threshold_s
        if self.v3:
            kinds, submit = self.job_kind, np.array([j.submit for j in self.wl.jobs])
            m = (submit >= self.t0) & (submit < h)
            lat = np.where(np.isnan(self.job_start), h, self.job_start) - submit
            wait = np.where(np.isnan(self.job_wait), h - submit, self.job_wait)
            burst = np.array([j.burst for j in self.wl.jobs], dtype=bool)
            sens = m & np.isin(kinds, LATENCY_SENSITIVE)
        else:
            kinds, m = self.pod_kind, ~np.isnan(self.pod_submit)
            lat = np.where(np.isnan(self.pod_start), h, self.pod_start) - self.pod_submit
            wait = np.where(np.isnan(self.pod_bind), h, self.pod_bind) - self.pod_submit
            burst = np.array([self.wl.jobs[j].burst for j in self.pod_job], dtype=bool)
            sens = m
        by_kind = {KIND_NAMES[k]: wait[m & (kinds == k)] for k in range(len(KIND_NAMES))}
        if burst.any():
            by_kind["burst"] = wait[m & burst]
        out = self.acc.summary(lat[sens], wait[sens], thr, by_kind)
        out["p99_by_kind_s"] = {KIND_NAMES[k]: p99(lat[m & (kinds == k)])
                                for k in range(len(KIND_NAMES))}
        if not self.v3:
            if burst.any():
                out["burst"] = self._burst_summary()
            out["p99_tail_causes"] = self._tail_causes(lat[m], wait[m])
            if self.ph.size:
                out["overprovisioning"] = self.ph.summary()
            out["pods_submitted"] = int(m.sum())
            out["sim_hours"] = h / 3600.0
            return out
        alloc = utilization(self.acc.used_integral, self.acc.cap_integral)
        out.update(utilization(self.acc.usage_integral, self.acc.capacity_integral))
        out["alloc_utilization_pct"] = alloc["utilization_pct"]
        out["mean_wait_queued_s"] = queued_mean_wait(wait[sens], thr)
        out["p99_besteffort_latency_s"] = p99(lat[m & (kinds == BE)])
        out["reclaim_cost"] = self.reclaim["all"].summary()
        out["elastic"] = {"grows": self.acc.elastic_grows,
                          "grow_stall_gpu_s": self.acc.grow_stall_gpu_s}
        if burst.any():
            out["burst"] = self._burst_summary_v3(burst, wait, submit)
        out["jobs_submitted"] = int(m.sum())
        out["sim_hours"] = (h - self.t0) / 3600.0
        out["warmup_h"] = self.t0 / 3600.0
        return out

    def _record_burst_capacity(self) -> None:
        """At the burst's first arrival: GPU capacity free, and held by reclaimable pods."""
        held = (self.pod_node >= 0) & self.pod_reclaim
        self.burst_capacity = {
            "free_gpu_milli_at_start": float(self.snap.gpu_free[self.snap.gpu_count > 0].sum()),
            "reclaimable_gpu_milli_at_start": float(self.pod_gmilli[held].sum()),
        }

    def _burst_summary_v3(self, burst: np.ndarray, wait: np.ndarray, submit: np.ndarray
                          ) -> dict[str, object]:
        """Per burst job: queued (waited > the threshold for its binds), the mean wait of the
        queued ones, and what the reclamation the burst triggered cost the work it hit."""
        idx = np.flatnonzero(burst)
        w = wait[idx]
        thr = self.cfg.metrics.queue_threshold_s
        jobs = [self.wl.jobs[i] for i in idx]
        share = np.array([float(self.pod_gmilli[j.pods[:int(self.job_base[j.id])]].sum())
                          for j in jobs])
        ends = submit[idx] + np.array([j.stage_work[0] for j in jobs])
        # Offered peak: the most GPU share the burst holds at once at speed 1, no waiting.
        edges = sorted([(float(t), float(g)) for t, g in zip(submit[idx], share, strict=True)]
                       + [(float(t), -float(g)) for t, g in zip(ends, share, strict=True)])
        peak = float(np.cumsum([g for _, g in edges]).max(initial=0.0))
        return {
            **self._burst_jobs(w, ~np.isnan(self.job_start[idx])),
            "mean_wait_queued_s": queued_mean_wait(w, thr),
            "gpu_milli_requested": float(share.sum()),
            "peak_gpu_milli_offered": peak,
            **self.burst_capacity,
            "reclaim_cost": self.reclaim["burst"].summary(),
        }

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

    def _burst_summary(self) -> dict[str, object]:
        """Job-level view of the burst: a gang binds at once, so its wait is its first pod's."""
        jobs = [j for j in self.wl.jobs if j.burst]
        first = np.array([self.pod_bind[j.pods[0]] for j in jobs])
        wait = np.where(np.isnan(first), self.horizon, first) - np.array([j.submit for j in jobs])
        return {**self._burst_jobs(wait, ~np.isnan(first)),
                "gpus_requested": int(sum(len(j.pods) for j in jobs))}

    def _burst_jobs(self, wait: np.ndarray, started: np.ndarray) -> dict[str, object]:
        """What both versions report of the burst's jobs, from each one's wait and start."""
        thr = self.cfg.metrics.queue_threshold_s
        return {"jobs": int(wait.size), "jobs_started": int(started.sum()),
                "queued_jobs": int((wait > thr).sum()),
                "mean_job_wait_s": float(wait.mean()) if wait.size else 0.0}
