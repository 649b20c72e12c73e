"""Utilisation against start-up tail: the seed scenario's P99 trade, measured side by side.

The P99 task latency of seed-table1 is 99.5 s (90 s node boot + 7.5 s Spark image pull + 2 s
start) as soon as more than 1 % of the pods wait for a node boot; below that it drops to the
next start-up level (9.5 s Spark pull, 17 s notebook pull, 42 s training pull) or to the GPU
queue. This runs the three baselines and the scenario teachers (``dsan.train.teachers``: the
packing ``Composite`` that DSAN imitates, the same with a powered-headroom knob (``PreWarm``),
and the boot-aware ``Anchored`` of ``scenario_teachers.py`` at several anchor sets and fill
targets) on the same seeds in one process and prints one markdown row per policy: means over
seeds of util / P99 / SLA / cost, the P99 per seed, and the tail pods (at or above each
seed's P99) by cause.

The last two columns are the P99 budget: per seed, the pods with a latency of
99.5 s or more against the number allowed for a P99 under 99.5 s (n - ceil(0.99 n)), and the
boot events (a pod bound to a powered-off node). Every boot puts at least that pod at 99.5 s
(90 s boot + 7.5 s Spark pull + 2 s start), and so does every pod bound to the node in the
same scheduling pass (a wave of executors). The ``boot:`` rows: ``Keep`` (the packing teacher
with off nodes largest first, emptied powered nodes kept, spreading, one-pod pre-warm boots),
``Swing`` (a web pool on the 32-core nodes, 64-core nodes as swing capacity) and ``Oracle`` (an
upper bound, not a teacher: it knows the packing teacher's demand hours ahead). The
``class width:`` rows (``FullestInClass``): ``anchored-drivers`` taking, for CPU pods, the
fullest node within 2 / 0.5 / 0.1 points of its best, i.e. the worst a student imitating that
class may do
(``dsan train --imitation-tolerance``). The ``pool:`` rows (``bench/scenario_pool_rows.py``):
the always-on pool cut to fewer 32-core nodes, and three fill orders for GPU pods.

Usage::

    .venv/bin/python bench/scenario_boot_frontier.py --seeds 1-3 > out/boot-frontier.md
    # the shipped DSAN's budget too, and only the smarter-boot rows
    .venv/bin/python bench/scenario_boot_frontier.py --baselines k8s-default,tetris,fgd,dsan \
        --rows "boot:" > out/boot-frontier-boot.md
    .venv/bin/python bench/scenario_boot_frontier.py --seeds 10001-10003 \
        --baselines k8s-default,tetris,fgd,dsan --rows anchored-drivers  # held-out seeds
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from scenario_pool_rows import ROWS as POOL_ROWS  # bench/, next to this file
from scenario_teachers import Anchored, PackingRescue, powered

from dsan.core.snapshot import ClusterSnapshot, PodSpec
from dsan.features.target import TargetWorkload
from dsan.policies.base import Scorer
from dsan.sim.scenario.config import ScenarioConfig, load
from dsan.sim.scenario.engine import Engine
from dsan.sim.scenario.runner import default_factory, run_policy
from dsan.sim.scenario.workload import Workload
from dsan.train.teachers import WEB_TYPE, Composite

Make = Callable[[TargetWorkload], Scorer]


class PreWarm(Composite):
    """The packing teacher plus a powered-headroom knob (an experiment, not a training teacher:
    it reads a cluster-wide sum that no DSAN feature holds). While the powered, booted CPU
    nodes have fewer than ``h_min`` millicores of free 8-core executor slots (memory-bound
    too; small nodes only up to the 0.8 threshold), a CPU pod (not web) is sent to a
    powered-off 64-core node to boot it ahead of the next wave; booting nodes (pods bound, no
    CPU use in the last sample) rank below powered ones."""

    def __init__(self, target: TargetWorkload, h_min: float) -> None:
        super().__init__(target)
        self.h_min = h_min

    def score(self, pod: PodSpec, snap: ClusterSnapshot, nodes: np.ndarray) -> np.ndarray:
        s = super().score(pod, snap, nodes)
        if pod.num_gpu > 0 or pod.task_type == WEB_TYPE:
            return s
        assert snap.pod_count is not None and snap.images is not None
        assert snap.telemetry is not None
        warm = np.fromiter((len(x) > 0 for x in snap.images), dtype=bool, count=len(snap))
        on = (snap.pod_count > 0) | warm
        last = snap.telemetry[:, -1]
        booting = (snap.pod_count > 0) & (last[:, 0] <= 0) & (last[:, 1] > 0)
        s = s - 60.0 * booting[nodes]
        if _slot_headroom(snap, on) >= self.h_min:
            return s
        off = ~on[nodes] & (snap.cpu_cap[nodes] >= 64000) & (snap.gpu_count[nodes] == 0)
        return s + 5000.0 * off


def _slot_headroom(snap: ClusterSnapshot, on: np.ndarray) -> float:
    """Millicores of free 8-core executor slots (memory-bound too) on the powered CPU nodes
    ``on``; the 16-core nodes only up to the 0.8 contention threshold (they host web)."""
    cpu_free = np.maximum(0.0, snap.cpu_cap - snap.cpu_used)
    small = snap.cpu_cap <= 16000
    cpu_free = np.where(small, np.maximum(0.0, 0.8 * snap.cpu_cap - snap.cpu_used), cpu_free)
    slots = np.minimum(
        cpu_free // 8000, np.maximum(0.0, snap.mem_cap - snap.mem_used) // (8 * 3815)
    )
    return float(slots[on & (snap.gpu_count == 0)].sum()) * 8000



def _prewarm(
    s: np.ndarray, snap: ClusterSnapshot, nodes: np.ndarray, on: np.ndarray, min_cap: float
) -> np.ndarray:
    """Send this pod to the largest powered-off CPU node of at least ``min_cap``: one boot
    per decision, since the booted node's slots count in the headroom at once."""
    cap = snap.cpu_cap[nodes]
    off = ~on[nodes] & (snap.gpu_count[nodes] == 0) & (cap >= min_cap)
    if not off.any():
        return s
    return s + 5000.0 * (off & (cap == cap[off].max()))


