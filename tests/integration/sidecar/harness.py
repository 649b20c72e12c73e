"""Test helpers shared by the sidecar's integration tests."""

from __future__ import annotations

from typing import Any

from sidecar.cache import GraphCache
from tests.support.fakes import FakeClusterView


class GatedView(FakeClusterView):
    """A fake view that syncs only when the test opens the gate."""

    def __init__(self, cache: GraphCache, nodes: list[dict[str, Any]],
                 pods: list[dict[str, Any]] | None = None) -> None:
        super().__init__(cache, nodes=nodes, pods=pods)

    def start(self) -> None:
        pass

    def open(self) -> None:
        super().start()
