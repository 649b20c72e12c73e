"""Cluster-autoscaler over-provisioning: placeholder pods below every workload's priority that
hold warm CPU-node capacity (requests, no use) and are placed by the default scheduler's rule,
not the policy's; the rules are in docs/scenarios.md, *Over-provisioning*.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from dsan.core.filtering import feasible
from dsan.core.snapshot import ClusterSnapshot, PodSpec
from dsan.sim.scenario.config import OverprovisioningConfig

#: Below every workload priority of the scenario (best effort is 0).
PRIORITY = -1


class PlaceholderPool:
    """Where each placeholder sits (-1: pending) and how many sit on each node."""

    def __init__(self, cfg: OverprovisioningConfig, snap: ClusterSnapshot) -> None:
        self.size = cfg.pods
        self.spec = PodSpec("overprovisioning", cfg.cpu_milli, cfg.mem_mib, priority=PRIORITY)
        self.node = np.full(cfg.pods, -1, dtype=np.int64)
        self.on_node = np.zeros(len(snap), dtype=np.int64)
        self._cpu_nodes = snap.gpu_count == 0
        self.evictions = 0  # placeholders evicted by workload pods
        self.boots = 0  # nodes booted for placeholders

    @property
    def bound(self) -> int:
        """Placeholders on a node (their requests are allocated in the snapshot, never used)."""
        return int(self.on_node.sum())

    def held_mem(self) -> np.ndarray:
        """MiB held per node."""
        return self.on_node * self.spec.mem_mib

    def pending(self) -> list[int]:
        return np.flatnonzero(self.node < 0).tolist()

    def room(self, pod: PodSpec, snap: ClusterSnapshot, ready: np.ndarray) -> tuple[int, int]:
        """``(node, k)``: the Ready node where evicting the fewest placeholders (``k``) lets
        ``pod`` fit, ties to the lowest index; ``(-1, 0)`` if evicting cannot make it fit."""
        if not self.on_node.any():
            return -1, 0
        held_cpu = self.on_node * self.spec.cpu_milli
        held_mem = self.held_mem()
        # As if every placeholder were gone; feasible() does the other checks (GPUs, taints).
        bare = dataclasses.replace(snap, cpu_used=snap.cpu_used - held_cpu,
                                   mem_used=snap.mem_used - held_mem)
        ok = feasible(pod, bare) & ready & (self.on_node > 0)
        if not ok.any():
            return -1, 0
        short_cpu = np.maximum(0.0, pod.cpu_milli - (snap.cpu_cap - snap.cpu_used))
        short_mem = np.maximum(0.0, pod.mem_mib - (snap.mem_cap - snap.mem_used))
        k = np.maximum(np.ceil(short_cpu / self.spec.cpu_milli),
                       np.ceil(short_mem / self.spec.mem_mib)).astype(np.int64)
        k = np.where(ok, k, np.iinfo(np.int64).max)
        node = int(np.argmin(k))  # argmin: the first of equals, i.e. the lowest index
        return node, int(max(k[node], 1))

    def evict(self, node: int, k: int) -> list[int]:
        """Mark ``k`` of ``node``'s placeholders pending; return them."""
        out = np.flatnonzero(self.node == node)[:k].tolist()
        if len(out) != k:
            raise ValueError(f"node {node} holds {len(out)} placeholders, not {k}")
        self.node[out] = -1
        self.on_node[node] -= k
        self.evictions += k
        return out

    def target(self, snap: ClusterSnapshot, on: np.ndarray, boot_done: np.ndarray,
               now: float) -> int:
        """The node the next pending placeholder goes to (module docstring), or -1."""
        fits = feasible(self.spec, snap) & self._cpu_nodes
        for tier in (fits & on & (boot_done <= now), fits & on):
            if tier.any():
                free = (snap.cpu_cap - snap.cpu_used - self.spec.cpu_milli) / snap.cpu_cap
                return int(np.argmax(np.where(tier, free, -np.inf)))
        if not fits.any():
            return -1
        return int(np.argmin(np.where(fits, snap.cpu_cap, np.inf)))

    def bind(self, i: int, node: int, booted: bool) -> None:
        self.node[i] = node
        self.on_node[node] += 1
        self.boots += int(booted)

    def summary(self) -> dict[str, int]:
        return {"placeholders": self.size, "bound": self.bound,
                "evictions": self.evictions, "boots": self.boots}
