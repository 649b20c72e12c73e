"""The shared filter and normaliser against slow, obviously-correct references.

Both have vectorised fast paths (a popcount over GPU masks, three reductions for all-finite
scores); these properties pin them to per-node / NaN-aware definitions.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsan.core.filtering import feasible
from dsan.core.snapshot import MAX_GPUS, ClusterSnapshot, PodSpec
from sidecar.scoring import normalize


def feasible_reference(pod: PodSpec, snap: ClusterSnapshot) -> list[bool]:
    out = []
    for i in range(len(snap)):
        ok = (snap.cpu_cap[i] - snap.cpu_used[i] >= pod.cpu_milli
              and snap.mem_cap[i] - snap.mem_used[i] >= pod.mem_mib)
        if pod.num_gpu and pod.gpu_milli:
            fits = sum(1 for g in range(MAX_GPUS) if snap.gpu_free[i, g] >= pod.gpu_milli)
            ok = ok and fits >= pod.num_gpu
            if pod.gpu_models:
                ok = ok and int(snap.gpu_model[i]) in pod.gpu_models
        if snap.taint_mask is not None:
            ok = ok and (int(snap.taint_mask[i]) & ~pod.toleration_mask) == 0
        out.append(bool(ok))
    return out


@given(st.data())
def test_feasible_matches_the_per_node_reference(data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 12))
    # Shares from a few common values as well, so "free == asked" (fits) comes up often.
    share = st.one_of(st.integers(0, 1000), st.sampled_from([0, 250, 500, 1000]))
    free = data.draw(st.lists(st.lists(share, min_size=MAX_GPUS,
                                       max_size=MAX_GPUS), min_size=n, max_size=n))
    floats = st.lists(st.floats(0, 8000), min_size=n, max_size=n)
    snap = ClusterSnapshot(
        names=[f"n{i}" for i in range(n)],
        cpu_cap=np.full(n, 8000.0), cpu_used=np.array(data.draw(floats)),
        mem_cap=np.full(n, 8000.0), mem_used=np.array(data.draw(floats)),
        gpu_count=np.full(n, MAX_GPUS, dtype=np.int32),
        gpu_model=np.array(data.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)),
                           dtype=np.int32),
        gpu_free=np.array(free, dtype=np.int32),
        taint_mask=np.array(data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)),
                            dtype=np.int64) if data.draw(st.booleans()) else None,
    )
    num = data.draw(st.integers(0, MAX_GPUS))
    pod = PodSpec(
        "p", cpu_milli=data.draw(st.floats(0, 8000)), mem_mib=data.draw(st.floats(0, 8000)),
        num_gpu=num, gpu_milli=data.draw(share.filter(bool)) if num else 0,
        gpu_models=tuple(data.draw(st.sets(st.integers(0, 2), max_size=2))),
        toleration_mask=data.draw(st.integers(0, 3)),
    )
    want = feasible_reference(pod, snap)
    assert feasible(pod, snap).tolist() == want


def normalize_reference(scores: list[float], top: int) -> list[int]:
    finite = [s for s in scores if np.isfinite(s)]
    if not finite:
        return [0] * len(scores)
    lo, hi = min(finite), max(finite)
    out = []
    for s in scores:
        if not np.isfinite(s):
            out.append(0)
        elif not hi > lo:
            out.append(top)
        else:
            out.append(int(np.rint((s / 2 - lo / 2) / (hi / 2 - lo / 2) * top)))
    return out


@pytest.mark.parametrize(("values", "want"), [
    ([0.0, 5e-324], [0, 100]), ([0.0, 1e-310, 5e-311], [0, 100, 50]),
    ([1e-310, np.nan, 0.0, np.inf], [100, 0, 0, 0]), ([-5e-324, 0.0], [0, 100]),
])
def test_normalize_scales_a_subnormal_span(values: list[float], want: list[int]) -> None:
    # max_score / span overflows float64 there (it once gave int64's minimum), and the
    # halving reference above divides by zero
    assert normalize(np.array(values), 100).tolist() == want


@given(st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64), max_size=30),
       st.sampled_from([10, 100]))
def test_normalize_matches_the_reference(values: list[float], top: int) -> None:
    got = normalize(np.array(values, dtype=np.float64), top).tolist()
    want = normalize_reference(values, top)
    # Rounding of exact .5 ties may differ by one between the two formulations.
    assert len(got) == len(want)
    assert all(abs(a - b) <= 1 for a, b in zip(got, want, strict=True)), (got, want)
    assert all(0 <= g <= top for g in got)
    finite = [i for i, v in enumerate(values) if np.isfinite(v)]
    if finite and len({values[i] for i in finite}) > 1:
        assert max(got[i] for i in finite) == top and min(got[i] for i in finite) == 0
