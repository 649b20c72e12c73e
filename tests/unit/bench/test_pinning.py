"""bench/pinning.py: the latency rows' CPU split moves every thread and puts every one back."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from bench.pinning import Placement, pinned, threads

ALLOWED = sorted(os.sched_getaffinity(0))
pytestmark = pytest.mark.skipif(len(ALLOWED) < 2, reason="needs 2 allowed CPUs")


def masks(pid: int) -> dict[int, set[int]]:
    return {tid: os.sched_getaffinity(tid) for tid in threads(pid)}


def test_split_gives_the_server_the_last_cpu_and_the_callers_the_rest() -> None:
    p = Placement.split([3, 0, 2])
    assert p.server == {3} and p.callers == {0, 2}
    with pytest.raises(ValueError, match="at least 2 allowed CPUs"):
        Placement.split([5])


def test_pinned_moves_every_thread_of_server_and_callers_and_restores_them() -> None:
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait)
    worker.start()
    # A caller with threads of its own: a Python child running one extra thread.
    child = subprocess.Popen([sys.executable, "-c",
                              "import threading, sys; threading.Thread(target=sys.stdin.read)"
                              ".start(); sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        while len(threads(child.pid)) < 2:
            pass
        before_self, before_child = masks(os.getpid()), masks(child.pid)
        placement = Placement.split()
        with pinned(placement, [os.getpid()], [child.pid]):
            assert all(m == placement.server for m in masks(os.getpid()).values())
            assert all(m == placement.callers for m in masks(child.pid).values())
            # A thread started while pinned inherits the pinned mask ...
            late = threading.Thread(target=stop.wait)
            late.start()
            assert os.sched_getaffinity(late.native_id) == set(placement.server)
        # ... and gets the process's mask from before back, as every other thread does.
        after = masks(os.getpid())
        assert after[late.native_id] == before_self[os.getpid()]
        assert {t: after[t] for t in before_self if t in after} == {
            t: m for t, m in before_self.items() if t in after}
        assert masks(child.pid) == before_child
    finally:
        stop.set()
        child.communicate(b"", timeout=10)

