from __future__ import annotations

from sidecar.assumed import AssumedPods


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_entries_expire_ttl_after_their_last_assumption_oldest_first() -> None:
    clock = Clock()
    a: AssumedPods[int] = AssumedPods(5.0, 10, clock)
    a.add("x", 1)
    clock.t += 2
    a.add("y", 2)
    clock.t += 2
    a.add("x", 3)  # renewed: now expires after y
    clock.t += 1.5  # x was first added 5.5 s ago, y 3.5 s ago
    assert a.expire() == [] and len(a) == 2
    clock.t += 1.5  # y: 5 s, its deadline has come
    assert a.expire() == [("y", 2)]
    assert a.get("x") == 3 and a.get("y") is None
    clock.t += 2
    assert a.expire() == [("x", 3)] and len(a) == 0


def test_an_expired_entry_stays_visible_until_expire_returns_it() -> None:
    """The cache uncharges exactly what expire() returns: get/pop must not hide an entry."""
    clock = Clock()
    a: AssumedPods[str] = AssumedPods(1.0, 10, clock)
    a.add("x", "charge")
    clock.t += 3
    assert a.get("x") == "charge" and a.pop("x") == "charge" and a.expire() == []


def test_past_maxsize_the_oldest_come_back_to_be_uncharged() -> None:
    clock = Clock()
    a: AssumedPods[int] = AssumedPods(60.0, 2, clock)
    assert a.add("a", 1) == [] and a.add("b", 2) == []
    a.add("a", 3)  # renewed: b is now the oldest
    assert a.add("c", 4) == [("b", 2)]
    assert len(a) == 2 and a.get("a") == 3 and a.get("c") == 4
