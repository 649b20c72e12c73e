"""Pods charged to their best node before their binding shows up, for ``ttl`` seconds.

The TTL is one constant, so a dict in insertion order is also in expiry order (re-assuming
moves a pod to the end): expiring looks at the oldest entries only. Entries past ``maxsize``
come back from :meth:`AssumedPods.add` so the caller can uncharge them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

V = TypeVar("V")


class AssumedPods(Generic[V]):
    """key -> value, each expiring ``ttl`` seconds (of ``clock``) after it was added."""

    def __init__(self, ttl: float, maxsize: int, clock: Callable[[], float]) -> None:
        self._ttl = ttl
        self._maxsize = maxsize
        self._clock = clock
        self._items: dict[str, tuple[V, float]] = {}

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: str) -> V | None:
        """The value, expired or not: an expired one is charged until :meth:`expire` says so."""
        got = self._items.get(key)
        return None if got is None else got[0]

    def pop(self, key: str) -> V | None:
        got = self._items.pop(key, None)
        return None if got is None else got[0]

    def add(self, key: str, value: V) -> list[tuple[str, V]]:
        """Add (or renew) ``key``; returns the oldest entries evicted past ``maxsize``."""
        items = self._items
        items.pop(key, None)  # renewed: to the end, where the newest deadline belongs
        items[key] = (value, self._clock() + self._ttl)
        evicted: list[tuple[str, V]] = []
        while len(items) > self._maxsize:
            old = next(iter(items))
            evicted.append((old, items.pop(old)[0]))
        return evicted

    def expire(self) -> list[tuple[str, V]]:
        """Remove and return the entries whose deadline has come (oldest first)."""
        items = self._items
        if not items:
            return []
        now = self._clock()
        out: list[tuple[str, V]] = []
        for key, (value, deadline) in items.items():
            if deadline > now:
                break
            out.append((key, value))
        for key, _ in out:
            del items[key]
        return out
