"""The agent in telemetry mode (the default) beside NVIDIA's device plugin on one node: a
stand-in NVIDIA plugin registers nvidia.com/gpu with the test kubelet on the shared
device-plugins directory, kubelet admits pods through it and reports them on its PodResources
socket, and our agent never registers but publishes telemetry that names the pods."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from deviceplugin.agent import Agent
from deviceplugin.config import PluginConfig
from deviceplugin.crwriter import FakeTelemetryStore
from deviceplugin.fake import FakeBackend
from dsan.api.telemetry import GPUTelemetry, PodRef
from tests.integration.deviceplugin.kubelet_server import LocalKubelet
from tests.integration.deviceplugin.nvidia_plugin import FakeNvidiaPlugin
from tests.integration.deviceplugin.podresources_server import (
    LocalPodResources,
    PodResourcesState,
)

pytestmark = pytest.mark.integration


def _get(agent: Agent, path: str) -> httpx.Response:
    assert agent.metrics is not None
    return httpx.get(f"http://127.0.0.1:{agent.metrics.port}{path}", timeout=5)


def _series(body: str, name: str) -> list[dict[str, str]]:
    """Each sample's labels, plus its value under the key "value"."""
    out = []
    for line in body.splitlines():
        if line.startswith(name + "{"):
            labels, value = line[len(name) + 1:].rsplit("} ", 1)
            d = {k: v.strip('"') for k, v in (kv.split("=", 1) for kv in labels.split('",'))}
            out.append({**d, "value": value})
    return out


@pytest.fixture
def node(sock_dir: Path) -> Iterator[dict[str, Any]]:
    """kubelet (device-plugins dir + PodResources socket), NVIDIA's plugin, and the GPUs."""
    state = PodResourcesState()
    kubelet = LocalKubelet(sock_dir, pod_resources=state).start()
    pr = LocalPodResources(sock_dir / "pod-resources" / "kubelet.sock", state).start()
    backend = FakeBackend(8)
    uuids = [d.uuid for d in backend.devices()]
    nvidia = FakeNvidiaPlugin(sock_dir, uuids).start()
    kubelet.wait_for(lambda: len(kubelet.latest()) == 8)
    yield {"kubelet": kubelet, "pr": pr, "state": state, "backend": backend, "uuids": uuids,
           "nvidia": nvidia}
    nvidia.stop()
    pr.stop()
    kubelet.stop()


def _agent(sock_dir: Path, backend: FakeBackend, store: FakeTelemetryStore, **kw: Any) -> Agent:
    cfg = PluginConfig(node_name="gpu-node-1", plugin_dir=sock_dir, metrics_port=0,
                       pod_resources_socket=sock_dir / "pod-resources" / "kubelet.sock",
                       pod_resources_interval_s=0.1, crd_interval_s=0.1, socket_check_s=0.05,
                       sample_interval_s=0.1, **kw)
    return Agent(cfg, backend, store=store).start()


