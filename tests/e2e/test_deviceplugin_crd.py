"""The GPUTelemetry custom resource on a real kube-apiserver: CRD installed from the chart,
written by the device plugin's writer (server-side apply), read back and parsed; the schema
rejects a malformed object; writes survive an apiserver restart."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from deviceplugin.agent import Agent
from deviceplugin.config import PluginConfig
from deviceplugin.crwriter import KubernetesTelemetryStore
from deviceplugin.fake import FakeBackend
from deviceplugin.podresources import DeviceAssignment, FakePodResources
from dsan.api import telemetry as tm
from dsan.api import types as t

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "charts" / "dsan-scheduler" / "crds" / "gputelemetry.yaml"


NODES = ("e2e-gpu-node", "e2e-bad-node", "e2e-agent-node", "e2e-cli-node")


def _wait(pred: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = pred()
        if out:
            return out
        time.sleep(0.1)
    raise TimeoutError(f"{what} not seen within {timeout} s")


@pytest.fixture(scope="module")
def store(control_plane: Any) -> Iterator[KubernetesTelemetryStore]:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    with control_plane.api_client() as api:
        ext = client.ApiextensionsV1Api(api)
        try:
            ext.create_custom_resource_definition(yaml.safe_load(CRD.read_text()))
        except ApiException as exc:
            if exc.status != 409:
                raise

        def established() -> bool:
            crd = ext.read_custom_resource_definition(f"{t.TELEMETRY_PLURAL}.{t.GROUP}")
            conditions = (crd.status.conditions if crd.status else None) or []
            return any(c.type == "Established" and c.status == "True" for c in conditions)

        _wait(established, 30, "CRD Established")
        custom = client.CustomObjectsApi(api)

        def served() -> bool:
            # Established can precede the REST endpoint by a moment: wait for a list to work.
            try:
                custom.list_cluster_custom_object(t.GROUP, t.VERSION, t.TELEMETRY_PLURAL)
            except ApiException:
                return False
            return True

        _wait(served, 30, "GPUTelemetry endpoint")
        yield KubernetesTelemetryStore(kubeconfig=str(control_plane.kubeconfig))
        # The control plane is shared by the session: leave no objects for other tests' informers.
        for name in NODES:
            try:
                custom.delete_cluster_custom_object(t.GROUP, t.VERSION, t.TELEMETRY_PLURAL, name)
            except ApiException as exc:
                if exc.status != 404:
                    raise


def _agent(sock: Path, pod_resources: FakePodResources | None = None, **kw: Any) -> Agent:
    cfg: dict[str, Any] = dict(node_name="e2e-gpu-node", plugin_dir=sock, metrics_port=-1,
                               crd_enabled=False, sample_interval_s=0.05, window_s=1,
                               horizon_s=10)
    cfg.update(kw)
    return Agent(PluginConfig(**cfg), FakeBackend(8), pod_resources=pod_resources).start()


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="dsan-e2e-", dir="/tmp"))  # short: unix socket paths
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_written_object_reads_back_identically(store: KubernetesTelemetryStore,
                                               sock_dir: Path) -> None:
    uuids = [d.uuid for d in FakeBackend(8).devices()]
    pods = FakePodResources(assignments=[
        DeviceAssignment("ml", "train-0", "worker", "nvidia.com/gpu", (uuids[1], uuids[2]))])
    agent = _agent(sock_dir, pods)
    try:
        time.sleep(0.4)  # a few samples, so windows are not empty
        written = agent.summary()
        assert written.statuses[0].series("util")
        # The pod attribution is part of the schema: the apiserver keeps it, prunes nothing.
        assert written.pod_attribution and written.statuses[2].pods
        store.apply(written.to_dict())
        raw = store.get("e2e-gpu-node")
        assert raw is not None and raw["kind"] == t.TELEMETRY_KIND
        back = tm.GPUTelemetry.from_dict(raw)
        assert back.to_dict() == written.to_dict()
        assert back.gpus[0].nvlink_peers == (1, 2, 3)
        rv = raw["metadata"]["resourceVersion"]

        time.sleep(0.05)
        again = agent.summary()
        store.apply(again.to_dict())
        raw2 = store.get("e2e-gpu-node")
        assert raw2 is not None and raw2["metadata"]["resourceVersion"] != rv
        assert tm.GPUTelemetry.from_dict(raw2).sampled_at == again.sampled_at.replace(
            microsecond=again.sampled_at.microsecond // 1000 * 1000)
    finally:
        agent.stop()


def test_schema_rejects_a_malformed_object(store: KubernetesTelemetryStore) -> None:
    from kubernetes.client.exceptions import ApiException

    obj = tm.GPUTelemetry(
        "e2e-bad-node", (tm.GPUInfo("GPU-x", 0, "T4", 15360),),
        (tm.GPUStatus("GPU-x", 0),), tm.parse_time("2026-01-01T00:00:00Z")).to_dict()
    obj["status"]["gpus"][0]["health"] = "Sick"
    with pytest.raises(ApiException) as err:
        store.apply(obj)
    assert err.value.status == 422 and "health" in str(err.value.body)
    assert store.get("e2e-bad-node") is None


def test_agent_keeps_the_object_current_and_survives_an_apiserver_restart(
    control_plane: Any, store: KubernetesTelemetryStore, sock_dir: Path
) -> None:
    backend = FakeBackend(8)
    cfg = PluginConfig(node_name="e2e-agent-node", plugin_dir=sock_dir, metrics_port=-1,
                       crd_interval_s=0.3, crd_backoff_max_s=1.0, recovery_quiet_s=60,
                       kubeconfig=str(control_plane.kubeconfig))
    agent = Agent(cfg, backend).start()
    try:
        assert agent.writer is not None
        first = _wait(lambda: store.get("e2e-agent-node"), 15, "agent's GPUTelemetry")
        assert len(first["status"]["gpus"]) == 8
        backend.inject_xid(2, 79)

        def unhealthy() -> bool:
            obj = store.get("e2e-agent-node")
            return obj is not None and obj["status"]["gpus"][2]["health"] == tm.UNHEALTHY

        _wait(unhealthy, 5, "GPU 2 Unhealthy in the CR")

        control_plane.restart_apiserver(down_s=0.5)
        writes = agent.writer.writes
        _wait(lambda: agent.writer is not None and agent.writer.writes > writes + 1, 20,
              "writes after the restart")
        assert agent.writer.failures == 0
        stamp = tm.GPUTelemetry.from_dict(store.get("e2e-agent-node")).sampled_at
        assert (time.time() - stamp.timestamp()) < 5
    finally:
        agent.stop()


def test_command_line_agent_writes_its_node_object(control_plane: Any,
                                                   store: KubernetesTelemetryStore,
                                                   sock_dir: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "deviceplugin", "--backend", "fake", "--fake-gpus", "2",
         "--fake-model", "T4", "--plugin-dir", str(sock_dir), "--metrics-port", "-1",
         "--kubeconfig", str(control_plane.kubeconfig), "--node-name", "e2e-cli-node",
         "--crd-interval", "0.5", "--run-for", "60"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        obj = _wait(lambda: store.get("e2e-cli-node"), 30, "the CLI agent's GPUTelemetry")
        parsed = tm.GPUTelemetry.from_dict(obj)
        assert [g.model for g in parsed.gpus] == ["T4", "T4"] and parsed.available
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0, out
