"""The collector renders dcgm-exporter names and labels from the latest sample."""

from __future__ import annotations

import numpy as np
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from deviceplugin.backend import EventKind, GPUEvent
from deviceplugin.config import PluginConfig
from deviceplugin.fake import FakeBackend
from deviceplugin.metrics import DCGM_FIELDS, LABELS, GPUCollector
from deviceplugin.resources import ResourceManager
from deviceplugin.sampler import TelemetrySampler


def _scrape(collector: GPUCollector) -> dict[str, list[tuple[dict[str, str], float]]]:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(generate_latest(reg).decode()):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def test_dcgm_names_labels_and_values() -> None:
    b = FakeBackend(2, topology="none", util_curve=lambda t: np.array([30.0, 70.0]))
    devs = b.devices()
    m = ResourceManager(devs, [0, 0], PluginConfig(node_name="n"))
    s = TelemetrySampler(b, 2)
    s.sample_once()
    m.apply_events([GPUEvent(1, EventKind.XID, 79)])
    got = _scrape(GPUCollector(s, m, "host-a", available=True))
    assert set(DCGM_FIELDS) - {"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"} <= set(got)
    # No NVLink on these GPUs: the series is absent rather than a misleading 0.
    assert "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL" not in got
    util = {lbl["gpu"]: v for lbl, v in got["DCGM_FI_DEV_GPU_UTIL"]}
    assert util == {"0": 30.0, "1": 70.0}
    lbl = got["DCGM_FI_DEV_GPU_UTIL"][0][0]
    assert tuple(sorted(lbl)) == tuple(sorted(LABELS))
    assert lbl["Hostname"] == "host-a" and lbl["UUID"] == devs[0].uuid
    assert {lb["gpu"]: v for lb, v in got["DCGM_FI_DEV_XID_ERRORS"]} == {"0": 0.0, "1": 79.0}
    assert {lb["gpu"]: v for lb, v in got["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"]} == {"0": 0.0,
                                                                                "1": 0.0}
    assert {lb["gpu"]: v for lb, v in got["dsan_gpu_healthy"]} == {"0": 1.0, "1": 0.0}
    assert got["dsan_deviceplugin_samples_total"][0][1] == 1.0
    assert got["dsan_deviceplugin_telemetry_available"][0][1] == 1.0


def test_degraded_collector_exports_only_availability() -> None:
    got = _scrape(GPUCollector(None, None, "h", available=False, reason="no driver"))
    assert list(got) == ["dsan_deviceplugin_telemetry_available"]
    assert got["dsan_deviceplugin_telemetry_available"][0] == ({"reason": "no driver"}, 0.0)
