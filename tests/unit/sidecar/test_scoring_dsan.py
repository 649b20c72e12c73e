"""DSAN through the scoring engine: the served scorer (per-class caches, prepared after each
assumption) answers every request as a scorer that featurizes every candidate afresh, through
assumptions, settles, binds, deletes and node changes from the informers."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import numpy as np
import numpy.typing as npt
from hypothesis import given, settings
from hypothesis import strategies as st

from dsan.core.snapshot import ClusterSnapshot, PodSpec
from dsan.features import default_workload
from dsan.model.serving import ServingModel
from dsan.policies.dsan import DSANScorer, quantize_logits
from sidecar.cache import GraphCache
from sidecar.config import SidecarConfig
from sidecar.podspec import podspec_from_pod
from sidecar.scoring import ScoringEngine
from tests.support import kubeobjects as ko

NODES = ko.cluster(10, seed=3)
NAMES = [n["metadata"]["name"] for n in NODES]


class Uncached(DSANScorer):
    """DSAN without its caches: every request featurizes every candidate (the reference)."""

    def __init__(self) -> None:
        super().__init__(ServingModel.from_dir(workload=default_workload()))

    def score(self, pod: PodSpec, snap: ClusterSnapshot,
              nodes: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        return quantize_logits(self.serving.reference(pod, snap, nodes))

    def prepare(self, pod: PodSpec, snap: ClusterSnapshot) -> None:
        return None


NOW = datetime.now(UTC)


def _cache(clock: Callable[[], float] = time.monotonic) -> GraphCache:
    # A fixed wall clock: telemetry ages (and so DSAN's answers) stay put while the test
    # runs, so hypothesis replays the same example.
    cache = GraphCache(SidecarConfig(telemetry_stale_s=1e9), clock=clock,
                       wall=lambda: NOW.timestamp() + 5)
    cache.replace_nodes(NODES)
    for i, node in enumerate(NODES):
        if node["status"]["allocatable"].get("nvidia.com/gpu"):
            cache.upsert_telemetry(ko.telemetry(node["metadata"]["name"], sampled_at=NOW,
                                                util=[[float((i * 7 + g) % 100)] * 4
                                                      for g in range(8)]))
    return cache


POD_SHAPES = [
    {"cpu": "4", "memory": "16Gi", "gpus": 1, "annotations": {"dsan.io/gpu-milli": "500"}},
    {"cpu": "2", "memory": "4Gi", "gpus": 1},
    {"cpu": "8", "memory": "32Gi"},
]


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_the_served_dsan_answers_as_the_uncached_one(data: st.DataObject) -> None:
    caches = [_cache(), _cache()]
    served = DSANScorer(ServingModel.from_dir(workload=default_workload()))
    engines = [ScoringEngine(caches[0], served, Uncached(), 1e9),
               ScoringEngine(caches[1], Uncached(), Uncached(), 1e9)]
    bound: list[dict[str, Any]] = []
    for k in range(10):
        shape = POD_SHAPES[data.draw(st.integers(0, len(POD_SHAPES) - 1))]
        obj = ko.pod(f"p{k}", uid=f"u{k}", **shape)  # type: ignore[arg-type]
        spec = podspec_from_pod(obj, caches[0].models)
        start = data.draw(st.integers(0, len(NAMES) - 1))
        names = (NAMES[start:] + NAMES[:start])[: data.draw(st.integers(1, len(NAMES)))]
        defer, settle = data.draw(st.booleans()), data.draw(st.booleans())
        event = data.draw(st.sampled_from(["none", "bind", "delete", "node"]))
        where = NAMES[data.draw(st.integers(0, len(NAMES) - 1))]
        got = [e.score(spec, names, assume=f"default/p{k}", defer=defer) for e in engines]
        assert got[0].scores.tolist() == got[1].scores.tolist()
        assert got[0].best == got[1].best
        if settle:  # the reply left: settle now (else the next request does)
            for e in engines:
                e.settle()
        if event == "bind":  # the pod shows up bound, wherever it landed
            obj = ko.pod(f"p{k}", uid=f"u{k}", node_name=where, phase="Running",
                         **shape)  # type: ignore[arg-type]
            bound.append(obj)
            for c in caches:
                c.upsert_pod(obj)
        elif event == "delete" and bound:
            gone = bound.pop(0)
            for c in caches:
                c.delete_pod(gone)
        elif event == "node":  # a capacity change under a live row
            node = dict(NODES[NAMES.index(where)])
            node["status"] = {"allocatable": {**node["status"]["allocatable"], "cpu": "48"}}
            for c in caches:
                c.upsert_node(node)
