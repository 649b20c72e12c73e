"""Offered load of a scenario config (docs/scenarios.md, *Offered load*): the arrival rates
in the YAML are derived from its targets. A class with rate ``r (1 + a cos(w (t - peak)))``
whose jobs hold ``x`` units for ``D`` keeps ``r E[x D]`` busy on the daily mean and
``r (E[x D] + a |F|)`` at the peak, ``F = E[x (1 - e^{-i w D}) / (i w)]``, at speed 1.
Expectations use a midpoint rule on the sampler's uniform (no random numbers).
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

from dsan.sim.scenario.config import ScenarioConfig, TrainingConfig
from dsan.sim.scenario.workload import training_durations

F64 = npt.NDArray[np.float64]
OMEGA = 2.0 * np.pi / 86400.0
_GRID = 20000
_U = (np.arange(_GRID) + 0.5) / _GRID


@dataclass(frozen=True)
class Offered:
    """Mean and diurnal-peak offered load of one resource, in its units and as a fraction."""

    mean: float
    peak: float
    capacity: float

    @property
    def mean_frac(self) -> float:
        return self.mean / self.capacity

    @property
    def peak_frac(self) -> float:
        return self.peak / self.capacity


def _moments(weights: F64, x: F64, d: F64) -> tuple[float, float]:
    """(E[x D], |E[x (1 - e^{-iwD}) / (iw)]|) for a discrete mixture with these weights."""
    w = weights / weights.sum()
    f = (1.0 - np.exp(-1j * OMEGA * d)) / (1j * OMEGA)
    return float((w * x * d).sum()), float(abs((w * x * f).sum()))


def training_moments(t: TrainingConfig) -> tuple[float, float]:
    """Per job: (E[GPUs x duration] in GPU-seconds, the diurnal term |F|)."""
    probs = np.array(list(t.gpu_count_probs.values()), dtype=np.float64)
    probs /= probs.sum()
    w, x, d = [], [], []
    for p, k in zip(probs, t.gpu_count_probs, strict=True):
        dur = training_durations(t, k, _U)
        w.append(np.full(dur.size, p / dur.size))
        x.append(np.full(dur.size, float(k)))
        d.append(dur)
    return _moments(np.concatenate(w), np.concatenate(x), np.concatenate(d))


def _be(cfg: ScenarioConfig) -> tuple[float, float]:
    """Best effort: (pods running on average, mean GPU share per pod); constant rate."""
    be = cfg.besteffort
    shares = np.array([int(k) / 1000.0 for k in be.gpu_milli_probs])
    p = np.array(list(be.gpu_milli_probs.values()))
    return be.pods_per_h / 3600.0 * be.duration_mean_s, float((shares * p).sum() / p.sum())


def training_rate_for(cfg: ScenarioConfig) -> float:
    """Training jobs/h that make the mean blocked-GPU load ``load_targets.gpu_mean``:
    ``r = (target x GPUs - best-effort pods) / E[GPUs x duration]``."""
    gpus = sum(g.count * g.gpus for g in cfg.cluster.node_groups)
    exd, _ = training_moments(cfg.training)
    be_pods, _ = _be(cfg)
    return (cfg.load_targets.gpu_mean * gpus - be_pods) * 3600.0 / exd


def _batch_moments(cfg: ScenarioConfig, per_core: float, driver: float) -> tuple[float, float]:
    """Per batch job: (E[units x D], |F|) with units = driver + executors x cores x per_core."""
    b = cfg.batch
    # Lognormal nominal duration on the grid; a job holds its executors for all its stages,
    # which at speed 1 and full width last exactly the nominal time.
    z = np.array([NormalDist().inv_cdf(float(u)) for u in _U[:: _GRID // 2000]])
    d = b.duration_median_s * np.exp(b.duration_sigma * z)
    units = driver + float(np.mean(b.executors)) * float(np.mean(b.executor_cpu_milli)) * per_core
    return _moments(np.ones(d.size), np.full(d.size, units), d)


def _cpu_terms(cfg: ScenarioConfig, res: str) -> tuple[tuple[float, float], float, float, float]:
    """For resource ``res`` (cpu cores or mem GiB): the batch moments, the units per
    training worker, the steady load of web + best effort, and the cluster capacity."""
    t, b, w, be = cfg.training, cfg.batch, cfg.web, cfg.besteffort
    groups = cfg.cluster.node_groups
    replicas = w.services * (w.replicas[0] + w.replicas[1]) / 2.0
    be_pods, _ = _be(cfg)
    if res == "cpu":
        mom = _batch_moments(cfg, 1e-3, b.driver_cpu_milli * 1e-3)
        per = (t.worker_cpu_milli * 1e-3, w.cpu_milli * 1e-3, be.cpu_milli * 1e-3)
        cap = sum(g.count * g.cpu_milli for g in groups) / 1000.0
    else:
        mom = _batch_moments(cfg, b.mem_mib_per_core / 1024.0 * 1e-3, b.driver_mem_mib / 1024.0)
        per = (t.worker_mem_mib / 1024.0, w.mem_mib / 1024.0, be.mem_mib / 1024.0)
        cap = sum(g.count * g.mem_mib for g in groups) / 1024.0
    return mom, per[0], replicas * per[1] + be_pods * per[2], cap


def batch_rate_for(cfg: ScenarioConfig) -> float:
    """Batch jobs/h that make the peak requested cores ``load_targets.cpu_peak`` of all
    cores, given the training rate already set (its workers' cores count too)."""
    (bxd, bf), worker, steady, cap = _cpu_terms(cfg, "cpu")
    t = cfg.training
    exd, f = training_moments(t)
    train_peak = t.jobs_per_h / 3600.0 * (exd + t.diurnal_amplitude * f)
    room = cfg.load_targets.cpu_peak * cap - steady - train_peak * worker
    return max(room, 0.0) * 3600.0 / (bxd + cfg.batch.diurnal_amplitude * bf)


def offered(cfg: ScenarioConfig) -> dict[str, Offered]:
    """Offered load of the steady mix (no burst): ``gpu`` counts GPU shares (what the
    utilisation metric counts), ``gpu_blocked`` a sharing pod as a whole GPU (what
    whole-GPU training can no longer use), ``cpu`` in cores, ``mem`` in GiB."""
    gpu_cap = float(sum(g.count * g.gpus for g in cfg.cluster.node_groups))
    t, b = cfg.training, cfg.batch
    exd, f = training_moments(t)
    train_mean = t.jobs_per_h / 3600.0 * exd
    train_peak = t.jobs_per_h / 3600.0 * (exd + t.diurnal_amplitude * f)
    be_pods, share = _be(cfg)
    out: dict[str, Offered] = {
        "gpu": Offered(train_mean + be_pods * share, train_peak + be_pods * share, gpu_cap),
        "gpu_blocked": Offered(train_mean + be_pods, train_peak + be_pods, gpu_cap),
    }
    rate = b.jobs_per_h / 3600.0
    for res in ("cpu", "mem"):
        (bxd, bf), worker, steady, cap = _cpu_terms(cfg, res)
        # Batch and training peak at the same hour in the shipped config; adding the two
        # peaks is then exact, and an upper bound otherwise.
        out[res] = Offered(rate * bxd + train_mean * worker + steady,
                           rate * (bxd + b.diurnal_amplitude * bf) + train_peak * worker + steady,
                           cap)
    return out


def main(argv: list[str] | None = None) -> int:
    import sys

    from dsan.sim.scenario.config import load

    args = sys.argv[1:] if argv is None else argv
    cfg = load(args[0] if args else "seed-table1")
    for name, o in offered(cfg).items():
        print(f"{name}: mean {o.mean:.1f} ({100 * o.mean_frac:.1f} %), "
              f"peak {o.peak:.1f} ({100 * o.peak_frac:.1f} %) of {o.capacity:.0f}")
    exd, f = training_moments(cfg.training)
    print(f"training: E[GPUs x duration] = {exd:.0f} GPU-s/job; |F|/E = {f / exd:.2f}")
    print(f"derived: training.jobs_per_h = {training_rate_for(cfg):.2f}, "
          f"batch.jobs_per_h = {batch_rate_for(cfg):.2f} (shipped: "
          f"{cfg.training.jobs_per_h}, {cfg.batch.jobs_per_h})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
