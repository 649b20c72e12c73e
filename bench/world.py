"""The latency benchmarks' world: n nodes (every 2nd with 8 GPUs), about half their GPUs and
CPUs taken by bound pods, 16 telemetry windows per GPU node, served by a whole sidecar
(``sidecar.app.Sidecar`` around a fake cluster view) on loopback ports.

Requests: 32 pods of one shape (4 CPUs, 16 GiB, half a GPU) in turn, each a different pod
than the last (its assumption replaces that pod's previous one), so a node changes before
every call while the cluster never fills up; each with the node list rotated to another start,
as kube-scheduler's ``nextStartNodeIndex`` and parallel Filter do. kube-scheduler sends at
most 781 candidates with the adaptive ``percentageOfNodesToScore`` (at 3,125 nodes; 420 of
1,000, 500 of 5,000): the 1,000 and 5,000 rows are upper bounds.

Only APIs that every checkout of this repository has are used, so ``bench/latency.py`` can
serve the same world from another tree side by side.
"""

from __future__ import annotations

import gc
import itertools
import random
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sidecar.app import Sidecar, load_policies
from sidecar.cache import GraphCache
from sidecar.config import SidecarConfig
from sidecar.podspec import podspec_from_pod

# Run as a script (bench/ first on sys.path), this checkout's tests/ is not importable; after
# PYTHONPATH, so that a tree given there keeps its own.
sys.path.append(str(Path(__file__).resolve().parents[1]))
try:  # the tree on PYTHONPATH, which may predate the move of the builders to tests/
    from tests.support import kubeobjects as ko
except ImportError:
    from sidecar import kubeobjects as ko  # type: ignore[attr-defined,no-redef]

VARIANTS = 32


def pod(i: int) -> dict[str, Any]:
    return ko.pod(f"bench-{i}", cpu="4", memory="16Gi", gpus=1, uid=f"bench-uid-{i}",
                  annotations={"dsan.io/gpu-milli": "500"})


class World:
    """One policy's sidecar over n nodes; the request stream."""

    def __init__(self, n: int, policy: str) -> None:
        rnd = random.Random(n)
        nodes = ko.cluster(n)
        self.names = [nd["metadata"]["name"] for nd in nodes]
        pods = []
        for i, node in enumerate(nodes):
            gpus = int(node["status"]["allocatable"].get("nvidia.com/gpu", 0))
            for k in range(rnd.randint(0, max(1, gpus // 2))):
                share = {"dsan.io/gpu-milli": str(rnd.choice((250, 500)))} if k % 2 else {}
                pods.append(ko.pod(f"b{i}-{k}", cpu="2", memory="4Gi", gpus=1 if gpus else 0,
                                   node_name=node["metadata"]["name"], annotations=share,
                                   phase="Running"))
        # Live telemetry on every GPU node; staleness lifted so a long run never drifts into
        # the fallback.
        now = datetime.now(UTC)
        tele = [ko.telemetry(nd["metadata"]["name"], sampled_at=now,
                             util=[[float(rnd.randint(0, 100)) for _ in range(16)]
                                   for _ in range(int(nd["status"]["allocatable"].get(
                                       "nvidia.com/gpu", 0)))])
                for nd in nodes if nd["status"]["allocatable"].get("nvidia.com/gpu")]
        # The request pods, pending for the dsan-scheduler as the informer sees them: only such
        # pods are assumed after a score (a made-up pod is scored and forgotten).
        pods += [pod(i) for i in range(VARIANTS)]
        cfg = SidecarConfig(http_port=0, grpc_port=0, policy=policy, telemetry_stale_s=1e9,
                            gc_freeze_after_sync=False)

        try:  # the tree on PYTHONPATH, which may predate the move of the fakes to tests/
            from tests.support.fakes import FakeClusterView
        except ImportError:
            from sidecar.clusterview import FakeClusterView  # type: ignore[attr-defined,no-redef]

        def view(cache: GraphCache) -> FakeClusterView:
            return FakeClusterView(cache, nodes=nodes, pods=pods, telemetry=tele)

        self.sidecar = Sidecar(cfg, view_factory=view, policies=load_policies(cfg))
        self.sidecar.start()
        assert self.sidecar.wait_ready(60), "the fake informers did not sync"
        self.service = self.sidecar.service
        self.spec = podspec_from_pod(pod(0), self.sidecar.cache.models)
        self.cands = [self.names[k:] + self.names[:k]
                      for k in ((i * 7919) % n for i in range(VARIANTS))]
        # What the sidecar does once its informers synced (gc_freeze_after_sync).
        gc.collect()
        gc.freeze()

    def requests(self) -> Iterator[tuple[str, list[str]]]:
        """(pod key, candidate names) for each call in turn."""
        return itertools.cycle(list(zip([f"bench-uid-{i}" for i in range(VARIANTS)],
                                        self.cands, strict=True)))

    def stop(self) -> None:
        self.sidecar.stop()
