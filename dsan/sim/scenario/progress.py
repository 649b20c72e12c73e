"""Job progress under contention, recomputed once per event batch: batch stage rate =
min(executors, stage cap) x their mean speed; training rate = locality x (slowest worker's
speed)^sensitivity; best effort runs at 1; web never ends."""

from __future__ import annotations

import math

import numpy as np

from dsan.sim.scenario import contention as ct
from dsan.sim.scenario.state import DONE, EPS, RUNNING, EngineState
from dsan.sim.scenario.workload import BATCH, BE, KIND_NAMES, TRAIN, WEB


class ProgressMixin(EngineState):
    def _next_completion(self) -> float:
        act = self.job_active & (self.job_rate > 0)
        if not act.any():
            return math.inf
        return self.now + float(np.min(self.job_left[act] / self.job_rate[act]))

    def _completions(self) -> None:
        done = np.flatnonzero(self.job_active
                              & (self.job_left <= EPS * np.maximum(self.job_rate, 1.0)))
        for j in done:
            job = self.wl.jobs[int(j)]
            if self.job_stage[j] + 1 < len(job.stage_work):
                self.job_stage[j] += 1
                self.job_left[j] = job.stage_work[self.job_stage[j]]
                self.job_par[j] = job.stage_par[self.job_stage[j]]
                continue
            self.job_active[j] = False
            self.job_done[j] = self.now
            for p in job.pods:
                if self.pod_node[p] >= 0:
                    self._release(p)
                self.pod_state[p] = DONE
            if job.submit < self.t0:  # a warm-up job: not measured
                continue
            self.acc.completed(KIND_NAMES[job.kind], self.now - job.submit)
            if job.kind == BATCH:
                self.acc.sla("batch", int(self.now > job.deadline + EPS))

    def _web_load(self) -> None:
        """Per-replica request rate and CPU use from the diurnal curve and running replicas."""
        if self.web_pods.size == 0:
            return
        w = self.cfg.web
        running = self.pod_state[self.web_pods] == RUNNING
        per_svc = np.bincount(self.web_svc[running], minlength=self.svc_size.size)
        rho = ct.diurnal_rho(self.now - self.t0, w.trough_rho, w.peak_rho, w.peak_hour)
        lam_svc = self.svc_size * w.service_rate * rho
        self.web_lam = np.where(running, lam_svc[self.web_svc]
                                / np.maximum(per_svc[self.web_svc], 1), 0.0)
        use = w.cpu_milli * self.web_lam / (w.service_rate * w.peak_rho)
        nodes = self.pod_node[self.web_pods]
        self.web_demand = np.bincount(nodes[running], weights=use[running],
                                      minlength=len(self.snap)).astype(np.float64)
        self.web_running = per_svc

    def _window(self) -> None:
        """Web SLO check and the utilisation sample for the plot, every web window."""
        self._web_load()
        self._speeds()
        if self.now < self.t0:  # warm-up: no SLO check, no plot sample
            return
        if self.web_pods.size and self.now > self.t0:
            w = self.cfg.web
            running = self.pod_state[self.web_pods] == RUNNING
            mu = w.service_rate * self.speed[np.maximum(self.pod_node[self.web_pods], 0)]
            viol = ct.service_violations(self.web_svc[running], self.web_lam[running],
                                         mu[running], w.slo_p99_s, self.svc_size.size,
                                         self.web_running)
            self.acc.sla("web", int(viol.sum()), int(self.svc_size.size))
        a = self.acc
        snap, on = self.snap, self.on
        used = np.array([snap.cpu_used.sum(), snap.mem_used.sum(),
                         self.gpu_cap.sum() - snap.gpu_free.sum()])
        cap = np.array([snap.cpu_cap @ on, snap.mem_cap @ on, self.gpu_cap @ on])
        if self.v3:  # measured use over every node, as the version 3 utilisation
            used = np.array([np.minimum(self.demand + self.web_demand, snap.cpu_cap).sum(),
                             snap.mem_used.sum(), self.gpu_busy.sum()])
            cap = np.array([snap.cpu_cap.sum(), snap.mem_cap.sum(), self.gpu_cap.sum()])
        frac = np.where(cap > 0, used / np.maximum(cap, 1e-9), 0.0)
        a.series_t.append(self.now - self.t0)
        a.series_util.append(float(frac.mean() * 100.0))
        a.series_nodes_on.append(int(on.sum()))

    def _busy_demand(self, run: np.ndarray, ex: np.ndarray, jobs_ex: np.ndarray) -> None:
        """Version 3: a Spark job's running executors beyond its stage's parallelism are idle
        (held, not busy), so each of its n executors uses ``min(1, cap / n)`` of its busy
        CPU; the non-web CPU demand per node is recomputed from the running pods."""
        cnt = np.bincount(jobs_ex, minlength=self.job_rate.size).astype(np.float64)
        busy = np.ones(self.pod_cpu.size)
        busy[ex] = np.minimum(1.0, self.job_par[jobs_ex] / np.maximum(cnt[jobs_ex], 1.0))
        sel = run & (self.pod_kind != WEB)
        self.demand = np.bincount(self.pod_node[sel], weights=(self.pod_cpu * self.pod_use
                                                               * busy)[sel],
                                  minlength=len(self.snap)).astype(np.float64)

    def _speeds(self) -> None:
        c = self.cfg.contention
        self.speed = ct.node_speed(self.demand + self.web_demand, self.snap.cpu_cap,
                                   c.threshold, c.beta)

    def _rates(self) -> None:
        run = self.pod_state == RUNNING
        J = self.job_rate.size
        ex = run & self.pod_exec
        jobs_ex = self.pod_job[ex]
        if self.v3:
            self._busy_demand(run, ex, jobs_ex)
        self._speeds()
        sp = self.speed[self.pod_node[ex]]
        cnt = np.bincount(jobs_ex, minlength=J).astype(np.float64)
        ssum = np.bincount(jobs_ex, weights=sp, minlength=J)
        batch_rate = np.where(cnt > 0, ssum / np.maximum(cnt, 1) * np.minimum(cnt, self.job_par),
                              0.0)
        tr = run & (self.pod_kind == TRAIN)
        tmin = np.ones(J)
        np.minimum.at(tmin, self.pod_job[tr], self.speed[self.pod_node[tr]])
        # Elastic training scales with running workers / the size its work is measured at
        # (exactly 1 for a fixed gang).
        workers = np.bincount(self.pod_job[tr], minlength=J)
        width = np.where(self.job_nominal > 0, workers / np.maximum(self.job_nominal, 1.0), 1.0)
        # CPU contention slows GPU training only through data loading: speed**sensitivity.
        train_rate = (self.job_loc * np.power(tmin, self.cfg.contention.train_sensitivity)
                      * width)
        k = self.job_kind
        rate = np.where(k == BATCH, batch_rate,
                        np.where(k == TRAIN, train_rate, np.where(k == BE, 1.0, 0.0)))
        # A job pausing for a checkpoint/restart (elastic resize) makes no progress.
        self.job_rate = np.where(self.job_pause > self.now, 0.0, rate * self.job_active)
