"""Hostile clients on the plugin socket, over the real v1beta1 protocol on unix sockets: extra
ListAndWatch streams must never starve kubelet's unary calls, and Allocate refuses what
kubelet never sends (duplicates, more IDs than devices, floods of unknown IDs) with a short,
clear INVALID_ARGUMENT instead of an error gRPC cannot even deliver."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from deviceplugin.agent import Agent
from deviceplugin.config import PluginConfig
from deviceplugin.fake import FakeBackend
from dsan.api.gen.deviceplugin_v1beta1 import api_pb2 as pb
from dsan.api.gen.deviceplugin_v1beta1 import api_pb2_grpc as pb_grpc
from tests.integration.deviceplugin.kubelet_server import LocalKubelet

pytestmark = pytest.mark.integration


@pytest.fixture
def agent(kubelet: LocalKubelet, sock_dir: Path) -> Iterator[Agent]:
    cfg = PluginConfig(node_name="hostile", plugin_dir=sock_dir, metrics_port=-1,
                       crd_enabled=False, mode="device-plugin", socket_check_s=0.1,
                       health_poll_s=0.05, recovery_quiet_s=600, max_watch_streams=4)
    a = Agent(cfg, FakeBackend(8)).start()
    kubelet.wait_for(lambda: len(kubelet.latest()) == 8)
    yield a
    a.stop()


def _ids(agent: Agent) -> list[str]:
    assert agent.manager is not None
    return [d.uuid for d in agent.manager.infos]


def _allocate(stub: Any, *containers: list[str]) -> pb.AllocateResponse:
    return stub.Allocate(pb.AllocateRequest(container_requests=[
        pb.ContainerAllocateRequest(devices_ids=ids) for ids in containers]), timeout=2)


def test_extra_watch_streams_are_refused_and_never_starve_allocate(
    kubelet: LocalKubelet, agent: Agent, sock_dir: Path
) -> None:
    ids = _ids(agent)
    ch = grpc.insecure_channel(f"unix://{sock_dir / 'dsan-gpu.sock'}")
    stub = pb_grpc.DevicePluginStub(ch)
    # kubelet holds one stream; a local client opens 16 more (twice the old worker pool).
    streams = [stub.ListAndWatch(pb.Empty()) for _ in range(16)]
    try:
        time.sleep(0.3)
        t0 = time.monotonic()
        resp = _allocate(stub, [ids[0]])  # the old pool: DEADLINE_EXCEEDED after 2 s
        took = time.monotonic() - t0
        assert resp.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"] == ids[0]
        assert took < 1.0, took
        accepted, refused = 0, []
        for s in streams:
            try:
                assert len(next(s).devices) == 8
                accepted += 1
            except grpc.RpcError as exc:
                refused.append(exc)
        assert accepted == 3  # max_watch_streams=4, one of them kubelet's
        assert {e.code() for e in refused} == {grpc.StatusCode.RESOURCE_EXHAUSTED}
        assert "max_watch_streams" in (refused[0].details() or "")
        # kubelet's own stream is still live: a health change reaches it at once.
        assert isinstance(agent.backend, FakeBackend)
        agent.backend.inject_xid(2, 79)
        kubelet.wait_for_health(ids[2], "Unhealthy", timeout=2.0)
        # Other unary calls are served too, repeatedly.
        for _ in range(20):
            _allocate(stub, [ids[1]])
    finally:
        for s in streams:
            s.cancel()
        ch.close()
    # Cancelled streams give their slots back: a new watcher is accepted again.
    assert agent.plugin is not None
    deadline = time.monotonic() + 3
    while agent.plugin.servicer.open_streams > 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert agent.plugin.servicer.open_streams == 1
    with grpc.insecure_channel(f"unix://{sock_dir / 'dsan-gpu.sock'}") as ch2:
        again = pb_grpc.DevicePluginStub(ch2).ListAndWatch(pb.Empty())
        assert len(next(again).devices) == 8
        again.cancel()


def test_allocate_refuses_duplicate_ids(kubelet: LocalKubelet, agent: Agent) -> None:
    ids = _ids(agent)
    stub = kubelet.stub()
    with pytest.raises(grpc.RpcError) as err:
        _allocate(stub, [ids[0], ids[1], ids[0]])
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "duplicate" in (err.value.details() or "") and ids[0] in (err.value.details() or "")
    # The same device in two containers of one request is a duplicate as well.
    with pytest.raises(grpc.RpcError) as err:
        _allocate(stub, [ids[3]], [ids[3]])
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_allocate_refuses_more_ids_than_devices(kubelet: LocalKubelet, agent: Agent) -> None:
    ids = _ids(agent)
    with pytest.raises(grpc.RpcError) as err:
        _allocate(kubelet.stub(), [*ids, ids[0]])
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "9 device IDs" in (err.value.details() or "")
    assert "8 GPUs" in (err.value.details() or "")


def test_allocate_error_for_10000_unknown_ids_is_short_and_delivered(
    kubelet: LocalKubelet, agent: Agent
) -> None:
    ids = _ids(agent)
    stub = kubelet.stub()
    junk = [f"GPU-junk-{i:05d}" for i in range(10_000)]
    with pytest.raises(grpc.RpcError) as err:
        _allocate(stub, junk)
    details = err.value.details() or ""
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (err.value.code(), details[:200])
    assert len(details) < 512 and "10000 device IDs" in details
    # 8 unknown IDs (no more than the node has): named, but each bounded in length.
    long_junk = ["GPU-" + "x" * 5000 + str(i) for i in range(8)]
    with pytest.raises(grpc.RpcError) as err:
        _allocate(stub, long_junk)
    details = err.value.details() or ""
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "unknown device IDs" in details and "more" in details and len(details) < 512
    # And the plugin keeps serving.
    assert _allocate(stub, [ids[5]]).container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"] == \
        ids[5]
