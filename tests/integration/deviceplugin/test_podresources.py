"""The PodResources client contract, run over the fake and over the real gRPC client talking to
a test server that speaks kubelet's PodResourcesLister v1 on a unix socket."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import pytest

from deviceplugin.podresources import (
    DeviceAssignment,
    FakePodResources,
    KubeletPodResources,
    PodResourcesClient,
    PodResourcesError,
)
from tests.integration.deviceplugin.podresources_server import (
    LocalPodResources,
    PodResourcesState,
)

pytestmark = pytest.mark.integration


class Driver(Protocol):
    """What a contract test controls: kubelet's answers, and kubelet going away."""

    client: PodResourcesClient

    def set(self, assignments: list[DeviceAssignment], allocatable: dict[str, tuple[str, ...]],
            allocatable_supported: bool = True) -> None: ...
    def go_away(self) -> None: ...
    def come_back(self) -> None: ...


class FakeDriver:
    def __init__(self) -> None:
        self.fake = FakePodResources()
        self.client: PodResourcesClient = self.fake

    def set(self, assignments: list[DeviceAssignment], allocatable: dict[str, tuple[str, ...]],
            allocatable_supported: bool = True) -> None:
        self.fake.assignments = assignments
        self.fake.allocatable_ids = allocatable
        self.fake.allocatable_supported = allocatable_supported

    def go_away(self) -> None:
        self.fake.fail = "socket-absent"

    def come_back(self) -> None:
        self.fake.fail = None


class KubeletDriver:
    def __init__(self, socket: Path) -> None:
        self.state = PodResourcesState()
        self.server = LocalPodResources(socket, self.state).start()
        self.client: PodResourcesClient = KubeletPodResources(socket)

    def set(self, assignments: list[DeviceAssignment], allocatable: dict[str, tuple[str, ...]],
            allocatable_supported: bool = True) -> None:
        self.state.assignments = [(a.namespace, a.pod, a.container, a.resource_name,
                                   a.device_ids) for a in assignments]
        self.state.allocatable = allocatable
        self.state.allocatable_supported = allocatable_supported

    def go_away(self) -> None:
        self.server.stop()

    def come_back(self) -> None:
        self.server = LocalPodResources(self.server.socket, self.state).start()


@pytest.fixture(params=["fake", "kubelet"])
def driver(request: pytest.FixtureRequest, sock_dir: Path) -> Iterator[Driver]:
    d: FakeDriver | KubeletDriver = (FakeDriver() if request.param == "fake"
                                     else KubeletDriver(sock_dir / "pod-resources.sock"))
    yield d
    d.client.close()
    if isinstance(d, KubeletDriver):
        d.server.stop()


A = DeviceAssignment


def test_list_flattens_pods_containers_and_devices(driver: Driver) -> None:
    got = [A("ml", "train-0", "worker", "nvidia.com/gpu", ("GPU-a", "GPU-b")),
           A("ml", "train-0", "sidecar", "example.com/nic", ("nic0",)),
           A("web", "api", "app", "nvidia.com/gpu", ("GPU-c::1",))]
    driver.set(got, {})
    assert sorted(driver.client.list(2.0), key=repr) == sorted(got, key=repr)
    driver.set([], {})
    assert driver.client.list(2.0) == []


def test_allocatable_by_resource(driver: Driver) -> None:
    driver.set([], {"nvidia.com/gpu": ("GPU-a", "GPU-b"), "example.com/nic": ("nic0",)})
    assert driver.client.allocatable(2.0) == {"nvidia.com/gpu": ("GPU-a", "GPU-b"),
                                              "example.com/nic": ("nic0",)}


def test_kubelet_without_get_allocatable_says_unimplemented(driver: Driver) -> None:
    driver.set([A("a", "p", "c", "nvidia.com/gpu", ("GPU-a",))], {}, allocatable_supported=False)
    with pytest.raises(PodResourcesError) as err:
        driver.client.allocatable(2.0)
    assert err.value.reason == "unimplemented"
    assert len(driver.client.list(2.0)) == 1  # List still works


def test_absent_kubelet_is_an_error_with_a_reason_and_recovery_needs_no_new_client(
    driver: Driver
) -> None:
    driver.set([A("a", "p", "c", "nvidia.com/gpu", ("GPU-a",))], {})
    assert len(driver.client.list(2.0)) == 1
    driver.go_away()
    with pytest.raises(PodResourcesError) as err:
        driver.client.list(2.0)
    assert err.value.reason == "socket-absent"
    driver.come_back()
    t0 = time.monotonic()
    assert len(driver.client.list(2.0)) == 1
    assert time.monotonic() - t0 < 1.0  # no reconnect backoff after kubelet comes back


def test_real_client_times_out_on_a_hung_kubelet(sock_dir: Path) -> None:
    d = KubeletDriver(sock_dir / "pod-resources.sock")
    try:
        d.state.delay_s = 1.0
        t0 = time.monotonic()
        with pytest.raises(PodResourcesError) as err:
            d.client.list(0.2)
        assert err.value.reason == "deadline-exceeded" and time.monotonic() - t0 < 0.9
        d.state.delay_s = 0.0
        assert d.client.list(2.0) == []
    finally:
        d.client.close()
        d.server.stop()


def test_real_client_reads_a_list_larger_than_grpcs_default_limit(sock_dir: Path) -> None:
    """kubelet allows 16 MiB; gRPC's client default of 4 MiB would fail on a busy node."""
    d = KubeletDriver(sock_dir / "pod-resources.sock")
    try:
        ids = tuple(f"dev-{i:06d}-{'x' * 40}" for i in range(100))
        many = [A("ns", f"pod-{i}", "c", "example.com/thing", ids) for i in range(1200)]
        d.set(many, {})
        assert len(d.client.list(10.0)) == 1200
    finally:
        d.client.close()
        d.server.stop()
