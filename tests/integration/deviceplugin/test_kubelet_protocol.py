"""The plugin against a test kubelet speaking the real v1beta1 protocol on unix sockets."""

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
from tests.integration.deviceplugin.kubelet_server import LocalKubelet

pytestmark = pytest.mark.integration


@pytest.fixture
def start_agent(sock_dir: Path) -> Iterator[Any]:
    agents: list[Agent] = []

    def start(backend: FakeBackend | None = None, **kw: Any) -> Agent:
        cfg: dict[str, Any] = dict(node_name="gpu-node-1", plugin_dir=sock_dir, metrics_port=-1,
                   mode="device-plugin",
                   crd_enabled=False, recovery_quiet_s=0.3, socket_check_s=0.1,
                   health_poll_s=0.1)
        cfg.update(kw)
        agent = Agent(PluginConfig(**cfg), backend or FakeBackend(8)).start()
        agents.append(agent)
        return agent

    yield start
    for a in agents:
        a.stop()


def _ids(agent: Agent) -> list[str]:
    assert agent.manager is not None
    return [d.uuid for d in agent.manager.infos]


def test_registers_and_streams_healthy_devices(kubelet: LocalKubelet, start_agent: Any) -> None:
    agent = start_agent()
    kubelet.wait_for(lambda: len(kubelet.latest()) == 8)
    reg = kubelet.registrations[0]
    assert (reg.version, reg.resource_name, reg.endpoint) == ("v1beta1", "nvidia.com/gpu",
                                                              "dsan-gpu.sock")
    assert reg.options.get_preferred_allocation_available
    assert kubelet.options is not None and kubelet.options.get_preferred_allocation_available
    assert set(kubelet.latest().values()) == {"Healthy"}
    assert kubelet.latest().keys() == set(_ids(agent))
    ids = _ids(agent)
    assert kubelet.topology[ids[0]] == [0] and kubelet.topology[ids[7]] == [1]  # NUMA hints


def test_xid_makes_device_unhealthy_within_a_second_and_it_recovers(
    kubelet: LocalKubelet, start_agent: Any
) -> None:
    backend = FakeBackend(8)
    agent = start_agent(backend)
    ids = _ids(agent)
    kubelet.wait_for(lambda: len(kubelet.latest()) == 8)

    backend.inject_xid(3, 13)  # an application Xid: counted, not a health change
    time.sleep(0.3)
    assert kubelet.latest()[ids[3]] == "Healthy"

    backend.set_check_failing(3)
    t0 = time.monotonic()
    backend.inject_xid(3, 79)  # GPU fell off the bus
    seen = kubelet.wait_for_health(ids[3], "Unhealthy", timeout=1.0)
    assert seen - t0 < 1.0
    assert [h for d, h in kubelet.latest().items() if d != ids[3]] == ["Healthy"] * 7

    # Past the quiet period but the probe still fails: stays Unhealthy.
    time.sleep(0.6)
    assert kubelet.latest()[ids[3]] == "Unhealthy"
    backend.set_check_failing(3, False)
    kubelet.wait_for_health(ids[3], "Healthy", timeout=2.0)

    backend.inject_ecc_dbe(5)
    kubelet.wait_for_health(ids[5], "Unhealthy", timeout=1.0)
    kubelet.wait_for_health(ids[5], "Healthy", timeout=2.0)


def _prefer(stub: Any, available: list[str], must: list[str], size: int) -> list[str]:
    req = pb.PreferredAllocationRequest(container_requests=[pb.ContainerPreferredAllocationRequest(
        available_deviceIDs=available, must_include_deviceIDs=must, allocation_size=size)])
    return list(stub.GetPreferredAllocation(req, timeout=5).container_responses[0].deviceIDs)


def test_preferred_allocation_is_nvlink_aware(kubelet: LocalKubelet, start_agent: Any) -> None:
    agent = start_agent(FakeBackend(8, topology="two-quads"))
    ids = _ids(agent)
    kubelet.wait_for(lambda: len(kubelet.latest()) == 8)
    stub = kubelet.stub()
    # 4 of 8: one whole NVLink quad, not a mix.
    assert _prefer(stub, ids, [], 4) == ids[0:4]
    # Must include GPU 5: its quad-mates, not the lower-numbered GPUs.
    assert _prefer(stub, ids, [ids[5]], 3) == [ids[4], ids[5], ids[6]]
    # Fragmented availability: the 3 that share a quad.
    assert _prefer(stub, [ids[0], ids[1], ids[4], ids[6], ids[7]], [], 3) == [ids[4], ids[6],
                                                                              ids[7]]
    with pytest.raises(grpc.RpcError) as err:
        _prefer(stub, ids[:2], [ids[5]], 2)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "must-include" in (err.value.details() or "")


def test_preferred_allocation_follows_dgx1_links(kubelet: LocalKubelet, start_agent: Any) -> None:
    agent = start_agent(FakeBackend(8, topology="dgx1"))
    ids = _ids(agent)
    kubelet.wait_for(lambda: len(kubelet.latest()) == 8)
    stub = kubelet.stub()
    # GPU 0's only cross-quad link is to GPU 4 (not 5, 6 or 7).
    assert _prefer(stub, [ids[0], ids[5], ids[6], ids[4], ids[7]], [ids[0]], 2) == [ids[0], ids[4]]
    # A fully linked quad beats any 4 spread over both.
    assert sorted(_prefer(stub, ids, [ids[6]], 4)) == sorted(ids[4:8])


