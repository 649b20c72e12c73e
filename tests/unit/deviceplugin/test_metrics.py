"""The collector renders dcgm-exporter names, labels and TYPEs from the latest sample."""

from __future__ import annotations

import re

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from deviceplugin.attribution import PodAttribution
from deviceplugin.backend import EventKind, GPUEvent
from deviceplugin.config import PluginConfig
from deviceplugin.fake import FakeBackend
from deviceplugin.metrics import DCGM_FIELDS, LABELS, POD_LABELS, Family, GPUCollector, render
from deviceplugin.podresources import DeviceAssignment, FakePodResources
from deviceplugin.resources import ResourceManager
from deviceplugin.sampler import TelemetrySampler

#: dcgm-exporter's TYPEs for the fields we export, transcribed from NVIDIA/dcgm-exporter
#: etc/default-counters.csv ("DCGM FIELD, Prometheus metric type, help message"; the ECC line
#: is commented out there but typed counter). A counter exported as a gauge (or renamed with
#: _total) breaks rate() queries and dashboards written for dcgm-exporter.
DCGM_EXPORTER_TYPES = {
    "DCGM_FI_DEV_SM_CLOCK": "gauge",
    "DCGM_FI_DEV_GPU_TEMP": "gauge",
    "DCGM_FI_DEV_POWER_USAGE": "gauge",
    "DCGM_FI_DEV_PCIE_TX_THROUGHPUT": "counter",
    "DCGM_FI_DEV_PCIE_RX_THROUGHPUT": "counter",
    "DCGM_FI_DEV_GPU_UTIL": "gauge",
    "DCGM_FI_DEV_XID_ERRORS": "gauge",
    "DCGM_FI_DEV_FB_FREE": "gauge",
    "DCGM_FI_DEV_FB_USED": "gauge",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "counter",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": "counter",
}


def _scrape(collector: GPUCollector) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Series by the name on the wire (client_python's parser adds _total to every counter
    sample; dcgm-exporter's counters have none)."""
    text = collector.render().decode()
    wire = set(re.findall(r"^([A-Za-z_:][\w:]*)[{ ]", text, flags=re.M))
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            name = s.name if s.name in wire else s.name.removesuffix("_total")
            out.setdefault(name, []).append((s.labels, s.value))
    return out


def _types(text: str) -> dict[str, str]:
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, flags=re.M))


def _setup(n: int = 2, **kw: object) -> tuple[FakeBackend, ResourceManager, TelemetrySampler]:
    b = FakeBackend(n, topology="none", **kw)  # type: ignore[arg-type]
    m = ResourceManager(b.devices(), [0] * n, PluginConfig(node_name="n"))
    return b, m, TelemetrySampler(b, n)


def test_dcgm_names_labels_and_values() -> None:
    b, m, s = _setup(util_curve=lambda t: np.array([30.0, 70.0]))
    devs = b.devices()
    s.sample_once()
    m.apply_events([GPUEvent(1, EventKind.XID, 79)])
    got = _scrape(GPUCollector(s, m, "host-a", available=True))
    assert set(DCGM_FIELDS) - {"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"} <= set(got)
    # No NVLink on these GPUs: the series is absent rather than a misleading 0.
    assert "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL" not in got
    util = {lbl["gpu"]: v for lbl, v in got["DCGM_FI_DEV_GPU_UTIL"]}
    assert util == {"0": 30.0, "1": 70.0}
    lbl = got["DCGM_FI_DEV_GPU_UTIL"][0][0]
    # Empty label values are how Prometheus spells "absent": the parser drops nothing here.
    assert set(lbl) == set(LABELS) | set(POD_LABELS)
    assert lbl["Hostname"] == "host-a" and lbl["UUID"] == devs[0].uuid and lbl["pod"] == ""
    assert {lb["gpu"]: v for lb, v in got["DCGM_FI_DEV_XID_ERRORS"]} == {"0": 0.0, "1": 79.0}
    assert {lb["gpu"]: v for lb, v in got["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"]} == {"0": 0.0,
                                                                                "1": 0.0}
    assert {lb["gpu"]: v for lb, v in got["dsan_gpu_healthy"]} == {"0": 1.0, "1": 0.0}
    assert got["dsan_deviceplugin_samples_total"][0][1] == 1.0
    assert got["dsan_deviceplugin_telemetry_available"][0][1] == 1.0
    assert got["dsan_deviceplugin_pod_attribution_available"][0] == ({"reason": "disabled"}, 0.0)