class Keep(PackingRescue):
    """The packing teacher with smarter boots, for CPU pods other than web (an
    experiment: ``h_min`` > 0 reads a cluster-wide sum that no DSAN feature holds).

    * a powered-off node is taken largest first (a 64-core boot brings four times the cores
      of a 16-core one), not fullest-after-placement first as in ``Composite``;
    * ``rescue``: a powered node that is empty in its 10-minute grace period comes first among
      the powered ones (otherwise it powers off and is booted back by the next wave);
      these two are ``packing-rescue`` (dsan.train.teachers.PackingRescue);
    * ``spread``: the emptiest powered node first instead of the fullest;
    * ``h_min``: while the powered CPU nodes hold fewer than ``h_min`` millicores of free
      executor slots, the pod boots the largest powered-off node ahead of the next wave.
    """

    def __init__(
        self, target: TargetWorkload, rescue: float = 0.0, spread: bool = False, h_min: float = 0.0
    ) -> None:
        super().__init__(target, rescue)
        self.spread, self.h_min = spread, h_min

    def score(self, pod: PodSpec, snap: ClusterSnapshot, nodes: np.ndarray) -> np.ndarray:
        s = super().score(pod, snap, nodes)
        if pod.num_gpu > 0 or pod.task_type == WEB_TYPE or not (self.spread or self.h_min > 0):
            return s
        on_all = powered(snap)
        if self.spread:
            after = np.minimum((snap.cpu_used[nodes] + pod.cpu_milli) / snap.cpu_cap[nodes], 1.0)
            s = s - 20.0 * after * on_all[nodes]
        if self.h_min > 0 and _slot_headroom(snap, on_all) < self.h_min:
            s = _prewarm(s, snap, nodes, on_all, 0.0)
        return s


