"""The scenario engine's state (per-node, per-pod and per-job numpy arrays), shared by the
scheduling pass (:mod:`scheduling`), job progress (:mod:`progress`) and :mod:`engine`."""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dsan.core.filtering import allocate, best_fit_gpus, release
from dsan.core.snapshot import ClusterSnapshot, PodSpec
from dsan.policies.base import Controller, Scorer, StaticController
from dsan.policies.reclaim import Reclaimer
from dsan.sim.scenario.cluster import build_cluster
from dsan.sim.scenario.config import ScenarioConfig
from dsan.sim.scenario.metrics import Accumulator, ReclaimCost
from dsan.sim.scenario.overprovision import PlaceholderPool
from dsan.sim.scenario.preemption import SimulatorDefault
from dsan.sim.scenario.workload import BATCH, WEB, Workload, generate

ARRIVE, READY, WINDOW, WAKE = 0, 1, 2, 3  # WAKE: no handler; it wakes the loop to recompute rates
PENDING, STARTING, RUNNING, DONE = 1, 2, 3, 4  # 0: not submitted yet
EPS = 1e-6

SelectGpus = Callable[[PodSpec, ClusterSnapshot, int], tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class Decision:
    """One placement to make: give back an entry of ``nodes`` (an index into ``snapshot``)."""

    pod: PodSpec
    job_id: int
    nodes: np.ndarray  # feasible node indices, never empty
    snapshot: ClusterSnapshot  # the engine's live snapshot: read it, never mutate it
    time_s: float


class EngineState:
    """The engine's arrays and the bookkeeping every part of it shares."""

    def __init__(self, cfg: ScenarioConfig, seed: int, *, burst: bool = False,
                 hours: float | None = None, workload: Workload | None = None,
                 select_gpus: SelectGpus | None = None) -> None:
        self.cfg = cfg
        #: Version 3 measures [t0, horizon): the warm-up before t0 counts in no metric.
        self.v3 = cfg.version >= 3
        self.t0 = cfg.warmup_h * 3600.0
        self.horizon = self.t0 + float(hours if hours is not None else cfg.hours) * 3600.0
        self.snap = build_cluster(cfg.cluster, cfg.metrics.telemetry_len)
        self.wl = workload if workload is not None else generate(cfg, seed, burst)
        self.select_gpus: SelectGpus = select_gpus or best_fit_gpus
        # A stateful scorer (e.g. gpu-clustering) tracks binds and releases (Engine.attach).
        self.hooks: Scorer | None = None
        # The policy's actions beyond node choice (Engine.attach): Kubernetes' until then.
        self.reclaimer: Reclaimer = SimulatorDefault()
        self.controller: Controller = StaticController()
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
        self.job_work0 = np.array([j.stage_work[0] for j in wl.jobs])
        self.job_left = self.job_work0.copy()
        self.job_stage = np.zeros(J, dtype=np.int64)
        self.job_par = np.array([j.stage_par[0] if j.stage_par else 0 for j in wl.jobs],
                                dtype=np.float64)
        self.job_active = np.zeros(J, dtype=bool)
        self.job_rate = np.zeros(J)
        self.job_loc = np.ones(J)
        self.job_done = np.full(J, np.nan)
        self.job_kind = np.array([j.kind for j in wl.jobs], dtype=np.int64)
        # Elastic jobs: the start unit (base pods), the size the work is measured at, when the
        # job first had its base running, its wait for binds, and a resize pause.
        self.job_base = np.array([j.base or len(j.pods) for j in wl.jobs], dtype=np.int64)
        self.job_nominal = np.array([j.nominal for j in wl.jobs], dtype=np.float64)
        self.job_start = np.full(J, np.nan)
        self.job_wait = np.full(J, np.nan)
        self.job_pause = np.zeros(J)
        # Pods above their job's minimum (a Spark job's extra executors, an elastic training
        # job's extra workers): evicting one shrinks the job instead of stopping it.
        self.pod_elastic = np.fromiter((p.elastic for p in wl.pods), dtype=bool, count=P)
        self.reclaim = {"all": ReclaimCost(), "burst": ReclaimCost()}
        self.burst_capacity: dict[str, float] = {}
        self.on = np.ones(n, dtype=bool)
        self.ph = PlaceholderPool(cfg.overprovisioning, self.snap)
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
        self.web_lam = np.zeros(self.web_pods.size)  # per-replica request rate
        self.web_running = np.zeros(self.svc_size.size, dtype=np.int64)
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
        if self.t0 > 0:  # the end of the warm-up splits the clock's advance there
            self._push(self.t0, WAKE, -1)

    def _push(self, t: float, kind: int, a: int, b: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, a, b))

    def _unit_pods(self, unit: int) -> list[int]:
        if unit >= 0:
            return [unit]
        job = -1 - unit  # a gang: the job's base pods (an elastic job's extras come later)
        return self.wl.jobs[job].pods[:int(self.job_base[job])]

    def _submit(self, pods: list[int], gang: bool) -> None:
        for p in pods:
            self.pod_state[p] = PENDING
            if np.isnan(self.pod_submit[p]):
                self.pod_submit[p] = self.now
        units = [pods] if gang else [[p] for p in pods]
        for u in units:
            spec = self.wl.pods[u[0]]
            key = (spec.priority, spec.cpu_milli, spec.mem_mib, spec.num_gpu, spec.gpu_milli,
                   len(u))
            self.groups.setdefault(key, deque()).append(-1 - self.pod_job[u[0]] if gang else u[0])
            self.group_new.add(key)

    def _locality(self, pods: list[int]) -> float:
        s, loc = self.snap, self.cfg.locality
        nodes = self.pod_node[pods]
        nodes = nodes[nodes >= 0]  # an elastic job's unbound extra workers do not count
        if nodes.size == 0:
            return loc.node
        assert s.nvlink is not None and s.rack is not None
        if np.all(nodes == nodes[0]):
            return loc.node
        if np.all(s.nvlink[nodes] == s.nvlink[nodes[0]]) and s.nvlink[nodes[0]] >= 0:
            return loc.nvlink
        if np.all(s.rack[nodes] == s.rack[nodes[0]]):
            return loc.rack
        return loc.cross_rack

    def _resize(self, j: int, grow: bool) -> None:
        """An elastic training job changed size: checkpoint and restart (no progress for
        ``training.elastic.restart_s``) at its new locality."""
        job = self.wl.jobs[j]
        restart = self.cfg.training.elastic.restart_s
        running = [q for q in job.pods if self.pod_state[q] == RUNNING and self.pod_node[q] >= 0]
        if restart > 0:
            self.job_pause[j] = self.now + restart
            self._push(self.now + restart, WAKE, j)
        self.job_loc[j] = self._locality(running)
        if grow and self.now >= self.t0:
            self.acc.elastic_grows += 1
            self.acc.grow_stall_gpu_s += restart * len(running)

    def _release(self, p: int) -> None:
        node = int(self.pod_node[p])
        if self.pod_state[p] == RUNNING:
            if self.pod_kind[p] != WEB:
                self.demand[node] -= self.pod_cpu[p] * self.pod_use[p]
            self.gpu_busy[node] -= self.pod_gmilli[p] * self.pod_act[p]
        self._free(self.wl.pods[p], node, self.pod_gpus[p])
        self.pod_node[p] = -1
        self.pod_gslot[p] = -1
        self.pod_gpus[p] = ()
        self.pod_epoch[p] += 1
        assert self.snap.pod_count is not None
        if self.snap.pod_count[node] == 0:
            self.empty_since[node] = self.now
        self.dirty = True

    def _alloc(self, spec: PodSpec, node: int, gpus: tuple[int, ...]) -> None:
        allocate(self.snap, spec, node, gpus)
        if self.hooks is not None:
            self.hooks.on_bind(spec, self.snap, node, gpus)

    def _free(self, spec: PodSpec, node: int, gpus: tuple[int, ...]) -> None:
        release(self.snap, spec, node, gpus)
        if self.hooks is not None:
            self.hooks.on_release(spec, self.snap, node, gpus)
