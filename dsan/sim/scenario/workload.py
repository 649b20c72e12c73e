"""Workload generators: the jobs and pods of one scenario run, drawn up front from a seed
(classes in docs/scenarios.md; ``kind`` indexes dsan.api.types.TASK_TYPES). Each class has
its own random stream, so changing one class's rate does not reshuffle the others.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from dsan.core.snapshot import PodSpec
from dsan.sim.scenario.config import ScenarioConfig, TrainingConfig

BE, TRAIN, BATCH, WEB = 0, 1, 2, 3
KIND_NAMES = ("besteffort", "training", "batch", "web")


@dataclass(slots=True)
class Job:
    id: int
    kind: int
    submit: float
    pods: list[int]
    stage_work: list[float]  # work per stage in speed-1 seconds (web: inf)
    stage_par: list[int] = field(default_factory=list)  # executor cap per stage (batch only)
    deadline: float = float("inf")
    service: int = -1
    burst: bool = False
    #: Elastic jobs (version 3): the first ``base`` pods must all run for the job to count as
    #: started (a training gang's minimum workers; a Spark driver and its minimum executors);
    #: ``nominal`` is the worker count the work is measured at (training rate scales with
    #: running workers / nominal). 0: every pod (training), the driver (batch).
    base: int = 0
    nominal: int = 0


@dataclass
class Workload:
    jobs: list[Job]
    pods: list[PodSpec]
    pod_job: list[int]
    pod_cpu_use: list[float]  # actual CPU use / request (contention input)
    pod_gpu_act: list[float]  # GPU activity per allocated GPU share (telemetry input)
    pod_reclaimable: list[bool]
    n_services: int


def training_durations(t: TrainingConfig, gpus: str, u: np.ndarray) -> np.ndarray:
    """A GPU class's durations at uniforms ``u``: the inverse CDF of its quantile table,
    log-linear between the stored points, clipped to [min_duration_s, max_duration_s]."""
    d = np.exp(np.interp(u, np.asarray(t.quantile_points) / 100.0,
                         np.log(np.maximum(t.duration_quantiles_s[gpus], 1e-9))))
    return np.clip(d, t.min_duration_s, t.max_duration_s)


def _poisson_times(rng: np.random.Generator, rate_per_h: float, hours: float,
                   amplitude: float = 0.0, peak_hour: float = 0.0) -> np.ndarray:
    """Arrivals of a Poisson process whose rate follows a daily cosine (by thinning):
    ``rate(t) = rate_per_h * (1 + amplitude * cos(2 pi (t_h - peak_hour) / 24))``."""
    n = rng.poisson(rate_per_h * (1.0 + amplitude) * hours)
    t = np.sort(rng.random(n) * hours * 3600.0)
    keep = rng.random(n) * (1.0 + amplitude) <= 1.0 + amplitude * np.cos(
        2.0 * np.pi * (t / 3600.0 - peak_hour) / 24.0
    )
    return t[keep]


class WorkloadBuilder:
    """Accumulates jobs and pods; the generators below use it, and tests build tiny
    hand-worked workloads with it directly."""

    def __init__(self, cfg: ScenarioConfig) -> None:
        self.cfg = cfg
        self.hours = cfg.warmup_h + cfg.hours  # arrivals cover the warm-up too
        self.wl = Workload([], [], [], [], [], [], cfg.web.services)

    def pod(self, job: Job, spec: PodSpec, cpu_use: float, gpu_act: float, reclaim: bool) -> None:
        """Add ``spec`` to ``job``; a pod past the job's ``base`` (its minimum) is elastic:
        evicting it shrinks the job (best effort has no minimum to shrink to)."""
        if job.kind != BE and job.base and len(job.pods) >= job.base and not spec.elastic:
            spec = replace(spec, elastic=True)
        wl = self.wl
        job.pods.append(len(wl.pods))
        wl.pods.append(spec)
        wl.pod_job.append(job.id)
        wl.pod_cpu_use.append(cpu_use)
        wl.pod_gpu_act.append(gpu_act)
        wl.pod_reclaimable.append(reclaim)

    def job(self, kind: int, submit: float, work: list[float], **kw: object) -> Job:
        j = Job(id=len(self.wl.jobs), kind=kind, submit=submit, pods=[], stage_work=work, **kw)  # type: ignore[arg-type]
        self.wl.jobs.append(j)
        return j

    def build(self) -> Workload:
        return self.wl

    def training(self, rng: np.random.Generator, times: np.ndarray, burst: bool) -> None:
        t = self.cfg.training
        extra = t.elastic.max_factor - 1
        classes = list(t.gpu_count_probs)
        p = np.array([t.gpu_count_probs[k] for k in classes])
        picks = rng.choice(len(classes), size=times.size, p=p / p.sum())
        for at, ci in zip(times, picks, strict=True):
            k = classes[int(ci)]
            dur = float(training_durations(t, k, rng.random(1))[0])
            g = int(k)
            image = t.images[int(rng.integers(len(t.images)))]
            job = self.job(TRAIN, float(at), [dur], stage_par=[0], burst=burst, base=g,
                           nominal=g)
            for w in range(g + g * extra):
                more = w >= g  # past the gang: an elastic extra worker (version 3)
                spec = PodSpec(f"train-{job.id}-{w}", t.worker_cpu_milli, t.worker_mem_mib,
                               num_gpu=1, gpu_milli=1000,
                               priority=t.elastic.priority if more else t.priority,
                               task_type=TRAIN, gang_size=1 if more else g, image=image)
                self.pod(job, spec, t.cpu_use_frac, t.gpu_activity, more)

    def burst_v2(self, rng: np.random.Generator, times: np.ndarray) -> None:
        """Burst version 2: one-pod ResNet50 jobs on a GPU share (``burst`` config)."""
        t, bu = self.cfg.training, self.cfg.burst
        for at in times:
            milli = int(bu.gpu_milli[int(rng.integers(len(bu.gpu_milli)))])
            dur = float(rng.uniform(bu.duration_s[0], bu.duration_s[1]))
            job = self.job(TRAIN, float(at), [dur], stage_par=[0], burst=True, base=1,
                           nominal=1)
            spec = PodSpec(f"burst-{job.id}", bu.cpu_milli, bu.mem_mib, num_gpu=1,
                           gpu_milli=milli, priority=t.priority, task_type=TRAIN, gang_size=1,
                           image=t.images[0])
            self.pod(job, spec, t.cpu_use_frac, t.gpu_activity, False)

    def batch(self, rng: np.random.Generator) -> None:
        b = self.cfg.batch
        for at in _poisson_times(rng, b.jobs_per_h, self.hours, b.diurnal_amplitude,
                                 b.peak_hour + self.cfg.warmup_h):
            e = int(rng.choice(b.executors))
            cpu = float(rng.choice(b.executor_cpu_milli))
            stages = int(rng.integers(b.stages[0], b.stages[1] + 1))
            nominal = float(b.duration_median_s * np.exp(b.duration_sigma * rng.standard_normal()))
            par = [int(x) for x in rng.integers(max(1, e // 4), e + 1, size=stages)]
            work = [nominal / stages * p for p in par]  # nominal/stages per stage at full width
            job = self.job(BATCH, float(at), work, stage_par=par,
                           deadline=float(at) + b.deadline_slack * nominal,
                           base=1 + b.min_executors)
            image = b.images[0]
            driver = PodSpec(f"batch-{job.id}-driver", b.driver_cpu_milli, b.driver_mem_mib,
                             priority=b.driver_priority, task_type=BATCH, image=image)
            self.pod(job, driver, 0.5, 0.0, False)
            for x in range(e):
                core = x < b.min_executors  # dynamic allocation's minimum (version 3)
                prio = b.executor_priority if core or b.min_executors == 0 else b.elastic_priority
                spec = PodSpec(f"batch-{job.id}-exec-{x}", cpu, cpu / 1000.0 * b.mem_mib_per_core,
                               priority=prio, task_type=BATCH, image=image)
                self.pod(job, spec, b.cpu_use_frac, 0.0, not core)

    def web(self, rng: np.random.Generator) -> None:
        w = self.cfg.web
        for s in range(w.services):
            r = int(rng.integers(w.replicas[0], w.replicas[1] + 1))
            job = self.job(WEB, 0.0, [float("inf")], stage_par=[0], service=s, base=r)
            image = w.images[s % len(w.images)]
            for i in range(r):
                spec = PodSpec(f"web-{s}-{i}", w.cpu_milli, w.mem_mib, priority=w.priority,
                               task_type=WEB, image=image)
                self.pod(job, spec, 1.0, 0.0, False)

    def besteffort(self, rng: np.random.Generator) -> None:
        be = self.cfg.besteffort
        shares = [int(k) for k in be.gpu_milli_probs]
        p = np.array(list(be.gpu_milli_probs.values()))
        for at in _poisson_times(rng, be.pods_per_h, self.hours):
            milli = shares[int(rng.choice(len(shares), p=p / p.sum()))]
            dur = float(rng.exponential(be.duration_mean_s))
            job = self.job(BE, float(at), [max(dur, 1.0)], stage_par=[0], base=1)
            spec = PodSpec(f"be-{job.id}", be.cpu_milli, be.mem_mib, num_gpu=1, gpu_milli=milli,
                           priority=be.priority, task_type=BE, image=be.images[0])
            self.pod(job, spec, 0.5, be.gpu_activity, True)


def generate(cfg: ScenarioConfig, seed: int, burst: bool = False) -> Workload:
    """All jobs of one run, sorted by submission time (ids follow that order)."""
    streams = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(5)]
    b = WorkloadBuilder(cfg)
    b.web(streams[0])
    t, w = cfg.training, cfg.warmup_h
    times = _poisson_times(streams[1], t.jobs_per_h, b.hours, t.diurnal_amplitude,
                           t.peak_hour + w)
    b.training(streams[1], times, False)
    b.batch(streams[2])
    b.besteffort(streams[3])
    if burst:
        bc = cfg.burst
        at = (w + bc.at_h) * 3600.0 + np.sort(streams[4].random(bc.jobs)) * bc.window_s
        if bc.version == 2:
            b.burst_v2(streams[4], at)
        else:
            b.training(streams[4], at, True)
    return b.build()
