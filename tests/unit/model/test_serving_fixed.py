"""ServingModel.fix_weights (the sidecar's promise that it never writes the weights): refresh()
stops summing the parameters' write counters per call, and the answers are the unfixed
model's while nothing writes. Without the promise a write is picked up
(test_serving_headcache.py: test_weight_update_in_place_is_picked_up)."""

from __future__ import annotations

import pytest

from dsan.features import default_workload
from dsan.filtering import allocate, feasible_nodes
from dsan.model.serving import ServingModel
from dsan.policies.base import best_fit_gpus
from tests.unit.model.test_serving_headcache import PODS, _random_residual, _snap


def test_fixed_weights_answer_as_unfixed_without_reading_the_weights_per_call(
        monkeypatch: pytest.MonkeyPatch) -> None:
    model = _random_residual(8)
    snap = _snap(30, seed=9)
    fixed, plain = ServingModel(model, default_workload()), ServingModel(model, default_workload())
    fixed.fix_weights()
    reads = {"fixed": 0}
    version = ServingModel._weights_version

    def counted(self: ServingModel) -> int:
        if self is fixed:
            reads["fixed"] += 1
        return version(self)

    monkeypatch.setattr(ServingModel, "_weights_version", counted)
    for k in range(12):
        pod = PODS[k % len(PODS)]
        nodes = feasible_nodes(pod, snap)
        got, want = fixed.logits(pod, snap, nodes), plain.logits(pod, snap, nodes)
        assert got.tobytes() == want.tobytes()
        node = int(nodes[k % len(nodes)])  # place it: allocations change under both
        allocate(snap, pod, node, best_fit_gpus(pod, snap, node))
        if k == 5:  # new telemetry: both refresh their embeddings
            snap.telemetry_version += 1
    assert fixed.embed_count == plain.embed_count == 2
    assert reads["fixed"] == fixed.embed_count  # only inside the refreshes themselves
