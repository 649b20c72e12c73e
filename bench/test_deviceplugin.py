"""Device-plugin benchmarks, measured side by side in one run and written to
docs/results/deviceplugin.md:

- CPU per telemetry sample with 8 (and, for scaling, 64) fake GPUs, and the share of one core
  the whole telemetry path takes at 1 Hz sampling, a CR write every 5 s and a scrape every
  15 s (goal: under 1 % of a core);
- Xid-to-Unhealthy latency: fake Xid injected -> ListAndWatch update received by a test
  kubelet over the real gRPC unix socket (goal: under 1 s);
- Allocate latency over the plugin socket, alone and with 16 extra ListAndWatch streams
  open (kubelet's Allocate must not wait for a free thread).

Run: ``.venv/bin/python -m pytest -q bench/test_deviceplugin.py --benchmark-only``.
"""

from __future__ import annotations

import resource
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from deviceplugin.agent import Agent
from deviceplugin.attribution import PodAttribution
from deviceplugin.config import PluginConfig
from deviceplugin.crwriter import build_summary
from deviceplugin.fake import FakeBackend
from deviceplugin.metrics import GPUCollector
from deviceplugin.podresources import DeviceAssignment, FakePodResources
from deviceplugin.resources import ResourceManager
from deviceplugin.sampler import TelemetrySampler
from dsan.api.gen.deviceplugin_v1beta1 import api_pb2 as pb
from dsan.api.gen.deviceplugin_v1beta1 import api_pb2_grpc as pb_grpc
from tests.integration.deviceplugin.kubelet_server import LocalKubelet

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results" / "deviceplugin.md"
_rows: dict[str, str] = {}


