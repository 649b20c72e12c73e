"""A whole sidecar on loopback ports around a fake cluster view (real HTTP and gRPC servers)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sidecar.app import Sidecar, load_policies
from sidecar.cache import GraphCache
from sidecar.config import SidecarConfig
from tests.integration.sidecar.harness import GatedView
from tests.support import kubeobjects as ko


@pytest.fixture
def sidecar_factory() -> Iterator[Any]:
    started: list[Sidecar] = []

    def make(n: int = 50, ready: bool = True, pods: list[dict[str, Any]] | None = None,
             **cfg: Any) -> tuple[Sidecar, GatedView]:
        """``pods``: what the informers list first (a pending pod of the dsan-scheduler is
        one the sidecar may charge to its best node after a score)."""
        # No gc.freeze() inside the test runner.
        config = SidecarConfig(http_port=0, grpc_port=0, policy=cfg.pop("policy", "fgd"),
                               gc_freeze_after_sync=False, **cfg)
        views: list[GatedView] = []

        def factory(cache: GraphCache) -> GatedView:
            views.append(GatedView(cache, ko.cluster(n), pods))
            return views[0]

        sc = Sidecar(config, view_factory=factory, policies=load_policies(config))
        sc.start()
        started.append(sc)
        if ready:
            views[0].open()
            assert sc.wait_ready(5)
        return sc, views[0]

    yield make
    for sc in started:
        sc.stop()


@pytest.fixture
def grpc_via(sidecar_factory: Any) -> Any:
    """A sidecar factory that also returns the sidecar's gRPC target."""

    def make(**kw: Any) -> tuple[Sidecar, GatedView, str]:
        sc, view = sidecar_factory(**kw)
        assert sc.grpc_target is not None
        return sc, view, sc.grpc_target

    return make