class Swing(Composite):
    """A smaller always-on pool than ``Anchored``'s, with the 64-core nodes as the
    swing capacity (an experiment, reads the cluster-wide headroom). Web replicas spread one
    per node over the 32-core nodes (70; with ``big_zones`` 1 also the 64-core nodes of zone
    0), which keeps those nodes on all day; CPU pods keep the web hosts (pool and 16-core
    nodes) under 0.8 of their cores (first), prefer powered nodes, pack, take an emptied
    powered node first, boot the largest off node, and while the executor-slot headroom is
    under ``h_min`` boot a 64-core node ahead of the next wave."""

    def __init__(self, target: TargetWorkload, h_min: float, big_zones: int = 0) -> None:
        super().__init__(target)
        self.h_min, self.big_zones = h_min, big_zones

    def score(self, pod: PodSpec, snap: ClusterSnapshot, nodes: np.ndarray) -> np.ndarray:
        if pod.num_gpu > 0:
            return super().score(pod, snap, nodes)
        assert snap.pod_count is not None and snap.zone is not None
        cap = snap.cpu_cap[nodes]
        gpu_node = (snap.gpu_count[nodes] > 0).astype(np.float64)
        pool = (cap == 32000) | ((cap > 32000) & (snap.zone[nodes] < self.big_zones))
        count = snap.pod_count[nodes]
        after = (snap.cpu_used[nodes] + pod.cpu_milli) / np.maximum(cap, 1.0)
        cool = (after <= self.cool).astype(np.float64)
        if pod.task_type == WEB_TYPE:
            return (
                1000.0 * (1 - gpu_node) + 500.0 * pool + 200.0 * cool - 10.0 * np.minimum(count, 10)
            )
        on_all = powered(snap)
        on = on_all[nodes].astype(np.float64)
        cool = np.where(pool | (cap <= 16000), cool, 1.0)
        s = (
            1000.0 * (1 - gpu_node)
            + 400.0 * cool
            + 300.0 * on
            + 10.0 * np.minimum(after, 1.0)
            + 50.0 * ((count == 0) & (on > 0))
            + 20.0 * (1 - on) * cap / 64000.0
        )
        if _slot_headroom(snap, on_all) < self.h_min:
            s = _prewarm(s, snap, nodes, on_all, 64000.0)
        return s


class FullestInClass:
    """What a student that imitates ``inner``'s top class (the nodes within ``tol``
    points of its best) does at worst for the SLA: for CPU pods it takes the fullest node of
    that class, by requests after the pod (an experiment, not a teacher)."""

    def __init__(self, inner: Composite, tol: float) -> None:
        self.inner, self.tol = inner, tol
        self.name = inner.name
        self.select_gpus = inner.select_gpus

    def score(self, pod: PodSpec, snap: ClusterSnapshot, nodes: np.ndarray) -> np.ndarray:
        s = np.asarray(self.inner.score(pod, snap, nodes), dtype=np.float64)
        if pod.num_gpu > 0:
            return s
        after = (snap.cpu_used[nodes] + pod.cpu_milli) / np.maximum(snap.cpu_cap[nodes], 1.0)
        return np.where(s >= s.max() - self.tol, 1e4 + after, s)


