"""Fragmentation Gradient Descent (Weng et al., "Beware of Fragmentation: Scheduling
GPU-Sharing Workloads with Fragmentation Gradient Descent", USENIX ATC'23).

Score of node i for pod p: ``int(sigmoid((F_i - F_i') / 1000) * 100)`` where ``F_i`` is the
node's fragment against the target workload (:mod:`dsan.features.frag`) and ``F_i'`` the
same after placing p. For a GPU-sharing pod every GPU that fits is tried and the best one
kept (the first on ties); whole-GPU pods take the lowest-indexed free GPUs. This is the FGD
simulator's ``FGDScore`` plugin (``pkg/simulator/plugin/fgd_score.go``), integer cast
included: truncation makes ties, which the caller breaks at random as kube-scheduler does.

Speed: a node's score for a pod depends only on the node's state and the pod's shape
(CPU, GPU count, GPU share), so scores are cached per shape and recomputed only for nodes
whose state changed since (detected by diffing the snapshot against the last one seen; no
hook needed). What-if variants of all stale nodes and GPUs go through one vectorised call.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dsan.core.filtering import best_fit_gpus
from dsan.core.snapshot import MAX_GPUS, AllocationTracker, ClusterSnapshot, PodSpec
from dsan.features.frag import fgd_score, node_frag
from dsan.features.target import TargetWorkload
from dsan.policies.base import Scorer

_EYE = np.eye(MAX_GPUS, dtype=np.int32)


@dataclass
class _Entry:
    score: npt.NDArray[np.float64]
    gpu: npt.NDArray[np.int64]  # best GPU slot for a sharing pod, -1 otherwise
    at: npt.NDArray[np.int64]  # tick at which each node's score was computed


class FGDScorer(Scorer):
    name = "fgd"

    def __init__(self, target: TargetWorkload | None = None) -> None:
        self.target = target if target is not None else TargetWorkload.default()
        self._snap: ClusterSnapshot | None = None
        self._track = AllocationTracker()

    # --- state tracking ------------------------------------------------------------------
    def _sync(self, snap: ClusterSnapshot) -> None:
        if self._snap is not snap or len(self._track.epoch) != len(snap):
            self._snap, self._access = snap, self.target.access(snap)
            self._track.reset(snap)
            self._cache: dict[tuple[float, int, int], _Entry] = {}
            self._before = np.zeros(len(snap))
            changed = np.arange(len(snap))
        else:
            changed = self._track.sync(snap)
        if changed.size:
            self._before[changed] = node_frag(
                snap.cpu_cap[changed] - snap.cpu_used[changed], snap.gpu_free[changed],
                self._access[:, changed], self.target)

    def _entry(self, pod: PodSpec, snap: ClusterSnapshot, nodes: npt.NDArray[np.int64]) -> _Entry:
        self._sync(snap)
        # all of the pod that a node's score depends on: scores are cached by it
        key = (float(pod.cpu_milli), int(pod.gpu_milli), int(pod.num_gpu))
        entry = self._cache.get(key)
        if entry is None:
            n = len(snap)
            entry = _Entry(
                np.zeros(n), np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64)
            )
            self._cache[key] = entry
        stale = self._track.stale(entry.at, nodes)
        if stale.size:
            score, gpu = self._compute(
                pod, snap.gpu_free[stale], snap.cpu_cap[stale] - snap.cpu_used[stale],
                self._access[:, stale], self._before[stale])
            entry.score[stale] = score
            entry.gpu[stale] = gpu
            entry.at[stale] = self._track.tick
        return entry

    # --- scoring ----------------------------------------------------------------------------
    def _compute(
        self,
        pod: PodSpec,
        free: npt.NDArray[np.int32],
        cpu_free: npt.NDArray[np.float64],
        access: npt.NDArray[np.bool_],
        before: npt.NDArray[np.float64],
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]:
        """Scores and best GPU of nodes in state (``free``, ``cpu_free``) whose current
        fragment is ``before``."""
        cpu_after = cpu_free - pod.cpu_milli
        m = len(free)
        if pod.is_sharing:
            # One what-if variant per (node, GPU that fits): the share taken from that GPU.
            valid = free >= pod.gpu_milli  # (m, G)
            row, gpu = np.nonzero(valid)
            after = free[row] - pod.gpu_milli * _EYE[gpu]  # (v, G)
            frag = node_frag(cpu_after[row], after, access[:, row], self.target)
            score = np.full((m, MAX_GPUS), -1.0)
            score[row, gpu] = fgd_score(before[row], frag)
            best = score.argmax(axis=1)  # first maximum = lowest slot, as the plugin's strict ">"
            return score[np.arange(m), best], np.where(valid.any(axis=1), best, -1)
        if pod.num_gpu > 0 and pod.gpu_milli > 0:
            fits = free >= pod.gpu_milli
            take = fits & (np.cumsum(fits, axis=1) <= pod.num_gpu)
            free = free - take * pod.gpu_milli
        frag = node_frag(cpu_after, free, access, self.target)
        return fgd_score(before, frag), np.full(m, -1, dtype=np.int64)

    def score(
        self, pod: PodSpec, snap: ClusterSnapshot, nodes: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.float64]:
        nodes = np.asarray(nodes, dtype=np.int64)
        return self._entry(pod, snap, nodes).score[nodes].copy()

    def select_gpus(self, pod: PodSpec, snap: ClusterSnapshot, node: int) -> tuple[int, ...]:
        if not pod.is_sharing:
            # Whole GPUs: the lowest-indexed fully free ones, which best-fit also returns.
            return best_fit_gpus(pod, snap, node)
        gpu = int(self._entry(pod, snap, np.array([node], dtype=np.int64)).gpu[node])
        if gpu < 0:
            raise ValueError(f"node {snap.names[node]} cannot host {pod.name}'s GPUs")
        return (gpu,)
