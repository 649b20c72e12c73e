"""Fixtures shared by the chart and image tests (machinery in tests/support/helm.py)."""

from __future__ import annotations

import contextlib
import ssl
from typing import Any

import httpx
import pytest
import yaml

from tests.support.crds import prometheus_operator_crd
from tests.support.helm import ChartTools, Helm
from tests.support.procs import wait_until


@pytest.fixture(scope="session")
def chart_tools() -> ChartTools:
    return ChartTools.resolve()


@pytest.fixture(scope="session")
def helm(chart_tools: ChartTools, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm(chart_tools.helm, tmp_path_factory.mktemp("helm-home"))


@pytest.fixture(scope="session")
def servicemonitor_crd(control_plane: Any) -> None:
    """prometheus-operator's ServiceMonitor CRD in the session's cluster (from the Go module
    cache, tests/support/crds.py), for the chart's optional ServiceMonitor."""
    from kubernetes import client

    crd = prometheus_operator_crd("servicemonitors")
    with control_plane.api_client() as api:
        ext: Any = client.ApiextensionsV1Api(api)
        with contextlib.suppress(client.exceptions.ApiException):
            ext.create_custom_resource_definition(crd)

        def established() -> bool:
            got = ext.read_custom_resource_definition(crd["metadata"]["name"])
            return any(c.type == "Established" and c.status == "True"
                       for c in got.status.conditions or [])

        wait_until("the ServiceMonitor CRD established", established, 30)


@pytest.fixture(scope="session")
def apiserver_openapi(control_plane: Any, servicemonitor_crd: None) -> dict[str, Any]:
    """The session apiserver's /openapi/v2, once it serves the CRDs the chart renders objects
    of (it publishes a new CRD's schema a moment after the CRD is established)."""
    token = yaml.safe_load(control_plane.kubeconfig.read_text())["users"][0]["user"]["token"]
    doc: dict[str, Any] = {}

    def fetch() -> bool:
        nonlocal doc
        r = httpx.get(f"{control_plane.server}/openapi/v2", timeout=60,
                      headers={"Authorization": f"Bearer {token}"},
                      verify=ssl.create_default_context(cafile=str(control_plane.pki.ca_cert)))
        r.raise_for_status()
        doc = r.json()
        return "com.coreos.monitoring.v1.ServiceMonitor" in doc["definitions"]

    wait_until("the ServiceMonitor schema in /openapi/v2", fetch, 60, interval=1.0)
    return doc