def test_every_dcgm_series_has_dcgm_exporters_type_and_name() -> None:
    b = FakeBackend(4, topology="two-quads")  # with NVLink: every field has a series
    m = ResourceManager(b.devices(), [0] * 4, PluginConfig(node_name="n"))
    s = TelemetrySampler(b, 4)
    s.sample_once()
    text = GPUCollector(s, m, "h", available=True).render().decode()
    types = _types(text)
    exported = {k: v for k, v in types.items() if k.startswith("DCGM_")}
    assert exported.keys() == DCGM_EXPORTER_TYPES.keys()
    for name, typ in exported.items():
        assert typ == DCGM_EXPORTER_TYPES[name], name
        # dcgm-exporter's counters carry no _total: the samples are named as the family.
        assert re.search(rf"^{name}{{", text, flags=re.M), name
    assert "_THROUGHPUT_total" not in text
    # Our own counters follow Prometheus's convention instead.
    assert types["dsan_deviceplugin_samples_total"] == "counter"
    assert types["dsan_gpu_xid_errors_total"] == "counter"


def test_pcie_counters_integrate_the_sampled_rates_and_never_go_down(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    _, m, s = _setup(2)
    clock = iter([100.0, 102.0, 105.0])
    monkeypatch.setattr("deviceplugin.sampler.time.monotonic", lambda: next(clock))
    rows = []
    for _ in range(3):
        s.sample_once()
        latest = s.latest()
        assert latest is not None
        rows.append(latest[1])
    tx = {lb["gpu"]: v for lb, v in _scrape(GPUCollector(s, m, "h", True))[
        "DCGM_FI_DEV_PCIE_TX_THROUGHPUT"]}
    col = 6  # pcieTxKBps
    expected = [rows[1][g, col] * 2.0 + rows[2][g, col] * 3.0 for g in range(2)]
    assert [tx["0"], tx["1"]] == pytest.approx(expected)
    assert min(expected) > 0


def test_pod_labels_and_info_from_the_attribution() -> None:
    b, m, s = _setup(3)
    devs = b.devices()
    s.sample_once()
    pr = FakePodResources(
        assignments=[DeviceAssignment("ml", "train-0", "worker", "nvidia.com/gpu",
                                      (devs[1].uuid,)),
                     DeviceAssignment("web", "a", "c", "nvidia.com/gpu", (f"{devs[2].uuid}::0",)),
                     DeviceAssignment("web", "b", "c", "nvidia.com/gpu", (f"{devs[2].uuid}::1",))],
        allocatable_ids={"nvidia.com/gpu": (devs[1].uuid, devs[2].uuid)})
    attr = PodAttribution(pr, devs, "nvidia.com/gpu")
    assert attr.refresh_once()
    got = _scrape(GPUCollector(s, m, "h", True, attribution=attr))
    util = {lb["gpu"]: (lb["namespace"], lb["pod"], lb["container"])
            for lb, _ in got["DCGM_FI_DEV_GPU_UTIL"]}
    assert util == {"0": ("", "", ""), "1": ("ml", "train-0", "worker"), "2": ("web", "a", "c")}
    info = sorted((lb["gpu"], lb["pod"]) for lb, _ in got["dsan_gpu_pod_info"])
    assert info == [("1", "train-0"), ("2", "a"), ("2", "b")]
    assert {lb["gpu"]: v for lb, v in got["dsan_gpu_kubelet_allocatable"]} == {
        "0": 0.0, "1": 1.0, "2": 1.0}
    assert got["dsan_deviceplugin_pod_attribution_available"][0] == ({"reason": ""}, 1.0)
    pr.fail = "socket-absent"
    assert not attr.refresh_once()
    got = _scrape(GPUCollector(s, m, "h", True, attribution=attr))
    assert got["dsan_deviceplugin_pod_attribution_available"][0] == (
        {"reason": "socket-absent"}, 0.0)
    assert {lb["pod"] for lb, _ in got["DCGM_FI_DEV_GPU_UTIL"]} == {""}  # no stale claims
    assert "dsan_gpu_pod_info" not in got


def test_degraded_collector_exports_only_availability() -> None:
    got = _scrape(GPUCollector(None, None, "h", available=False, reason="no driver"))
    assert list(got) == ["dsan_deviceplugin_telemetry_available",
                         "dsan_deviceplugin_pod_attribution_available"]
    assert got["dsan_deviceplugin_telemetry_available"][0] == ({"reason": "no driver"}, 0.0)


def test_render_escapes_label_values_and_help() -> None:
    f = Family("x", 'help with \\ and\nnewline', "gauge")
    f.add((("a", 'q"uote\\back\nnl'),), 1.5)
    f.add((), float("nan"))
    text = render([f]).decode()
    assert text.splitlines()[0] == "# HELP x help with \\\\ and\\nnewline"
    (parsed,) = text_string_to_metric_families(text)
    assert parsed.samples[0].labels == {"a": 'q"uote\\back\nnl'} and parsed.samples[0].value == 1.5
