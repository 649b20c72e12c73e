"""/metrics scraped by the real Prometheus server and queried back through its HTTP API."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from deviceplugin.agent import Agent
from deviceplugin.config import PluginConfig
from deviceplugin.fake import FakeBackend
from tests.support.prometheus import PrometheusServer, require_prometheus

pytestmark = pytest.mark.integration


def test_dcgm_series_reach_prometheus(sock_dir: Path, tmp_path: Path) -> None:
    require_prometheus()
    util = np.array([5.0, 15.0, 25.0, 35.0, 45.0, 55.0, 65.0, 75.0])
    backend = FakeBackend(8, model="H100-SXM5-80GB", util_curve=lambda t: util)
    cfg = PluginConfig(node_name="prom-node", plugin_dir=sock_dir, metrics_port=0,
                       crd_enabled=False, sample_interval_s=0.2, recovery_quiet_s=600)
    agent = Agent(cfg, backend).start()
    try:
        assert agent.metrics is not None and agent.manager is not None
        uuid3 = agent.manager.infos[3].uuid
        target = f"127.0.0.1:{agent.metrics.port}"
        with PrometheusServer.start([target], tmp_path / "prom", scrape_interval="1s") as prom:
            prom.wait_for_targets_up()
            series = prom.wait_for('DCGM_FI_DEV_GPU_UTIL{gpu="3"}')
            labels = series[0]["metric"]
            assert labels["UUID"] == uuid3 and labels["modelName"] == "H100-SXM5-80GB"
            assert labels["Hostname"] == "prom-node" and labels["device"] == "nvidia3"
            assert labels["pci_bus_id"] == "00000000:13:00.0"
            assert float(series[0]["value"][1]) == 35.0
            assert len(prom.query("DCGM_FI_DEV_GPU_UTIL")) == 8
            # FB_USED + FB_FREE is the card's memory on every GPU.
            total = prom.query("DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE")
            assert {float(r["value"][1]) for r in total} == {81920.0}
            for name in ("POWER_USAGE", "GPU_TEMP", "SM_CLOCK", "PCIE_TX_THROUGHPUT",
                         "PCIE_RX_THROUGHPUT", "NVLINK_BANDWIDTH_TOTAL"):
                assert len(prom.query(f"DCGM_FI_DEV_{name}")) == 8, name
            assert prom.wait_for_value("dsan_deviceplugin_telemetry_available") == 1.0
            # Prometheus reads dcgm-exporter's counters as counters, under dcgm's names: rate()
            # of the PCIe total is the fake's 2e5 KB/s x load, and it only grows.
            meta = prom.metadata("DCGM_FI_DEV_PCIE_TX_THROUGHPUT")
            assert {m["type"] for m in meta} == {"counter"}
            assert {m["type"] for m in prom.metadata("DCGM_FI_DEV_GPU_UTIL")} == {"gauge"}
            prom.wait_for('rate(DCGM_FI_DEV_PCIE_TX_THROUGHPUT{gpu="3"}[5s]) > 0', timeout_s=15)
            assert prom.query("resets(DCGM_FI_DEV_PCIE_RX_THROUGHPUT[1m]) > 0") == []

            backend.inject_xid(6, 79)
            xid = prom.wait_for('DCGM_FI_DEV_XID_ERRORS{gpu="6"} == 79', timeout_s=15)
            assert xid[0]["metric"]["UUID"] == agent.manager.infos[6].uuid
            assert prom.wait_for_value('dsan_gpu_healthy{gpu="6"} == 0', timeout_s=15) == 0.0
            assert prom.query('DCGM_FI_DEV_XID_ERRORS{gpu="5"}')[0]["value"][1] == "0"
    finally:
        agent.stop()


def test_degraded_agent_exports_unavailable(sock_dir: Path, tmp_path: Path) -> None:
    require_prometheus()
    cfg = PluginConfig(node_name="no-gpu", plugin_dir=sock_dir, metrics_port=0,
                       crd_enabled=False)
    agent = Agent(cfg, FakeBackend(4, unavailable=True)).start()
    try:
        assert agent.metrics is not None
        with PrometheusServer.start([f"127.0.0.1:{agent.metrics.port}"], tmp_path / "prom") as prom:
            r = prom.wait_for("dsan_deviceplugin_telemetry_available == 0")
            assert "unavailable" in r[0]["metric"]["reason"]
            assert prom.query("DCGM_FI_DEV_GPU_UTIL") == []
    finally:
        agent.stop()