def test_allocate_and_prestart(kubelet: LocalKubelet, start_agent: Any) -> None:
    agent = start_agent(allocate_modes=("envvar", "device-specs", "cdi"), pre_start_required=True)
    ids = _ids(agent)
    kubelet.wait_for(lambda: len(kubelet.latest()) == 8)
    assert kubelet.options is not None and kubelet.options.pre_start_required
    stub = kubelet.stub()
    resp = stub.Allocate(pb.AllocateRequest(container_requests=[
        pb.ContainerAllocateRequest(devices_ids=[ids[2], ids[3]]),
        pb.ContainerAllocateRequest(devices_ids=[ids[7]])]), timeout=5)
    first, second = resp.container_responses
    assert first.envs["NVIDIA_VISIBLE_DEVICES"] == f"{ids[2]},{ids[3]}"
    assert [d.host_path for d in first.devices][:2] == ["/dev/nvidia2", "/dev/nvidia3"]
    assert {d.permissions for d in first.devices} == {"rw"}
    assert [c.name for c in second.cdi_devices] == [f"nvidia.com/gpu={ids[7]}"]
    stub.PreStartContainer(pb.PreStartContainerRequest(devices_ids=[ids[7]]), timeout=5)

    with pytest.raises(grpc.RpcError) as err:
        stub.Allocate(pb.AllocateRequest(container_requests=[
            pb.ContainerAllocateRequest(devices_ids=["GPU-nope"])]), timeout=5)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "GPU-nope" in (err.value.details() or "")
    # The bad request did not take the plugin down.
    assert len(stub.Allocate(pb.AllocateRequest(container_requests=[
        pb.ContainerAllocateRequest(devices_ids=[ids[0]])]), timeout=5).container_responses) == 1


def test_reregisters_after_kubelet_restart(kubelet: LocalKubelet, start_agent: Any) -> None:
    agent = start_agent()
    kubelet.wait_for(lambda: len(kubelet.registrations) == 1 and len(kubelet.latest()) == 8)
    n_updates = len(kubelet.updates)
    kubelet.restart()  # deletes kubelet.sock and the plugin's socket, serves a new kubelet.sock
    kubelet.wait_for(lambda: len(kubelet.registrations) == 2, timeout=5)
    kubelet.wait_for(lambda: len(kubelet.updates) > n_updates, timeout=5)
    assert len(kubelet.latest()) == 8
    assert agent.plugin is not None and agent.plugin.serve_count == 2
    # The re-registered plugin answers on its new socket.
    assert len(_prefer(kubelet.stub(), _ids(agent), [], 2)) == 2


def test_reregisters_when_own_socket_disappears(kubelet: LocalKubelet, start_agent: Any,
                                                sock_dir: Path) -> None:
    start_agent()
    kubelet.wait_for(lambda: len(kubelet.registrations) == 1)
    (sock_dir / "dsan-gpu.sock").unlink()
    kubelet.wait_for(lambda: len(kubelet.registrations) == 2, timeout=5)
    assert (sock_dir / "dsan-gpu.sock").exists()


def test_waits_for_absent_kubelet(sock_dir: Path, start_agent: Any) -> None:
    agent = start_agent()
    time.sleep(0.4)
    assert agent.plugin is not None and agent.plugin.registrations == 0
    k = LocalKubelet(sock_dir).start()
    try:
        k.wait_for(lambda: len(k.latest()) == 8, timeout=5)
    finally:
        k.stop()


def test_degraded_without_driver_serves_nothing_but_keeps_running(sock_dir: Path,
                                                                  start_agent: Any) -> None:
    agent = start_agent(FakeBackend(8, unavailable=True))
    assert not agent.available and "unavailable" in agent.reason
    assert agent.plugin is None and agent.manager is None
    summary = agent.summary()
    assert summary.available is False and summary.gpus == ()


def test_fail_on_init_error_raises(sock_dir: Path) -> None:
    from deviceplugin.backend import BackendUnavailable

    cfg = PluginConfig(node_name="n", plugin_dir=sock_dir, metrics_port=-1, crd_enabled=False,
                       fail_on_init_error=True)
    with pytest.raises(BackendUnavailable):
        Agent(cfg, FakeBackend(2, unavailable=True)).start()


def test_health_off_keeps_devices_healthy_but_counts_xids(kubelet: LocalKubelet,
                                                          start_agent: Any) -> None:
    backend = FakeBackend(2)
    agent = start_agent(backend, health_enabled=False)
    kubelet.wait_for(lambda: len(kubelet.latest()) == 2)
    backend.inject_xid(1, 79)
    assert agent.manager is not None
    deadline = time.monotonic() + 2
    while agent.manager.health_snapshot()[1][2] == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert agent.manager.health_snapshot()[1] == (True, "", 1, 79)
    assert set(kubelet.latest().values()) == {"Healthy"}
