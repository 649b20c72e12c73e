"""/healthz and /readyz on the agent's metrics server, as kubelet's httpGet probes see them."""

from __future__ import annotations

import threading
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest

from deviceplugin.agent import Agent
from deviceplugin.config import PluginConfig
from deviceplugin.fake import FakeBackend
from tests.integration.deviceplugin.kubelet_server import LocalKubelet

pytestmark = pytest.mark.integration


def _cfg(sock_dir: Path, **kw: Any) -> PluginConfig:
    base: dict[str, Any] = dict(node_name="probe-node", plugin_dir=sock_dir, metrics_port=0,
                                crd_enabled=False, socket_check_s=0.05,
                                pod_resources_socket=sock_dir / "absent.sock")
    return PluginConfig(**{**base, **kw})


def _get(agent: Agent, path: str) -> httpx.Response:
    assert agent.metrics is not None
    return httpx.get(f"http://127.0.0.1:{agent.metrics.port}{path}", timeout=5)


def _wait_status(agent: Agent, path: str, code: int, timeout: float = 5.0) -> httpx.Response:
    done = threading.Event()
    r = _get(agent, path)
    while r.status_code != code and not done.wait(0.05):
        timeout -= 0.05
        if timeout <= 0:
            raise AssertionError(f"{path}: {r.status_code} {r.text!r}, wanted {code}")
        r = _get(agent, path)
    return r


def test_device_plugin_mode_is_ready_only_once_registered(sock_dir: Path) -> None:
    agent = Agent(_cfg(sock_dir, mode="device-plugin"), FakeBackend(2)).start()
    try:
        r = _get(agent, "/readyz")
        assert r.status_code == 503 and "not registered with kubelet" in r.text
        assert _get(agent, "/healthz").status_code == 200  # alive, just not ready
        kubelet = LocalKubelet(sock_dir).start()
        try:
            assert _wait_status(agent, "/readyz", 200).text == "ok\n"
        finally:
            kubelet.stop()  # kubelet gone: not ready again
        _wait_status(agent, "/readyz", 503)
    finally:
        agent.stop()


def test_telemetry_mode_and_degraded_agents_are_ready(sock_dir: Path) -> None:
    for backend in (FakeBackend(2), FakeBackend(2, unavailable=True)):
        agent = Agent(_cfg(sock_dir), backend).start()
        try:
            assert _get(agent, "/readyz").status_code == 200
            assert _get(agent, "/healthz").status_code == 200
        finally:
            agent.stop()


class _Bug(BaseException):
    """Escapes the sampler's ``except Exception``, as a real bug in a thread could."""


def test_a_dead_thread_fails_healthz_naming_it(sock_dir: Path) -> None:
    calls = 0

    def curve(t: float) -> np.ndarray:
        nonlocal calls
        calls += 1
        if calls > 1:  # the first sample, taken in start(), succeeds
            raise _Bug("sampler bug")
        return np.zeros(2)

    hook = threading.excepthook
    threading.excepthook = lambda args: None  # keep the expected traceback out of the output
    agent = Agent(_cfg(sock_dir, sample_interval_s=0.05), FakeBackend(2, util_curve=curve))
    try:
        agent.start()
        r = _wait_status(agent, "/healthz", 503)
        assert "sampler" in r.text
        assert _get(agent, "/metrics").status_code == 200  # the rest still serves
    finally:
        agent.stop()
        threading.excepthook = hook


def test_routes_content_type_and_a_burst_of_probes(sock_dir: Path) -> None:
    agent = Agent(_cfg(sock_dir), FakeBackend(2)).start()
    try:
        m = _get(agent, "/metrics")
        assert m.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
        assert _get(agent, "/nope").status_code == 404
        assert agent.metrics is not None
        url = f"http://127.0.0.1:{agent.metrics.port}/healthz"

        def probe(_: int) -> int:  # a new connection each, as kubelet's probes make
            with urllib.request.urlopen(url, timeout=5) as r:
                return int(r.status)

        with ThreadPoolExecutor(64) as pool:
            codes = list(pool.map(probe, range(256)))
        assert codes == [200] * 256
    finally:
        agent.stop()


class _RefusesOnce(LocalKubelet):
    def Register(self, request: Any, context: Any) -> Any:
        if not getattr(self, "refused", False):
            self.refused = True
            context.abort(grpc.StatusCode.UNAVAILABLE, "kubelet still starting")
        return super().Register(request, context)


def test_readyz_reason_is_not_an_error_that_is_over(sock_dir: Path) -> None:
    kubelet = _RefusesOnce(sock_dir).start()
    agent = Agent(_cfg(sock_dir, mode="device-plugin"), FakeBackend(2)).start()
    try:
        assert _wait_status(agent, "/readyz", 200).text == "ok\n"  # refused once, then in
        kubelet.stop()
        r = _wait_status(agent, "/readyz", 503)
        assert "still starting" not in r.text, r.text  # that refusal was answered long ago
    finally:
        agent.stop()
        kubelet.stop()