def test_telemetry_mode_beside_nvidias_plugin_both_work_and_pods_are_named(
    node: dict[str, Any], sock_dir: Path
) -> None:
    kubelet: LocalKubelet = node["kubelet"]
    uuids: list[str] = node["uuids"]
    store = FakeTelemetryStore()
    agent = _agent(sock_dir, node["backend"], store)
    try:
        assert agent.config.mode == "telemetry"  # the default
        # kubelet admits two pods through NVIDIA's plugin, as on any GPU node.
        resp = kubelet.admit("ml", "train-0", "worker", [uuids[2], uuids[3]])
        assert resp.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"] == \
            f"{uuids[2]},{uuids[3]}"
        kubelet.admit("web", "infer-7", "server", [uuids[6]])

        def attributed() -> bool:
            body = _get(agent, "/metrics").text
            pods = {s["gpu"]: s["pod"] for s in _series(body, "DCGM_FI_DEV_GPU_UTIL")}
            return pods.get("2") == "train-0" and pods.get("6") == "infer-7"

        _wait(attributed, 5, "pods on /metrics")
        time.sleep(0.3)  # several socket checks: ours never registers
        # NVIDIA's plugin: registered once, its 8 GPUs streamed, Allocate served.
        assert [r.resource_name for r in kubelet.registrations] == ["nvidia.com/gpu"]
        assert kubelet.registrations[0].endpoint == "nvidia-gpu.sock"
        assert set(kubelet.latest()) == set(uuids)
        assert node["nvidia"].allocated == [[uuids[2], uuids[3]], [uuids[6]]]
        assert not (sock_dir / "dsan-gpu.sock").exists() and agent.plugin is None

        # Ours: dcgm series for 8 GPUs with dcgm-exporter's pod labels...
        body = _get(agent, "/metrics").text
        util = {s["gpu"]: (s["namespace"], s["pod"], s["container"])
                for s in _series(body, "DCGM_FI_DEV_GPU_UTIL")}
        assert len(util) == 8
        assert util["2"] == util["3"] == ("ml", "train-0", "worker")
        assert util["6"] == ("web", "infer-7", "server") and util["0"] == ("", "", "")
        assert "dsan_deviceplugin_pod_attribution_available{reason=\"\"} 1.0" in body
        # kubelet's GetAllocatableResources lists every GPU under NVIDIA's resource.
        alloc = {s["gpu"]: s["value"] for s in _series(body, "dsan_gpu_kubelet_allocatable")}
        assert alloc == {str(i): "1.0" for i in range(8)}
        # ...and the GPUTelemetry object with the holders per GPU.
        _wait(lambda: store.get("gpu-node-1") is not None and GPUTelemetry.from_dict(
            store.objects["gpu-node-1"]).status_of(uuids[6]).pods != (), 5, "pods in the CR")
        cr = GPUTelemetry.from_dict(store.objects["gpu-node-1"])
        assert cr.pod_attribution
        pods = {s.index: s.pods for s in cr.statuses}
        assert pods[2] == pods[3] == (PodRef("ml", "train-0", "worker"),)
        assert pods[6] == (PodRef("web", "infer-7", "server"),) and pods[0] == ()
        assert _get(agent, "/readyz").status_code == 200
        assert _get(agent, "/healthz").status_code == 200

        # The pod goes away: its labels go with it at the next poll.
        kubelet.remove_pod("ml", "train-0")
        _wait(lambda: {s["pod"] for s in _series(_get(agent, "/metrics").text,
                                                 "DCGM_FI_DEV_GPU_UTIL")} == {"", "infer-7"},
              5, "train-0 gone from /metrics")
        assert len(kubelet.registrations) == 1
    finally:
        agent.stop()


def test_without_the_pod_resources_socket_telemetry_goes_on_and_says_so(
    sock_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="deviceplugin")
    store = FakeTelemetryStore()
    agent = _agent(sock_dir, FakeBackend(4), store)
    try:
        _wait(lambda: agent.attribution is not None and agent.attribution.polls >= 5, 5, "polls")
        body = _get(agent, "/metrics").text
        assert 'dsan_deviceplugin_pod_attribution_available{reason="socket-absent"} 0.0' in body
        assert len(_series(body, "DCGM_FI_DEV_GPU_UTIL")) == 4
        assert _get(agent, "/readyz").status_code == 200
        _wait(lambda: "gpu-node-1" in store.objects, 5, "the CR")
        assert GPUTelemetry.from_dict(store.objects["gpu-node-1"]).pod_attribution is False
        off = [r for r in caplog.records if "attribution off" in r.getMessage()]
        assert len(off) == 1, [r.getMessage() for r in off]  # logged once, not per poll

        # kubelet's PodResources socket appears (kubelet started late): attribution comes on.
        state = PodResourcesState(assignments=[("a", "p", "c", "nvidia.com/gpu",
                                                (agent.manager.infos[1].uuid,))]
                                  if agent.manager else [])
        pr = LocalPodResources(sock_dir / "pod-resources" / "kubelet.sock", state).start()
        try:
            _wait(lambda: agent.attribution is not None and agent.attribution.available, 5,
                  "attribution on")
            body = _get(agent, "/metrics").text
            assert {s["pod"] for s in _series(body, "DCGM_FI_DEV_GPU_UTIL")} == {"", "p"}
            assert [r for r in caplog.records if "attribution on" in r.getMessage()]
        finally:
            pr.stop()
    finally:
        agent.stop()


def test_attribution_can_be_switched_off(sock_dir: Path) -> None:
    agent = _agent(sock_dir, FakeBackend(2), FakeTelemetryStore(), pod_attribution=False)
    try:
        assert agent.attribution is None
        body = _get(agent, "/metrics").text
        assert 'dsan_deviceplugin_pod_attribution_available{reason="disabled"} 0.0' in body
    finally:
        agent.stop()


def _wait(pred: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if pred():
                return
        except (KeyError, AttributeError):
            pass
        time.sleep(0.05)
    raise TimeoutError(f"{what} not seen within {timeout} s")
