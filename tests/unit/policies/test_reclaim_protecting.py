"""ProtectingReclaimer: Kubernetes' order among candidates that evict no latency-sensitive pod."""

from __future__ import annotations

from dsan.policies.reclaim import (
    RECLAIMERS,
    Candidate,
    DefaultReclaimer,
    ProtectingReclaimer,
    Reclaimer,
    Victim,
)


def v(prio: int, task: str = "batch", start: float = 0.0) -> Victim:
    return Victim(priority=prio, task_type=task, gpus=0.0, cores=2.0, lost_s=0.0,
                  elastic=False, start=start)


def test_it_skips_the_candidate_kubernetes_would_pick_when_that_evicts_a_web_pod() -> None:
    # One web victim (sum of priorities 100) beats two batch victims (200) for Kubernetes.
    cands = [Candidate(0, (v(100, "batch"), v(100, "batch"))), Candidate(1, (v(100, "web"),))]
    assert DefaultReclaimer().choose(1000, cands) == 1
    assert ProtectingReclaimer().choose(1000, cands) == 0


def test_it_keeps_kubernetes_order_among_the_rest_and_evicts_nothing_when_all_are_web() -> None:
    cands = [Candidate(0, (v(5),)), Candidate(1, (v(9, "web"),)), Candidate(2, (v(3),))]
    assert ProtectingReclaimer().choose(10, cands) == 2
    assert ProtectingReclaimer().choose(10, [Candidate(0, (v(1, "web"),))]) is None
    assert ProtectingReclaimer().choose(10, []) is None


def test_it_never_picks_a_victim_of_the_preemptors_priority() -> None:
    cands = [Candidate(0, (v(10),)), Candidate(1, (v(11),))]
    assert ProtectingReclaimer().choose(10, cands) is None


def test_the_named_reclaimers_are_reclaimers() -> None:
    for name, make in RECLAIMERS.items():
        r = make()
        assert isinstance(r, Reclaimer) and r.name == name
