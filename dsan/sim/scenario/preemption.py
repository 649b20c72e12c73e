"""Kubernetes-style preemption (DefaultPreemption): the candidates, and the policy's
:class:`~dsan.policies.reclaim.Reclaimer` choosing among them.

For a pod that fits nowhere, each of up to :data:`MAX_CANDIDATES` nodes proposes its victims:
only reclaimable pods of strictly lower priority, lowest priority first, then most recently
started, until the pod fits. The reclaimer picks one node's victims (or none: the pod waits);
every heuristic keeps Kubernetes' choice (:class:`SimulatorDefault`). A gang's plan is made
for all its workers on a scratch copy of the free capacity, so victims are evicted only if
every worker fits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dsan.api.types import TASK_TYPES
from dsan.core.snapshot import MAX_GPUS, ClusterSnapshot, PodSpec
from dsan.policies.reclaim import Candidate, DefaultReclaimer, Reclaimer, Victim, admissible

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

#: Candidate nodes examined in detail per pod (ranked cheaply first); keeps preemption fast.
MAX_CANDIDATES = 8


class SimulatorDefault:
    """The simulator's stand-in for :class:`~dsan.policies.reclaim.DefaultReclaimer`, used
    wherever a policy keeps Kubernetes' choice: the lowest highest victim priority, then the
    fewest victims, then the lowest node. kube-scheduler breaks the last ties by the smallest
    sum of priorities and the latest start instead; the simulator has always used the node
    order, and keeping it keeps version 2's pinned outputs and the baselines' version 3
    numbers as published (the two rules differ on 2 of the 8 preemptions of the pinned burst
    run, docs/scenarios.md, *Reclamation*)."""

    name = "kubernetes"

    def choose(self, priority: int, candidates: Sequence[Candidate]) -> int | None:
        ok = [i for i, c in enumerate(candidates) if admissible(priority, c)]
        if not ok:
            return None
        return min(ok, key=lambda i: (max(v.priority for v in candidates[i].victims),
                                      len(candidates[i].victims), candidates[i].node))


def simulated(reclaimer: Reclaimer) -> Reclaimer:
    """The reclaimer the simulator runs for a policy's: Kubernetes' own as
    :class:`SimulatorDefault`, any other as it is."""
    return SimulatorDefault() if type(reclaimer) is DefaultReclaimer else reclaimer


@dataclass
class Bound:
    """The bound pods preemption may look at, as parallel arrays (one entry per pod)."""

    node: I64
    cpu: F64
    mem: F64
    gpu_milli: I64
    gslot: I64  # GPU slot for single-GPU pods, -1 otherwise
    prio: I64
    start: F64  # bind time, for "most recently started first"
    reclaimable: npt.NDArray[np.bool_]
    #: What a reclaimer reads of each pod (:class:`~dsan.policies.reclaim.Victim`): its
    #: task type (an index into TASK_TYPES), the seconds of work its eviction loses, and
    #: whether its job shrinks rather than stops.
    task: I64
    lost_s: F64
    elastic: npt.NDArray[np.bool_]

    def victim(self, i: int) -> Victim:
        return Victim(priority=int(self.prio[i]), task_type=TASK_TYPES[int(self.task[i])],
                      gpus=float(self.gpu_milli[i]) / 1000.0, cores=float(self.cpu[i]) / 1000.0,
                      lost_s=float(self.lost_s[i]), elastic=bool(self.elastic[i]),
                      start=float(self.start[i]))


def _fits(pod: PodSpec, cpu: float, mem: float, gpu_free: npt.NDArray[np.int64]) -> bool:
    need_gpu = pod.num_gpu > 0 and pod.gpu_milli > 0
    return bool(cpu >= pod.cpu_milli and mem >= pod.mem_mib
                and (not need_gpu or int((gpu_free >= pod.gpu_milli).sum()) >= pod.num_gpu))


def _static_ok(pod: PodSpec, snap: ClusterSnapshot) -> npt.NDArray[np.bool_]:
    ok = np.ones(len(snap), dtype=bool)
    if pod.num_gpu > 0 and pod.gpu_milli > 0:
        ok &= snap.gpu_count >= pod.num_gpu
        if pod.gpu_models:
            ok &= np.isin(snap.gpu_model, np.asarray(pod.gpu_models, dtype=np.int32))
    if snap.taint_mask is not None:
        ok &= (snap.taint_mask & ~np.int64(pod.toleration_mask)) == 0
    return ok


def plan(pods: list[PodSpec], snap: ClusterSnapshot, bound: Bound,
         reclaimer: Reclaimer | None = None,
         allowed: Callable[[PodSpec], npt.NDArray[np.bool_]] | None = None
         ) -> list[int] | None:
    """Indices (into ``bound``) of the victims that let every pod of ``pods`` (a gang or one
    pod, of one priority) fit, or None; each pod's victims are those of the candidate
    ``reclaimer`` (default: :class:`SimulatorDefault`) picks. ``allowed(pod)``: the nodes the
    policy's quota lets the pod use, as it stands now (a node it refuses is no candidate, as
    kube-scheduler's dry run keeps a Filter's refusal; default: every node). Mutates
    nothing."""
    reclaimer = reclaimer or SimulatorDefault()
    prio = pods[0].priority
    n = len(snap)
    cpu_free = snap.cpu_cap - snap.cpu_used
    mem_free = snap.mem_cap - snap.mem_used
    gpu_free = snap.gpu_free.astype(np.int64)
    removed = np.zeros(bound.node.size, dtype=bool)
    victims: list[int] = []
    for pod in pods:
        cand = bound.reclaimable & (bound.prio < prio) & ~removed
        idx = np.flatnonzero(cand)
        bn = bound.node[idx]
        rc = np.bincount(bn, weights=bound.cpu[idx], minlength=n)
        rm = np.bincount(bn, weights=bound.mem[idx], minlength=n)
        static = _static_ok(pod, snap)
        need_gpu = pod.num_gpu > 0 and pod.gpu_milli > 0
        fits_now = static & (cpu_free >= pod.cpu_milli) & (mem_free >= pod.mem_mib)
        ok = static & (cpu_free + rc >= pod.cpu_milli) & (mem_free + rm >= pod.mem_mib)
        if allowed is not None:
            quota = allowed(pod)
            fits_now &= quota
            ok &= quota
        if need_gpu:
            gi = idx[bound.gslot[idx] >= 0]
            rg = np.bincount(bound.node[gi] * MAX_GPUS + bound.gslot[gi],
                             weights=bound.gpu_milli[gi], minlength=n * MAX_GPUS
                             ).reshape(n, MAX_GPUS)
            fits_now &= (gpu_free >= pod.gpu_milli).sum(axis=1) >= pod.num_gpu
            ok &= ((gpu_free + rg) >= pod.gpu_milli).sum(axis=1) >= pod.num_gpu
        now = np.flatnonzero(fits_now)
        chosen: list[int]
        if now.size:
            node, chosen = int(now[0]), []
        else:
            cands = np.flatnonzero(ok)
            if cands.size == 0:
                return None
            # Cheap ranking before the exact greedy: fewest reclaimable pods on the node.
            counts = np.bincount(bn, minlength=n)[cands]
            # In node order, so that a reclaimer's "first candidate" is the lowest node.
            cands = np.sort(cands[np.argsort(counts, kind="stable")[:MAX_CANDIDATES]])
            sets = [(int(c), vs) for c in cands if (vs := _greedy(
                pod, int(c), idx[bn == c], bound, cpu_free, mem_free, gpu_free)) is not None]
            offered = [Candidate(c, tuple(bound.victim(v) for v in vs)) for c, vs in sets]
            pick = reclaimer.choose(prio, offered)
            if pick is None:
                return None
            if not 0 <= pick < len(offered) or not admissible(prio, offered[pick]):
                raise ValueError(f"reclaimer {reclaimer.name!r} chose candidate {pick}, not an "
                                 f"admissible one of {len(offered)}")
            node, chosen = sets[pick]
        for v in chosen:
            removed[v] = True
            cpu_free[node] += bound.cpu[v]
            mem_free[node] += bound.mem[v]
            if bound.gslot[v] >= 0:
                gpu_free[node, bound.gslot[v]] += bound.gpu_milli[v]
        victims.extend(chosen)
        cpu_free[node] -= pod.cpu_milli
        mem_free[node] -= pod.mem_mib
        if need_gpu:
            order = np.argsort(np.where(gpu_free[node] >= pod.gpu_milli, gpu_free[node], 10**9),
                               kind="stable")[: pod.num_gpu]
            gpu_free[node, order] -= pod.gpu_milli
    return victims


def _greedy(pod: PodSpec, node: int, on_node: I64, bound: Bound, cpu_free: F64, mem_free: F64,
            gpu_free: npt.NDArray[np.int64]) -> list[int] | None:
    """Evict lowest priority, then most recently started, until ``pod`` fits on ``node``."""
    order = on_node[np.lexsort((-bound.start[on_node], bound.prio[on_node]))]
    c, m = cpu_free[node], mem_free[node]
    g = gpu_free[node].copy()
    out: list[int] = []
    for v in order:
        if _fits(pod, c, m, g):
            break
        out.append(int(v))
        c += bound.cpu[v]
        m += bound.mem[v]
        if bound.gslot[v] >= 0:
            g[bound.gslot[v]] += bound.gpu_milli[v]
    else:
        if not _fits(pod, c, m, g):
            return None
    return out if out else None
