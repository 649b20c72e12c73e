"""Agent wiring: what fails while it starts degrades the part it belongs to, as it does once
the part's own thread runs."""

from __future__ import annotations

import numpy as np

from deviceplugin.agent import Agent
from deviceplugin.config import PluginConfig
from deviceplugin.fake import FakeBackend
from deviceplugin.podresources import DeviceAssignment, FakePodResources


def _cfg() -> PluginConfig:
    return PluginConfig(node_name="n", metrics_port=-1, crd_enabled=False,
                        sample_interval_s=0.05, pod_resources_interval_s=0.05)


def test_a_failing_first_sample_is_counted_not_fatal() -> None:
    calls = 0

    def curve(t: float) -> np.ndarray:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("driver hiccup")
        return np.full(2, 7.0)

    agent = Agent(_cfg(), FakeBackend(2, util_curve=curve), pod_resources=FakePodResources())
    try:
        agent.start()  # raised the hiccup before
        assert agent.sampler is not None and agent.sampler.errors >= 1
        assert agent.healthy() == (True, "") and agent.ready() == (True, "")
    finally:
        agent.stop()


class _Broken(FakePodResources):
    """A client failing in a way it does not wrap as PodResourcesError (a bug, a library
    change): the attribution thread survives it, and so must the first refresh."""

    def list(self, timeout_s: float) -> list[DeviceAssignment]:
        self.calls += 1
        raise OSError("unexpected")


def test_a_first_attribution_refresh_error_degrades_attribution_only() -> None:
    client = _Broken()
    agent = Agent(_cfg(), FakeBackend(2), pod_resources=client)
    try:
        agent.start()  # raised OSError before
        assert agent.attribution is not None and not agent.attribution.available
        assert agent.attribution.reason == "error" and agent.sampler is not None
        assert agent.ready() == (True, "")
    finally:
        agent.stop()
