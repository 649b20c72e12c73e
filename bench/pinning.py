"""CPU placement for the latency rows: the sidecar on a core of its own, its callers on the rest.

The chart's ``sidecar.exclusiveCpus`` (a Guaranteed pod under the kubelet's static CPU manager)
gives the sidecar container whole CPUs that no other container runs on, while kube-scheduler
and score-gateway stay in the node's shared pool. ``pinned`` reproduces that split for one
benchmark row on this machine: every thread of the serving process goes to the last allowed
CPU, every thread of the caller processes (score-gateway, the Go client) to the others, and
the previous affinities come back afterwards, so the unpinned rows of the same run measure
the shared placement beside it.

Affinity is per thread on Linux (``sched_setaffinity`` takes a thread id), and a thread
inherits its creator's mask, so every existing thread is moved; threads a process starts
while pinned (grpcio's pool grows on demand) inherit the pinned mask and are reset on exit.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass


def threads(pid: int) -> list[int]:
    """The thread ids of a live process (empty once it has exited)."""
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except FileNotFoundError:
        return []


def set_process_affinity(pid: int, cpus: set[int]) -> None:
    """Move every thread of ``pid`` onto ``cpus``; threads that exit meanwhile are skipped."""
    for tid in threads(pid):
        with suppress(ProcessLookupError):
            os.sched_setaffinity(tid, cpus)


@dataclass(frozen=True)
class Placement:
    """Which CPUs the serving process and its callers get."""

    server: frozenset[int]
    callers: frozenset[int]

    @classmethod
    def split(cls, allowed: Iterable[int] | None = None) -> Placement:
        """The last allowed CPU for the server, the others for the callers (at least 2)."""
        cpus = sorted(os.sched_getaffinity(0) if allowed is None else allowed)
        if len(cpus) < 2:
            raise ValueError(f"pinning needs at least 2 allowed CPUs, have {cpus}")
        return cls(server=frozenset(cpus[-1:]), callers=frozenset(cpus[:-1]))


@contextmanager
def pinned(placement: Placement, server_pids: Iterable[int],
           caller_pids: Iterable[int] = ()) -> Iterator[Placement]:
    """Pin the server and caller processes for the block, then restore every thread's mask
    (threads started inside the block get their process's main-thread mask from before)."""
    groups = [(pid, set(placement.server)) for pid in server_pids]
    groups += [(pid, set(placement.callers)) for pid in caller_pids]
    saved: dict[tuple[int, int], set[int]] = {}
    for pid, _ in groups:
        for tid in threads(pid):
            with suppress(ProcessLookupError):  # a thread that exited since the listing
                saved[pid, tid] = os.sched_getaffinity(tid)
    base = {pid: saved.get((pid, pid), os.sched_getaffinity(0)) for pid, _ in groups}
    for pid, cpus in groups:
        set_process_affinity(pid, cpus)
    try:
        yield placement
    finally:
        for pid, _ in groups:
            for tid in threads(pid):
                with suppress(ProcessLookupError):
                    os.sched_setaffinity(tid, saved.get((pid, tid), base[pid]))
