"""A whole sidecar on loopback ports around a fake cluster view (real HTTP and gRPC servers)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sidecar import kubeobjects as ko
from sidecar.app import Sidecar, load_policies
from sidecar.cache import GraphCache
from sidecar.config import SidecarConfig
from tests.integration.sidecar.harness import GatedView
from tests.support.gateway import Gateway


@pytest.fixture
def sidecar_factory() -> Iterator[Any]:
    started: list[Sidecar] = []

    def make(n: int = 50, ready: bool = True, **cfg: Any) -> tuple[Sidecar, GatedView]:
        # No gc.freeze() inside the test runner.
        config = SidecarConfig(http_port=0, grpc_port=0, policy=cfg.pop("policy", "fgd"),
                               gc_freeze_after_sync=False, **cfg)
        views: list[GatedView] = []

        def factory(cache: GraphCache) -> GatedView:
            views.append(GatedView(cache, ko.cluster(n)))
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


@pytest.fixture(params=["grpcio", "gateway"])
def grpc_via(request: pytest.FixtureRequest, sidecar_factory: Any) -> Iterator[Any]:
    """A sidecar factory whose gRPC target is either the sidecar's own grpcio server or
    score-gateway in front of its relay socket: the gRPC tests hold for both."""
    workdir = Path(tempfile.mkdtemp(prefix="dsan-gw-"))  # short: a socket path has 107 bytes
    gateways: list[Gateway] = []

    def make(**kw: Any) -> tuple[Sidecar, GatedView, str]:
        if request.param == "grpcio":
            sc, view = sidecar_factory(**kw)
            assert sc.grpc_target is not None
            return sc, view, sc.grpc_target
        sock = str(workdir / f"relay-{len(gateways)}.sock")
        sc, view = sidecar_factory(relay_socket=sock, **kw)
        gateways.append(Gateway(sock, workdir).start())
        return sc, view, gateways[-1].target

    yield make
    for gw in gateways:
        gw.stop()
    shutil.rmtree(workdir, ignore_errors=True)