#: label -> teacher constructor; the anchored rows vary the always-on pool (web replicas one
#: per node of at least that many cores) and the fill target.
TEACHERS: dict[str, Make] = {
    "teacher: packing (Composite, shipped stage)": lambda t: Composite(t),
    "teacher: packing + pre-warm below 500 cores of slots": lambda t: PreWarm(t, 500e3),
    "teacher: packing + pre-warm below 1,000 cores of slots": lambda t: PreWarm(t, 1000e3),
    "teacher: packing + pre-warm below 2,000 cores of slots": lambda t: PreWarm(t, 2000e3),
    "teacher: anchored >=64c (50 nodes)": lambda t: Anchored(t, web_min_cpu=64000.0),
    "teacher: anchored >=32c (120 nodes)": lambda t: Anchored(t),
    "teacher: anchored >=32c, fill to 0.5": lambda t: Anchored(t, tau=0.5),
    "teacher: anchored >=32c, drivers spread": lambda t: Anchored(t, spread_drivers=True),
    "teacher: anchored >=16c (130 of 190)": lambda t: Anchored(t, web_min_cpu=16000.0),
    "teacher: anchored >=64c, web nodes may run full": lambda t: Anchored(
        t, web_min_cpu=64000.0, cool=1.0
    ),
    "teacher: anchored >=32c, fill to 0.8, web nodes may run full": lambda t: Anchored(
        t, cool=1.0, tau=0.8
    ),
    # anchored-drivers with more SLA margin, a smaller pool, or no overheating
    "teacher: anchored-drivers, web nodes cool to 0.75": lambda t: Anchored(
        t, spread_drivers=True, cool=0.75
    ),
    "teacher: anchored-drivers, web nodes cool to 0.7": lambda t: Anchored(
        t, spread_drivers=True, cool=0.7
    ),
    "teacher: anchored-drivers >=64c (50 nodes)": lambda t: Anchored(
        t, spread_drivers=True, web_min_cpu=64000.0
    ),
    "teacher: anchored-drivers, booting a cool node beats a hot web node (w_on 190)": (
        lambda t: Anchored(t, spread_drivers=True, w_on=190.0)
    ),
    # the packing teacher with smarter boots, and a smaller pool with 64c swing
    "boot: packing, off nodes largest first": lambda t: Keep(t),
    "boot: packing, largest first, emptied powered nodes first": lambda t: Keep(t, 50.0),
    "boot: same + pre-warm the largest node below 600 cores of slots": lambda t: Keep(
        t, 50.0, h_min=600e3
    ),
    "boot: same, spread over powered nodes, no pre-warm": lambda t: Keep(t, 50.0, True),
    "boot: web pool on the 32c nodes, 64c swing, pre-warm 64c below 1,200 cores": (
        lambda t: Swing(t, 1200e3)
    ),
    "boot: same, pool + the 64c nodes of zone 0": lambda t: Swing(t, 1200e3, 1),
    # the imitation class's width (dsan train --imitation-tolerance), at its worst
    "class width: anchored-drivers, fullest node within 2 points (its own class)": (
        lambda t: FullestInClass(Anchored(t, spread_drivers=True), 2.0)
    ),
    "class width: anchored-drivers, fullest node within 0.5 points": (
        lambda t: FullestInClass(Anchored(t, spread_drivers=True), 0.5)
    ),
    "class width: anchored-drivers, fullest node within 0.1 points": (
        lambda t: FullestInClass(Anchored(t, spread_drivers=True), 0.1)
    ),
}


class _Demand(Composite):
    """The packing teacher, recording the CPU requested on the CPU nodes after every bind and
    release (the first pass of the oracle rows)."""

    def __init__(self, target: TargetWorkload, engine: Engine) -> None:
        super().__init__(target)
        self.engine = engine
        self.t: list[float] = [0.0]
        self.req: list[float] = [0.0]

    def _record(self, snap: ClusterSnapshot) -> None:
        self.t.append(self.engine.now)
        self.req.append(float(snap.cpu_used[snap.gpu_count == 0].sum()))

    def on_bind(self, pod: PodSpec, snap: ClusterSnapshot, node: int, gpus: Any) -> None:
        self._record(snap)

    def on_release(self, pod: PodSpec, snap: ClusterSnapshot, node: int, gpus: Any) -> None:
        self._record(snap)

    def per_minute(self, minutes: int) -> np.ndarray:
        """Requested millicores at each minute boundary (the last change before it)."""
        idx = np.searchsorted(np.asarray(self.t), 60.0 * np.arange(minutes), side="right") - 1
        return np.asarray(self.req)[idx]


