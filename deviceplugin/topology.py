"""GPU topology: NVLink domains, and the topology-aware preferred allocation.

kubelet asks ``GetPreferredAllocation`` for ``size`` devices out of ``available`` that must
include ``must_include``. A good answer keeps a job's GPUs on NVLink with each other, inside
one NVLink domain, under one PCIe switch and on one NUMA node, in that order of importance.
Nodes have at most a few dozen GPUs, so small requests are solved exactly (every combination
scored in one numpy pass); larger ones greedily.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

#: Pairwise weights: a direct NVLink beats a shared NVLink domain beats a shared PCIe switch
#: beats a shared NUMA node.
W_LINK, W_DOMAIN, W_PCIE, W_NUMA = 4.0, 2.0, 1.5, 1.0
#: Above this many combinations the exact search gives way to the greedy one.
MAX_EXACT_COMBINATIONS = 20_000


def nvlink_domains(peers: Mapping[int, Sequence[int]]) -> dict[int, int | None]:
    """Connected components of the NVLink graph, numbered by their lowest GPU index;
    a GPU without links has no domain."""
    domain: dict[int, int | None] = {}
    for start in sorted(peers):
        if start in domain:
            continue
        if not peers[start]:
            domain[start] = None
            continue
        stack = [start]
        while stack:
            i = stack.pop()
            if i in domain:
                continue
            domain[i] = start
            stack.extend(j for j in peers.get(i, ()) if j not in domain)
    return domain


def _same(groups: Sequence[int | None]) -> np.ndarray:
    """(n, n) bool: both in the same known group."""
    g = np.array([-1 if x is None else x for x in groups])
    return np.asarray((g[:, None] == g[None, :]) & (g[:, None] >= 0))


@dataclass(frozen=True)
class Topology:
    """Pairwise affinity between a node's GPUs, computed once from the backend's devices."""

    ids: tuple[str, ...]
    affinity: np.ndarray  # (n, n) float, zero diagonal

    @classmethod
    def build(
        cls,
        ids: Sequence[str],
        peers: Sequence[Sequence[int]],
        domains: Sequence[int | None],
        numa: Sequence[int | None],
        pcie: Sequence[int | None] | None = None,
    ) -> Topology:
        n = len(ids)
        link = np.zeros((n, n))
        for i, ps in enumerate(peers):
            for j in ps:
                if 0 <= j < n:
                    link[i, j] = link[j, i] = 1.0
        dom = np.array([-1 if d is None else d for d in domains])
        same_dom = (dom[:, None] == dom[None, :]) & (dom[:, None] >= 0)
        aff = W_LINK * link + W_DOMAIN * same_dom + W_NUMA * _same(numa)
        if pcie is not None:
            aff += W_PCIE * _same(pcie)
        np.fill_diagonal(aff, 0.0)
        return cls(tuple(ids), aff)

    def score(self, chosen: Sequence[int]) -> float:
        idx = np.asarray(chosen, dtype=np.intp)
        return float(self.affinity[np.ix_(idx, idx)].sum() / 2.0)

    def preferred(
        self, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> list[str]:
        """The best ``size`` devices from ``available`` that contain ``must_include``.

        Raises ValueError naming the problem when the request cannot be met (unknown IDs,
        must-include not available, too few devices)."""
        pos = {d: i for i, d in enumerate(self.ids)}
        unknown = [d for d in (*available, *must_include) if d not in pos]
        if unknown:
            raise ValueError(f"unknown device IDs {sorted(set(unknown))}")
        avail = sorted({pos[d] for d in available})
        must = sorted({pos[d] for d in must_include})
        if not set(must) <= set(avail):
            missing = [self.ids[i] for i in must if i not in set(avail)]
            raise ValueError(f"must-include devices {missing} are not among the available ones")
        if size < len(must) or size > len(avail):
            raise ValueError(f"cannot pick {size} devices from {len(avail)} available "
                             f"with {len(must)} required")
        rest = [i for i in avail if i not in set(must)]
        need = size - len(must)
        if need == 0:
            chosen = must
        elif math.comb(len(rest), need) <= MAX_EXACT_COMBINATIONS:
            chosen = self._exact(must, rest, need)
        else:
            chosen = self._greedy(must, rest, need)
        return [self.ids[i] for i in sorted(chosen)]

    def _exact(self, must: list[int], rest: list[int], need: int) -> list[int]:
        combos = np.array(list(itertools.combinations(rest, need)), dtype=np.intp)  # (C, need)
        full = np.concatenate([np.broadcast_to(np.array(must, dtype=np.intp),
                                               (len(combos), len(must))), combos], axis=1)
        # Sum of pairwise affinities of every candidate set at once: (C, k, k) -> (C,).
        scores = self.affinity[full[:, :, None], full[:, None, :]].sum(axis=(1, 2))
        # itertools order is lexicographic, so argmax's first maximum is the lowest indices.
        return [int(x) for x in full[int(np.argmax(scores))]]

    def _greedy(self, must: list[int], rest: list[int], need: int) -> list[int]:
        chosen = list(must)
        left = np.array(rest, dtype=np.intp)
        for _ in range(need):
            if chosen:
                gain = self.affinity[np.ix_(left, np.array(chosen))].sum(axis=1)
            else:  # seed with the best-connected device
                gain = self.affinity[np.ix_(left, left)].sum(axis=1)
            k = int(np.argmax(gain))
            chosen.append(int(left[k]))
            left = np.delete(left, k)
        return chosen