@pytest.fixture(scope="module", autouse=True)
def _write_results() -> Iterator[None]:
    yield
    if not _rows:
        return
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = ["# Device plugin: measured", "",
             f"Written by `bench/test_deviceplugin.py` on {when} (2-core shared machine, "
             "fake GPUs; see docs/deviceplugin.md).", "",
             "| measurement | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in _rows.items()]
    RESULTS.write_text("\n".join(lines) + "\n")


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _parts(n: int) -> tuple[ResourceManager, TelemetrySampler]:
    b = FakeBackend(n, topology="nvswitch")
    devs = b.devices()
    m = ResourceManager(devs, [0] * n, PluginConfig(node_name="bench"))
    s = TelemetrySampler(b, n, interval_s=1.0, window_s=10, horizon_s=300)
    for _ in range(s.capacity):  # a full ring: summaries cost what they cost at steady state
        s.sample_once()
    return m, s


@pytest.mark.parametrize("n_gpus", [8, 64])
def test_sample_cost(benchmark: Any, n_gpus: int) -> None:
    _, s = _parts(n_gpus)
    c0, k0 = s.cpu_seconds, s.samples
    benchmark(s.sample_once)
    per = (s.cpu_seconds - c0) / (s.samples - k0)
    _rows[f"CPU per sample, {n_gpus} fake GPUs"] = f"{per * 1e6:.1f} µs"


def test_telemetry_path_share_of_a_core(benchmark: Any) -> None:
    """Process CPU for 1 s of the agent's steady-state telemetry work with 8 GPUs: one sample,
    1/5 of a CR summary (written every 5 s), 1/15 of a /metrics render (15 s scrape), 1/5 of
    a PodResources refresh (every 5 s); every GPU held by a pod, so labels are full."""
    m, s = _parts(8)
    pr = FakePodResources(assignments=[
        DeviceAssignment("team", f"job-{i}", "main", "nvidia.com/gpu", (d.uuid,))
        for i, d in enumerate(m.infos)])
    attr = PodAttribution(pr, m.infos, "nvidia.com/gpu")
    attr.refresh_once()
    collector = GPUCollector(s, m, "bench", available=True, attribution=attr)

    def summary() -> None:
        build_summary("bench", m, s, available=True, attribution=attr).to_dict()

    costs = {}
    for name, fn, reps in (("sample", s.sample_once, 3000), ("summary", summary, 150),
                           ("scrape", collector.render, 300),
                           ("attribution", attr.refresh_once, 300)):
        c0 = _cpu()
        for _ in range(reps):
            fn()
        costs[name] = (_cpu() - c0) / reps
    per_second = (costs["sample"] + costs["summary"] / 5 + costs["scrape"] / 15
                  + costs["attribution"] / 5)
    benchmark.pedantic(summary, rounds=20, iterations=1)
    _rows["CPU per CR summary (8 GPUs, 30 windows)"] = f"{costs['summary'] * 1e3:.2f} ms"
    _rows["CPU per /metrics render (8 GPUs, pod labels)"] = f"{costs['scrape'] * 1e3:.2f} ms"
    _rows["CPU per pod attribution refresh (8 pods, fake client)"] = (
        f"{costs['attribution'] * 1e6:.0f} µs")
    _rows["share of one core: 1 Hz sampling + CR and attribution every 5 s + scrape every "
          "15 s, 8 GPUs"] = f"{per_second * 100:.3f} %"
    assert per_second < 0.01, f"telemetry takes {per_second:.2%} of a core"


def test_xid_to_unhealthy_latency(benchmark: Any) -> None:
    sock = Path(tempfile.mkdtemp(prefix="dsan-bench-", dir="/tmp"))
    kubelet = LocalKubelet(sock).start()
    backend = FakeBackend(8)
    cfg = PluginConfig(node_name="bench", plugin_dir=sock, metrics_port=-1, crd_enabled=False,
                       mode="device-plugin", recovery_quiet_s=0.0, health_poll_s=0.05,
                       socket_check_s=0.1)
    agent = Agent(cfg, backend).start()
    assert agent.manager is not None
    dev = agent.manager.infos[4].uuid
    internal: list[float] = []
    try:
        kubelet.wait_for(lambda: len(kubelet.latest()) == 8)

        def healthy_again() -> None:
            backend.set_check_failing(4, False)
            kubelet.wait_for_health(dev, "Healthy", timeout=5)
            backend.set_check_failing(4)  # keep it down until the next round's setup

        def xid_round_trip() -> None:
            backend.inject_xid(4, 79)
            kubelet.wait_for_health(dev, "Unhealthy", timeout=2)
            assert agent.manager is not None and agent.manager.last_change is not None
            _, seen, published = agent.manager.last_change
            internal.append(published - seen)

        backend.set_check_failing(4)
        benchmark.pedantic(xid_round_trip, setup=healthy_again, rounds=30, iterations=1)
    finally:
        agent.stop()
        kubelet.stop()
        shutil.rmtree(sock, ignore_errors=True)
    st = benchmark.stats.stats
    _rows["Xid -> Unhealthy at the test kubelet (gRPC ListAndWatch), median / max of 30"] = (
        f"{st.median * 1e3:.2f} ms / {st.max * 1e3:.2f} ms")
    _rows["of which event -> health change published in the manager, median"] = (
        f"{statistics.median(internal) * 1e3:.3f} ms")
    assert st.max < 1.0


def test_allocate_latency_with_extra_watch_streams(benchmark: Any) -> None:
    """Allocate over the unix socket, alone and with 16 extra ListAndWatch streams open (twice
    the old fixed pool of 8 threads, which made Allocate wait ~10 s)."""
    sock = Path(tempfile.mkdtemp(prefix="dsan-bench-", dir="/tmp"))
    kubelet = LocalKubelet(sock).start()
    cfg = PluginConfig(node_name="bench", plugin_dir=sock, metrics_port=-1, crd_enabled=False,
                       mode="device-plugin", socket_check_s=0.1, pod_attribution=False)
    agent = Agent(cfg, FakeBackend(8)).start()
    assert agent.manager is not None
    req = pb.AllocateRequest(container_requests=[
        pb.ContainerAllocateRequest(devices_ids=[agent.manager.infos[0].uuid])])
    ch = grpc.insecure_channel(f"unix://{sock / 'dsan-gpu.sock'}")
    stub = pb_grpc.DevicePluginStub(ch)
    streams: list[Any] = []
    try:
        kubelet.wait_for(lambda: len(kubelet.latest()) == 8)

        def timed(n: int) -> list[float]:
            out = []
            for _ in range(n):
                t0 = time.perf_counter()
                stub.Allocate(req, timeout=5)
                out.append(time.perf_counter() - t0)
            return out

        timed(20)  # warm the channel
        alone = timed(200)
        streams = [stub.ListAndWatch(pb.Empty()) for _ in range(16)]
        time.sleep(0.3)
        flooded = timed(200)
        benchmark.pedantic(lambda: stub.Allocate(req, timeout=5), rounds=50, iterations=1)
    finally:
        for st in streams:
            st.cancel()
        ch.close()
        agent.stop()
        kubelet.stop()
        shutil.rmtree(sock, ignore_errors=True)

    def fmt(xs: list[float]) -> str:
        return f"{statistics.median(xs) * 1e3:.2f} ms / {max(xs) * 1e3:.2f} ms"

    _rows["Allocate, median / max of 200, no extra streams"] = fmt(alone)
    _rows["Allocate, median / max of 200, 16 extra ListAndWatch streams open"] = fmt(flooded)
    assert max(flooded) < 1.0