class Oracle(Composite):
    """An upper-bound experiment, not a teacher: it knows the future. A first pass
    records the packing teacher's requested CPU per minute; this policy keeps the powered CPU
    capacity at ``k`` x the most that pass requests in the next ``window`` minutes: while
    under that target a CPU pod (not web) boots the largest powered-off node (one pod per
    boot, no wave), and pods spread over the powered nodes so that none empties and lapses;
    otherwise it packs like ``Composite`` (off nodes largest first, emptied nodes first)."""

    def __init__(self, target: TargetWorkload, engine: Engine, capacity: np.ndarray) -> None:
        super().__init__(target)
        self.engine, self.capacity = engine, capacity

    def score(self, pod: PodSpec, snap: ClusterSnapshot, nodes: np.ndarray) -> np.ndarray:
        s = super().score(pod, snap, nodes)
        if pod.num_gpu > 0 or pod.task_type == WEB_TYPE:
            return s
        assert snap.pod_count is not None
        on_all = powered(snap)
        on_cpu = float(snap.cpu_cap[on_all & (snap.gpu_count == 0)].sum())
        goal = self.capacity[min(int(self.engine.now // 60), self.capacity.size - 1)]
        on, count, cap = on_all[nodes], snap.pod_count[nodes], snap.cpu_cap[nodes]
        after = np.minimum((snap.cpu_used[nodes] + pod.cpu_milli) / cap, 1.0)
        s = s + np.where(on, 0.0, -10.0 * after + 20.0 * cap / 64000.0)
        s = s + 50.0 * ((count == 0) & on)
        if on_cpu < goal:
            s = s - 20.0 * after * on
            s = _prewarm(s, snap, nodes, on_all, 0.0)
        return s


TEACHERS.update(POOL_ROWS)  # the pool's size and GPU pods' fill order

#: label -> (k, window in minutes) of the oracle rows.
ORACLES: dict[str, tuple[float, int]] = {
    "oracle: powered >= 1.1 x the next hour's packing demand": (1.1, 60),
    "oracle: powered >= the next 4 hours' packing demand": (1.0, 240),
    "oracle: powered >= the next 10 hours' packing demand": (1.0, 600),
}


class _Counted:
    """A policy with its boot events counted: ``on_bind`` runs before the engine powers the
    node on, so a bind to a node the engine has off is a boot (once per node and instant: a
    gang's pods all pass ``on_bind`` before the engine binds them). Forwards the policy's own
    bind/release hooks (stateful scorers use them)."""

    def __init__(self, inner: Scorer, engine: Engine) -> None:
        self.inner, self.engine = inner, engine
        self.name = inner.name
        self._booted: set[tuple[int, float]] = set()

    @property
    def boots(self) -> int:
        return len(self._booted)

    def score(self, pod: PodSpec, snap: ClusterSnapshot, nodes: np.ndarray) -> np.ndarray:
        return np.asarray(self.inner.score(pod, snap, nodes))

    def select_gpus(self, pod: PodSpec, snap: ClusterSnapshot, node: int) -> tuple[int, ...]:
        return self.inner.select_gpus(pod, snap, node)

    def on_bind(self, pod: PodSpec, snap: ClusterSnapshot, node: int, gpus: Any) -> None:
        if not self.engine.on[node]:
            self._booted.add((node, self.engine.now))
        hook = getattr(self.inner, "on_bind", None)
        if hook is not None:
            hook(pod, snap, node, gpus)

    def on_release(self, pod: PodSpec, snap: ClusterSnapshot, node: int, gpus: Any) -> None:
        hook = getattr(self.inner, "on_release", None)
        if hook is not None:
            hook(pod, snap, node, gpus)

    def budget(self) -> str:
        """Pods at 99.5 s or more / pods allowed there for a P99 under 99.5 s."""
        e = self.engine
        sub = ~np.isnan(e.pod_submit)
        lat = (np.where(np.isnan(e.pod_start), e.horizon, e.pod_start) - e.pod_submit)[sub]
        allowed = lat.size - math.ceil(0.99 * lat.size)
        return f"{int((lat >= 99.5 - 1e-9).sum())}/{allowed}"


def run_demand(cfg: ScenarioConfig, seed: int) -> _Demand:
    """The oracle rows' first pass: the packing teacher's run, its requested CPU recorded."""
    made: list[_Demand] = []

    def factory(name: str, seed: int, wl: Workload, engine: Engine) -> Scorer:
        made.append(_Demand(TargetWorkload.from_pods(wl.pods, engine.snap.gpu_models), engine))
        return made[0]

    run_policy(cfg, "packing", seed, factory=factory)
    return made[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="1-3")
    ap.add_argument("--baselines", default="k8s-default,tetris,fgd")
    ap.add_argument("--rows", default="", help="only teacher rows whose label contains this")
    ap.add_argument("--scenario", default="seed-table1", help="shipped scenario or YAML path")
    ap.add_argument("--set", action="append", default=[], dest="settings", metavar="KEY=VALUE",
                    help="a scenario setting, as `dsan sim --set` (e.g. "
                    "scale_up.ready_nodes_first=true, overprovisioning.pods=64)")
    a = ap.parse_args(argv)
    lo, _, hi = a.seeds.partition("-")
    seeds = list(range(int(lo), int(hi or lo) + 1))
    cfg = load(a.scenario, a.settings)
    counted: dict[tuple[str, int], _Counted] = {}

    def factory(name: str, seed: int, wl: Workload, engine: Engine) -> Scorer:
        target = TargetWorkload.from_pods(wl.pods, engine.snap.gpu_models)
        inner: Scorer
        if name in TEACHERS:
            inner = TEACHERS[name](target)
        elif name in ORACLES:
            k, window = ORACLES[name]
            minutes = int(engine.horizon // 60) + 1
            demand = run_demand(cfg, seed).per_minute(minutes + window)
            ahead = np.lib.stride_tricks.sliding_window_view(demand, window + 1).max(axis=1)
            inner = Oracle(target, engine, k * ahead[:minutes])
        else:
            inner = default_factory(name, seed, wl, engine)
        counted[name, seed] = _Counted(inner, engine)
        return counted[name, seed]

    started = time.strftime("%H:%M:%S", time.gmtime())
    what = " ".join([a.scenario, *(f"--set {x}" for x in a.settings)])
    print(f"{what}, seeds {a.seeds}, one process, {started} UTC; load {_load()}\n")
    print(
        "| policy | util % | P99 s (mean) | P99 s per seed | SLA % | cost "
        "| tail pods per seed: queued / boot / pull / start "
        "| pods >= 99.5 s / allowed, per seed | boot events per seed |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    rows = [t for t in [*TEACHERS, *ORACLES] if a.rows in t]
    for pol in [*a.baselines.split(","), *rows]:
        runs: list[dict[str, Any]] = [run_policy(cfg, pol, s, factory=factory) for s in seeds]
        mean = {
            k: float(np.mean([r[k] for r in runs]))
            for k in ("utilization_pct", "p99_task_latency_s", "sla_violation_pct", "cost")
        }
        per_seed = " / ".join(f"{r['p99_task_latency_s']:.1f}" for r in runs)
        tails = " ; ".join(
            "/".join(str(r["p99_tail_causes"][c]) for c in ("queued", "boot", "pull", "start"))
            for r in runs
        )
        budget = " ; ".join(counted[pol, s].budget() for s in seeds)
        boots = " / ".join(str(counted[pol, s].boots) for s in seeds)
        print(
            f"| {pol} | {mean['utilization_pct']:.1f} | {mean['p99_task_latency_s']:.1f} "
            f"| {per_seed} | {mean['sla_violation_pct']:.2f} | {mean['cost']:.0f} | {tails} "
            f"| {budget} | {boots} |",
            flush=True,
        )
    print(f"\nfinished {time.strftime('%H:%M:%S', time.gmtime())} UTC; load {_load()}")
    return 0


def _load() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "n/a"


if __name__ == "__main__":
    sys.exit(main())
