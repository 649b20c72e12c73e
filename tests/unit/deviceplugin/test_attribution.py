"""Per-pod attribution over the fake PodResources client: ID schemes, sharing, degradation."""

from __future__ import annotations

import logging

import pytest

from deviceplugin.attribution import PodAttribution
from deviceplugin.config import PluginConfig
from deviceplugin.crwriter import build_summary
from deviceplugin.fake import FakeBackend
from deviceplugin.podresources import DeviceAssignment, FakePodResources
from deviceplugin.resources import ResourceManager
from dsan.api.telemetry import GPUTelemetry, PodRef

GPU = "nvidia.com/gpu"
A = DeviceAssignment


def _attr(n: int = 4, **kw: object) -> tuple[PodAttribution, FakePodResources, list[str]]:
    devs = FakeBackend(n).devices()
    pr = FakePodResources(**kw)  # type: ignore[arg-type]
    return PodAttribution(pr, devs, GPU), pr, [d.uuid for d in devs]


def test_uuid_ids_map_each_container_to_its_gpus() -> None:
    a, pr, u = _attr()
    pr.assignments = [A("ml", "train", "w", GPU, (u[0], u[2])),
                      A("web", "api", "app", GPU, (u[3],))]
    assert a.refresh_once() and a.available and a.reason == ""
    assert a.pods == ((PodRef("ml", "train", "w"),), (), (PodRef("ml", "train", "w"),),
                      (PodRef("web", "api", "app"),))


def test_time_slicing_replicas_and_index_ids() -> None:
    a, pr, u = _attr()
    # NVIDIA's time-slicing names replicas <uuid>::<n>; deviceIDStrategy=index uses "0".."N-1".
    pr.assignments = [A("a", "p1", "c", GPU, (f"{u[1]}::0",)),
                      A("a", "p2", "c", GPU, (f"{u[1]}::3",)), A("b", "q", "c", GPU, ("2",))]
    a.refresh_once()
    assert a.pods[1] == (PodRef("a", "p1", "c"), PodRef("a", "p2", "c"))
    assert a.pods[2] == (PodRef("b", "q", "c"),)
    assert a.unmatched == 0


def test_other_resources_match_by_uuid_only_and_unmatched_ids_are_counted(
    caplog: pytest.LogCaptureFixture
) -> None:
    a, pr, u = _attr()
    pr.assignments = [
        A("n", "nic", "c", "example.com/nic", ("0", "1")),       # an index of another vendor
        A("n", "renamed", "c", "nvidia.com/gpu.shared", (u[3],)),  # a renamed GPU resource
        A("n", "mig", "c", GPU, ("MIG-1234", "9")),               # MIG, and an index too large
    ]
    with caplog.at_level(logging.WARNING):
        a.refresh_once()
        a.refresh_once()
    assert a.pods[0] == a.pods[1] == ()
    assert a.pods[3] == (PodRef("n", "renamed", "c"),)
    assert a.unmatched == 2
    assert len([r for r in caplog.records if "match no GPU" in r.getMessage()]) == 1


def test_allocatable_flags_and_kubelets_without_the_call() -> None:
    a, pr, u = _attr()
    pr.allocatable_ids = {GPU: (u[0], f"{u[1]}::0")}
    a.refresh_once()
    assert a.allocatable == (True, True, False, False)
    b, pr2, _ = _attr(allocatable_supported=False)
    assert b.refresh_once() and b.allocatable is None
    calls = pr2.calls
    b.refresh_once()
    assert pr2.calls == calls + 1  # unimplemented is remembered: List only from then on


def test_failure_clears_the_mapping_and_recovers(caplog: pytest.LogCaptureFixture) -> None:
    a, pr, u = _attr()
    pr.assignments = [A("ml", "train", "w", GPU, (u[0],))]
    a.refresh_once()
    pr.fail = "unavailable"
    with caplog.at_level(logging.INFO, logger="deviceplugin"):
        for _ in range(5):
            assert not a.refresh_once()
        assert a.pods == ((),) * 4 and a.allocatable is None  # no stale claims
        assert (a.available, a.reason, a.failures) == (False, "unavailable", 5)
        pr.fail = None
        assert a.refresh_once() and a.pods[0] == (PodRef("ml", "train", "w"),)
    msgs = [r.getMessage() for r in caplog.records]
    assert sum("attribution off" in m for m in msgs) == 1
    assert sum("attribution on" in m for m in msgs) == 1


def test_summary_carries_pods_only_while_attributed() -> None:
    a, pr, u = _attr(2)
    devs = FakeBackend(2).devices()
    m = ResourceManager(devs, [0, 0], PluginConfig(node_name="n"))
    pr.assignments = [A("ml", "train", "w", GPU, (u[1],))]
    a.refresh_once()
    obj = GPUTelemetry.from_dict(build_summary("n", m, None, available=True, attribution=a)
                                 .to_dict())
    assert obj.pod_attribution and obj.statuses[1].pods == (PodRef("ml", "train", "w"),)
    pr.fail = "socket-absent"
    a.refresh_once()
    obj = build_summary("n", m, None, available=True, attribution=a)
    assert not obj.pod_attribution and all(s.pods == () for s in obj.statuses)
