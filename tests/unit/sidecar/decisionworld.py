"""A small cluster behind a real scoring service, decision memory and explainer (no servers):
pods are created pending, scored as kube-scheduler's extender call would, and bound."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from dsan.core.snapshot import ClusterSnapshot
from dsan.policies.base import Scorer
from dsan.policies.registry import make_scorer
from sidecar.app import load_policies
from sidecar.cache import GraphCache
from sidecar.config import SidecarConfig
from sidecar.decisions import Decisions
from sidecar.explainer import Explainer
from sidecar.metrics import SidecarMetrics
from sidecar.podspec import pod_key, podspec_from_pod
from sidecar.scoring import ScoreResult, ScoringEngine
from sidecar.service import PolicyInfo, ScoringService
from tests.support import kubeobjects as ko
from tests.support.fakes import FakeClusterView

NOW = datetime.now(UTC)
NODES = ko.cluster(12, seed=3)
NAMES = [n["metadata"]["name"] for n in NODES]
GPU_NODES = [n["metadata"]["name"] for n in NODES
             if n["status"]["allocatable"].get("nvidia.com/gpu")]


@dataclass
class World:
    cache: GraphCache
    view: FakeClusterView
    engine: ScoringEngine
    service: ScoringService
    decisions: Decisions
    explainer: Explainer
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)

    def create(self, name: str, seen: bool = True, **shape: Any) -> dict[str, Any]:
        """A pending pod of the dsan-scheduler, seen by the informer unless not ``seen``
        (kube-scheduler asks before our watch delivers it: :meth:`see` later)."""
        obj = ko.pod(name, uid=f"uid-{name}", **shape)
        self.pods[name] = obj
        if seen:
            self.see(name)
        return obj

    def see(self, name: str) -> None:
        self.view.apply("pods", "ADDED", self.pods[name])

    def before(self) -> ClusterSnapshot:
        """A copy of the cluster as the next score will see it."""
        self.service.settle()
        with self.cache.scoring_lock:
            return self.cache.snapshot().snap.copy()

    def score(self, name: str, names: list[str] | None = None) -> ScoreResult:
        obj = self.pods[name]
        spec = podspec_from_pod(obj, self.cache.models)
        key = self.service.assume_key(pod_key(obj), "dsan-scheduler")
        res = self.service.score("http", spec, key, names or NAMES, 10)
        self.service.settle()  # the reply left
        return res

    def bind(self, name: str, node: str) -> None:
        obj = dict(self.pods[name])
        obj["spec"] = {**obj["spec"], "nodeName": node}
        obj["status"] = {"phase": "Running"}
        self.pods[name] = obj
        self.view.apply("pods", "MODIFIED", obj)


def world(policy: str = "dsan", telemetry: bool = True, budget_s: float = 5.0,
          permutations: int = 4, background: int = 8, kept: int = 64,
          stale_s: float = 1e9) -> World:
    # A fixed wall clock: telemetry ages stay put while the test runs.
    cfg = SidecarConfig(policy=policy, telemetry_stale_s=stale_s, embed_refresh_s=0.0,
                        decisions_kept=kept)
    cache = GraphCache(cfg, wall=lambda: NOW.timestamp() + 5)
    view = FakeClusterView(cache, nodes=NODES)
    view.start()
    if telemetry:
        for i, name in enumerate(GPU_NODES):
            cache.upsert_telemetry(ko.telemetry(name, sampled_at=NOW, util=[
                [float((i * 7 + g) % 100)] * 4 for g in range(8)]))
    scorer, fallback, info = load_policies(cfg)
    engine = ScoringEngine(cache, scorer, fallback, cfg.telemetry_stale_s,
                           wall=lambda: NOW.timestamp() + 5)
    decisions = Decisions(kept)
    service = ScoringService(cache, view, engine, SidecarMetrics(), info, decisions)
    explainer = Explainer(cache, engine, decisions, view.synced, background, permutations,
                          budget_s)
    return World(cache, view, engine, service, decisions, explainer)


def served(policy: str) -> Scorer:
    """A fresh scorer of ``policy`` (a reference for the served one)."""
    return make_scorer(policy)


__all__ = ["GPU_NODES", "NAMES", "NODES", "NOW", "PolicyInfo", "World", "served", "world"]
