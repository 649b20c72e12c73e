"""Comparing recorded numbers across machines: structure, text and integers exactly, floats to a
relative tolerance. CPUs differ in their SIMD widths, so numpy's pairwise sums and torch's
float32 kernels round differently on another machine with the same library versions; a
recorded golden that demands the last bit fails there without any change in our code."""

from __future__ import annotations

import math
from typing import Any


def _as_float(x: Any) -> float | None:
    if isinstance(x, float):
        return x
    if isinstance(x, str) and any(c in x for c in ".eE") and x.strip() == x:
        try:
            return float(x)
        except ValueError:
            return None
    return None


def differences(got: Any, want: Any, rel: float, abs_: float = 0.0,
                path: str = "") -> list[str]:
    """Where ``got`` and ``want`` differ beyond ``rel`` or ``abs_`` (floats, or strings holding
    floats, as ``metrics.csv`` cells do); everything else must be equal."""
    if isinstance(want, dict) and isinstance(got, dict):
        out = [f"{path}: keys {sorted(set(got) ^ set(want))}"] if got.keys() != want.keys() else []
        for k in want.keys() & got.keys():
            out += differences(got[k], want[k], rel, abs_, f"{path}.{k}")
        return out
    if isinstance(want, list) and isinstance(got, list):
        if len(got) != len(want):
            return [f"{path}: {len(got)} items, recorded {len(want)}"]
        return [d for i, (g, w) in enumerate(zip(got, want, strict=True))
                for d in differences(g, w, rel, abs_, f"{path}[{i}]")]
    g, w = _as_float(got), _as_float(want)
    if g is not None and w is not None:
        same = (math.isnan(g) and math.isnan(w)) or math.isclose(g, w, rel_tol=rel, abs_tol=abs_)
        return [] if same else [f"{path}: {got!r}, recorded {want!r}"]
    return [] if got == want else [f"{path}: {got!r}, recorded {want!r}"]


def assert_matches(got: Any, want: Any, rel: float, abs_: float = 0.0) -> None:
    diff = differences(got, want, rel, abs_)
    assert not diff, f"{len(diff)} differences from the recording:\n" + "\n".join(diff[:20])
