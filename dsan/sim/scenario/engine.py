"""The seed scenario's discrete-event engine.

State lives in numpy arrays (per node, per pod, per job); an event heap holds arrivals,
pod-ready times and the periodic web window; job completions are not queued but found
each step as ``min(work_left / rate)`` over the running jobs, because contention changes
rates all the time and re-queueing would cost more than one vectorised ``argmin``.

The engine is a generator: :meth:`Engine.decisions` yields a :class:`Decision` whenever a
pod needs a node and expects the chosen node index back via ``send``. That one loop serves
heuristic policies (``runner.run_policy``) and reinforcement learning (``env.ScenarioEnv``).

One step: advance the clock to the next event (integrating utilisation and cost, moving job
progress, sampling telemetry every 10 s), apply the events, run a scheduling pass (priority
order, gangs all or nothing, preemption when nothing fits), recompute speeds and rates.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass

import numpy as np

from dsan.filtering import allocate, feasible, release
from dsan.policies.base import best_fit_gpus
from dsan.sim.scenario import contention as ct
from dsan.sim.scenario import preemption
from dsan.sim.scenario.cluster import build_cluster
from dsan.sim.scenario.config import ScenarioConfig
from dsan.sim.scenario.metrics import Accumulator, billed_seconds
from dsan.sim.scenario.workload import BATCH, BE, KIND_NAMES, TRAIN, WEB, Workload, generate
from dsan.snapshot import ClusterSnapshot, PodSpec

ARRIVE, READY, WINDOW = 0, 1, 2
PENDING_NONE, PENDING, STARTING, RUNNING, DONE = 0, 1, 2, 3, 4
_EPS = 1e-6

SelectGpus = Callable[[PodSpec, ClusterSnapshot, int], tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class Decision:
    """One placement to make: give back an entry of ``nodes`` (an index into ``snapshot``)."""

    pod: PodSpec
    pod_id: int
    job_id: int
    #: Feasible node indices (never empty).
    nodes: np.ndarray
    #: The engine's live snapshot: read it, never mutate it.
    snapshot: ClusterSnapshot
    time_s: float


class Engine:
    def __init__(
        self,
        cfg: ScenarioConfig,
        seed: int,
        *,
        burst: bool = False,
        hours: float | None = None,
        workload: Workload | None = None,
        select_gpus: SelectGpus | None = None,
        hooks: object | None = None,
        progress: Callable[[float], None] | None = None,
    ) -> None:
        self.cfg = cfg
        self.seed = seed
        self.horizon = float(hours if hours is not None else cfg.hours) * 3600.0
        self.snap = build_cluster(cfg.cluster, cfg.metrics.telemetry_len)
        self.wl = workload if workload is not None else generate(cfg, seed, burst)
        self.select_gpus: SelectGpus = select_gpus or best_fit_gpus
        self.progress = progress
        # A stateful scorer (e.g. gpu-clustering) tracks binds/releases through these hooks.
        self._on_bind = getattr(hooks, "on_bind", None)
        self._on_release = getattr(hooks, "on_release", None)
        self.acc = Accumulator()
        wl, n = self.wl, len(self.snap)
        P, J = len(wl.pods), len(wl.jobs)
        self.pod_kind = np.array([p.task_type for p in wl.pods], dtype=np.int64)
        self.pod_job = np.asarray(wl.pod_job, dtype=np.int64)
        self.pod_cpu = np.array([p.cpu_milli for p in wl.pods])
        self.pod_mem = np.array([p.mem_mib for p in wl.pods])
        self.pod_gmilli = np.array([p.gpu_milli for p in wl.pods], dtype=np.int64)
        self.pod_prio = np.array([p.priority for p in wl.pods], dtype=np.int64)
        self.pod_use = np.asarray(wl.pod_cpu_use)
        self.pod_act = np.asarray(wl.pod_gpu_act)
        self.pod_reclaim = np.asarray(wl.pod_reclaimable, dtype=bool)
        self.pod_exec = np.zeros(P, dtype=bool)
        for j in wl.jobs:
            if j.kind == BATCH:
                self.pod_exec[j.pods[1:]] = True
        self.pod_node = np.full(P, -1, dtype=np.int64)
        self.pod_gslot = np.full(P, -1, dtype=np.int64)
        self.pod_gpus: list[tuple[int, ...]] = [()] * P
        self.pod_state = np.zeros(P, dtype=np.int8)
        self.pod_submit = np.full(P, np.nan)
        self.pod_bind = np.full(P, np.nan)  # first bind
        self.pod_start = np.full(P, np.nan)  # first running
        self.pod_bound_at = np.zeros(P)  # latest bind, for victim order
        self.pod_epoch = np.zeros(P, dtype=np.int64)
        self.job_left = np.array([j.stage_work[0] for j in wl.jobs])
        self.job_stage = np.zeros(J, dtype=np.int64)
        self.job_par = np.array(
            [j.stage_par[0] if j.stage_par else 0 for j in wl.jobs], dtype=np.float64
        )
        self.job_active = np.zeros(J, dtype=bool)
        self.job_rate = np.zeros(J)
        self.job_loc = np.ones(J)
        self.job_done = np.full(J, np.nan)
        self.job_kind = np.array([j.kind for j in wl.jobs], dtype=np.int64)
        self.on = np.ones(n, dtype=bool)
        self.empty_since = np.zeros(n)
        self.boot_done = np.zeros(n)
        self.image_ready: dict[tuple[int, int], float] = {}
        self.demand = np.zeros(n)  # actual CPU use of running non-web pods (millicores)
        self.web_demand = np.zeros(n)
        self.gpu_busy = np.zeros(n)  # Σ gpu_milli * activity of running GPU pods
        self.speed = np.ones(n)
        self.gpu_cap = self.snap.gpu_count.astype(np.float64) * 1000.0
        web = [j for j in wl.jobs if j.kind == WEB]
        self.svc_size = np.zeros(max(wl.n_services, 1))
        for j in web:
            self.svc_size[j.service] = len(j.pods)
        self.web_pods = np.array([p for j in web for p in j.pods], dtype=np.int64)
        self.web_svc = np.array([j.service for j in web for _ in j.pods], dtype=np.int64)
        self.now = 0.0
        self.last_sample = -1
        self.heap: list[tuple[float, int, int, int, int]] = []
        self.seq = 0
        self.groups: dict[tuple[float, ...], deque[int]] = {}
        self.group_new: set[tuple[float, ...]] = set()
        self.dirty = True
        for j in wl.jobs:
            self._push(j.submit, ARRIVE, j.id)
        self._push(0.0, WINDOW, 0)

    def attach(self, select_gpus: SelectGpus, hooks: object | None = None) -> None:
        """Use a scorer's GPU choice and bind/release hooks (before the first decision)."""
        self.select_gpus = select_gpus
        self._on_bind = getattr(hooks, "on_bind", None)
        self._on_release = getattr(hooks, "on_release", None)

    # ---------------------------------------------------------------- events and clock
    def _push(self, t: float, kind: int, a: int, b: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, a, b))

    def _next_completion(self) -> float:
        act = self.job_active & (self.job_rate > 0)
        if not act.any():
            return math.inf
        return self.now + float(np.min(self.job_left[act] / self.job_rate[act]))

    def _advance(self, t1: float) -> None:
        """Move the clock to ``t1``: integrate metrics, progress jobs, sample telemetry."""
        t0, dt = self.now, t1 - self.now
        if dt > 0:
            self._sample_telemetry(t1)
            billed = billed_seconds(t0, t1, self.on, self.empty_since, self.cfg.scale_down.grace_s)
            s = self.snap
            used = np.array(
                [s.cpu_used.sum(), s.mem_used.sum(), self.gpu_cap.sum() - s.gpu_free.sum()]
            )
            cap = np.array([s.cpu_cap @ billed, s.mem_cap @ billed, self.gpu_cap @ billed])
            self.acc.used_integral += used * dt
            self.acc.cap_integral += cap
            assert s.hourly_cost is not None
            cost = float(s.hourly_cost @ billed) / 3600.0
            self.acc.cost += cost
            st = self.acc.step
            st.dt_s += dt
            st.cost += cost
            st.util_integral += (
                float(np.mean(np.where(cap > 0, used * dt / np.maximum(cap, 1e-9), 0.0))) * dt
            )
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
        sample = np.stack(
            [
                np.minimum(1.0, (self.demand + self.web_demand) / s.cpu_cap),
                s.mem_used / s.mem_cap,
                gpu_util,
                np.where(gpu, (self.gpu_cap - s.gpu_free.sum(axis=1)) / gcap, 0.0),
                np.where(gpu & self.on, 0.25 + 0.75 * gpu_util, 0.0),
            ],
            axis=1,
        ).astype(np.float32)
        tel[:, :-steps] = tel[:, steps:]
        tel[:, -steps:] = sample[:, None, :]
        s.telemetry_age_s[:] = t1 - k * iv

    # ---------------------------------------------------------------- the main loop
    def decisions(self) -> Generator[Decision, int, None]:
        """Run to the horizon, yielding one :class:`Decision` per pod placement."""
        while True:
            t_next = min(
                self.heap[0][0] if self.heap else math.inf, self._next_completion(), self.horizon
            )
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

    def _submit(self, pods: list[int], gang: bool) -> None:
        for p in pods:
            self.pod_state[p] = PENDING
            if np.isnan(self.pod_submit[p]):
                self.pod_submit[p] = self.now
        units = [pods] if gang else [[p] for p in pods]
        for u in units:
            spec = self.wl.pods[u[0]]
            key = (
                spec.priority,
                spec.cpu_milli,
                spec.mem_mib,
                spec.num_gpu,
                spec.gpu_milli,
                len(u),
            )
            self.groups.setdefault(key, deque()).append(
                u[0] if not gang else -1 - self.pod_job[u[0]]
            )
            self.group_new.add(key)

    def _unit_pods(self, unit: int) -> list[int]:
        return self.wl.jobs[-1 - unit].pods if unit < 0 else [unit]

    def _ready(self, p: int) -> None:
        self.pod_state[p] = RUNNING
        if np.isnan(self.pod_start[p]):
            self.pod_start[p] = self.now
        node, kind, job = (
            int(self.pod_node[p]),
            int(self.pod_kind[p]),
            self.wl.jobs[self.pod_job[p]],
        )
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

    def _locality(self, pods: list[int]) -> float:
        s, loc = self.snap, self.cfg.locality
        nodes = self.pod_node[pods]
        assert s.nvlink is not None and s.rack is not None
        if np.all(nodes == nodes[0]):
            return loc.node
        if np.all(s.nvlink[nodes] == s.nvlink[nodes[0]]) and s.nvlink[nodes[0]] >= 0:
            return loc.nvlink
        if np.all(s.rack[nodes] == s.rack[nodes[0]]):
            return loc.rack
        return loc.cross_rack

    def _release(self, p: int) -> None:
        node = int(self.pod_node[p])
        if self.pod_state[p] == RUNNING:
            if self.pod_kind[p] != WEB:
                self.demand[node] -= self.pod_cpu[p] * self.pod_use[p]
            self.gpu_busy[node] -= self.pod_gmilli[p] * self.pod_act[p]
        release(self.snap, self.wl.pods[p], node, self.pod_gpus[p])
        if self._on_release is not None:
            self._on_release(self.wl.pods[p], self.snap, node, self.pod_gpus[p])
        self.pod_node[p] = -1
        self.pod_gslot[p] = -1
        self.pod_gpus[p] = ()
        self.pod_epoch[p] += 1
        assert self.snap.pod_count is not None
        if self.snap.pod_count[node] == 0:
            self.empty_since[node] = self.now
        self.dirty = True

    def _completions(self) -> None:
        done = np.flatnonzero(
            self.job_active & (self.job_left <= _EPS * np.maximum(self.job_rate, 1.0))
        )
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
            self.acc.completed(KIND_NAMES[job.kind], self.now - job.submit)
            if job.kind == BATCH:
                self.acc.sla("batch", int(self.now > job.deadline + _EPS))

    # ---------------------------------------------------------------- contention
    def _web_load(self) -> None:
        """Per-replica request rate and CPU use from the diurnal curve and running replicas."""
        if self.web_pods.size == 0:
            return
        w = self.cfg.web
        running = self.pod_state[self.web_pods] == RUNNING
        per_svc = np.bincount(self.web_svc[running], minlength=self.svc_size.size)
        rho = ct.diurnal_rho(self.now, w.trough_rho, w.peak_rho, w.peak_hour)
        lam_svc = self.svc_size * w.service_rate * rho
        self.web_lam = np.where(
            running, lam_svc[self.web_svc] / np.maximum(per_svc[self.web_svc], 1), 0.0
        )
        use = w.cpu_milli * self.web_lam / (w.service_rate * w.peak_rho)
        nodes = self.pod_node[self.web_pods]
        self.web_demand = np.bincount(
            nodes[running], weights=use[running], minlength=len(self.snap)
        ).astype(np.float64)
        self.web_running = per_svc

    def _window(self) -> None:
        """Web SLO check and the utilisation sample for the plot, every web window."""
        self._web_load()
        self._speeds()
        if self.web_pods.size and self.now > 0:
            w = self.cfg.web
            running = self.pod_state[self.web_pods] == RUNNING
            mu = w.service_rate * self.speed[np.maximum(self.pod_node[self.web_pods], 0)]
            viol = ct.service_violations(
                self.web_svc[running],
                self.web_lam[running],
                mu[running],
                w.slo_p99_s,
                self.svc_size.size,
                self.web_running,
            )
            self.acc.sla("web", int(viol.sum()), int(self.svc_size.size))
        a = self.acc
        snap, on = self.snap, self.on
        used = np.array(
            [snap.cpu_used.sum(), snap.mem_used.sum(), self.gpu_cap.sum() - snap.gpu_free.sum()]
        )
        cap = np.array([snap.cpu_cap @ on, snap.mem_cap @ on, self.gpu_cap @ on])
        frac = np.where(cap > 0, used / np.maximum(cap, 1e-9), 0.0)
        a.series_t.append(self.now)
        a.series_util.append(float(frac.mean() * 100.0))
        a.series_nodes_on.append(int(on.sum()))
        if self.progress is not None:
            self.progress(self.now)

    def _speeds(self) -> None:
        c = self.cfg.contention
        self.speed = ct.node_speed(
            self.demand + self.web_demand, self.snap.cpu_cap, c.threshold, c.beta
        )

    def _rates(self) -> None:
        self._speeds()
        run = self.pod_state == RUNNING
        J = self.job_rate.size
        ex = run & self.pod_exec
        jobs_ex = self.pod_job[ex]
        sp = self.speed[self.pod_node[ex]]
        cnt = np.bincount(jobs_ex, minlength=J).astype(np.float64)
        ssum = np.bincount(jobs_ex, weights=sp, minlength=J)
        batch_rate = np.where(
            cnt > 0, ssum / np.maximum(cnt, 1) * np.minimum(cnt, self.job_par), 0.0
        )
        tr = run & (self.pod_kind == TRAIN)
        tmin = np.ones(J)
        np.minimum.at(tmin, self.pod_job[tr], self.speed[self.pod_node[tr]])
        train_rate = self.job_loc * ct.training_speed(tmin, self.cfg.contention.train_sensitivity)
        k = self.job_kind
        self.job_rate = (
            np.where(
                k == BATCH,
                batch_rate,
                np.where(k == TRAIN, train_rate, np.where(k == BE, 1.0, 0.0)),
            )
            * self.job_active
        )

    # ---------------------------------------------------------------- scheduling
    def _schedule(self) -> Generator[Decision, int, None]:
        """One pass over the pending groups: priority order, FIFO within a group.

        Pods of one shape and priority form a group; when its head fails even after
        preemption, the rest of the group would fail too, so the pass moves on. Groups are
        revisited only when capacity was freed or they gained pods.
        """
        if not self.groups:
            return
        for q in self.groups.values():  # drop units that finished or got placed meanwhile
            while q and self.pod_state[self._unit_pods(q[0])[0]] != PENDING:
                q.popleft()
        order = sorted(
            (k for k, q in self.groups.items() if q and (self.dirty or k in self.group_new)),
            key=lambda k: (-k[0], self.pod_submit[self._unit_pods(self.groups[k][0])[0]]),
        )
        self.dirty = False
        self.group_new.clear()
        for key in order:
            q = self.groups[key]
            while q:
                unit = q[0]
                if self.pod_state[self._unit_pods(unit)[0]] != PENDING:
                    q.popleft()
                    continue
                ok = yield from self._place(self._unit_pods(unit))
                if not ok and self._preempt(self._unit_pods(unit)):
                    ok = yield from self._place(self._unit_pods(unit))
                if not ok:
                    break
                q.popleft()

    def _place(self, pods: list[int]) -> Generator[Decision, int, bool]:
        """Place all of ``pods`` or none (gang): roll back partial placements."""
        placed: list[int] = []
        for p in pods:
            spec = self.wl.pods[p]
            nodes = np.flatnonzero(feasible(spec, self.snap))
            if nodes.size == 0:
                for q in placed:
                    release(self.snap, self.wl.pods[q], int(self.pod_node[q]), self.pod_gpus[q])
                    if self._on_release is not None:
                        self._on_release(
                            self.wl.pods[q], self.snap, int(self.pod_node[q]), self.pod_gpus[q]
                        )
                    self.pod_node[q] = -1
                    self.pod_gpus[q] = ()
                return False
            node = yield Decision(spec, p, int(self.pod_job[p]), nodes, self.snap, self.now)
            node = int(node)
            if node not in nodes:
                raise ValueError(f"policy chose node {node}, not a feasible node for {spec.name}")
            gpus = self.select_gpus(spec, self.snap, node)
            allocate(self.snap, spec, node, gpus)
            if self._on_bind is not None:
                self._on_bind(spec, self.snap, node, gpus)
            self.pod_node[p] = node
            self.pod_gpus[p] = gpus
            placed.append(p)
        for p in placed:
            self._bind(p)
        return True

    def _bind(self, p: int) -> None:
        node, spec, st = int(self.pod_node[p]), self.wl.pods[p], self.cfg.startup
        self.pod_gslot[p] = self.pod_gpus[p][0] if len(self.pod_gpus[p]) == 1 else -1
        self.pod_state[p] = STARTING
        self.pod_bound_at[p] = self.now
        if np.isnan(self.pod_bind[p]):
            self.pod_bind[p] = self.now
        if not self.on[node]:
            self.on[node] = True
            self.boot_done[node] = self.now + st.node_boot_s
        self.empty_since[node] = np.inf
        t = max(self.now, self.boot_done[node])
        img = spec.image
        if img >= 0:
            ready = self.image_ready.get((node, img))
            if ready is None:
                ready = t + st.image_mib[img] / st.pull_mib_per_s
                self.image_ready[(node, img)] = ready
                imgs = self.snap.images
                assert imgs is not None
                imgs[node] = imgs[node] | {img}
            t = max(t, ready)
        self._push(t + st.container_start_s, READY, p, int(self.pod_epoch[p]))

    def _preempt(self, pods: list[int]) -> bool:
        bound = np.flatnonzero((self.pod_node >= 0) & self.pod_reclaim)
        prio = self.pod_prio[pods[0]]
        if bound.size == 0 or not np.any(self.pod_prio[bound] < prio):
            return False
        b = preemption.Bound(
            node=self.pod_node[bound],
            cpu=self.pod_cpu[bound],
            mem=self.pod_mem[bound],
            gpu_milli=self.pod_gmilli[bound],
            gslot=self.pod_gslot[bound],
            prio=self.pod_prio[bound],
            start=self.pod_bound_at[bound],
            reclaimable=np.ones(bound.size, dtype=bool),
        )
        victims = preemption.plan([self.wl.pods[p] for p in pods], self.snap, b)
        if not victims:
            return False
        for v in bound[victims]:
            self._evict(int(v))
        return True

    def _evict(self, p: int) -> None:
        job = self.wl.jobs[self.pod_job[p]]
        self._release(p)
        self.acc.preemptions += 1
        if job.kind == BE:  # a reclaimed notebook restarts from scratch
            self.job_active[job.id] = False
            self.job_left[job.id] = job.stage_work[0]
        self._submit([p], False)

    # ---------------------------------------------------------------- the end
    def _finish(self) -> None:
        for job in self.wl.jobs:
            if not np.isnan(self.job_done[job.id]) or job.submit >= self.horizon:
                continue
            if job.kind == BATCH and job.deadline < self.horizon:
                self.acc.sla("batch", 1)
            if (
                job.kind == TRAIN
                and not self.job_active[job.id]
                and (self.horizon - job.submit > self.cfg.training.start_delay_limit_s)
            ):
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
        if burst.any():
            out["burst"] = self._burst_summary()
        out["pods_submitted"] = int(sub.sum())
        out["sim_hours"] = self.horizon / 3600.0
        return out

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
