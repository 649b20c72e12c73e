"""The Helm chart for real. The real `helm` CLI (built by hack/helm-build.sh) lints and renders
charts/dsan-scheduler with its default values, with an override of every value and with the
production-shaped values (gRPC scoring, a CPU of its own, a ServiceMonitor, a dashboard);
kubeconform checks every rendered object against the schemas of the apiserver it installs
into; the values schema refuses what the config dataclasses would; every pod is non-root,
read-only, capability-free and probed without starting an interpreter; `helm install`,
`upgrade` and `uninstall` run against the real kube-apiserver; the rendered sidecar config
file and device-plugin flags parse with the components' own parsers into exactly the values
given; and each workload's containers run outside a kubelet exactly as rendered, with their
ServiceAccount's token: the scheduler pod (sidecar + kube-scheduler, rendered probes included)
schedules an opted-in pod, and the device plugin writes its node's GPUTelemetry. RBAC and the
admission policy: tests/e2e/test_chart_rbac.py. See docs/helm.md."""

from __future__ import annotations

import contextlib
import dataclasses
import re
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
import yaml

from deviceplugin import cli as dp_cli
from deviceplugin.config import PluginConfig
from dsan.api.telemetry import GPUTelemetry
from dsan.cli import build_parser
from sidecar import cli as sc_cli
from sidecar.config import SidecarConfig
from tests.support.helm import CHART, ChartTools, Helm, Rendered, deep_merge
from tests.support.helm import service_account_token as sa_token
from tests.support.kubeschemas import LOCATION, write_schemas
from tests.support.pki import write_kubeconfig
from tests.support.procs import Proc, free_port, wait_until

pytestmark = pytest.mark.e2e

#: Every value changed from its default where the chart renders it, so a key that the chart
#: drops, misspells or hard-codes shows up as a mismatch below.
OVERRIDE: dict[str, Any] = {
    "global": {"imageRegistry": "registry.example:5000/dsan"},
    "imagePullSecrets": [{"name": "registry-login"}],
    "scheduler": {
        "image": {"registry": "registry.k8s.io", "repository": "kube-scheduler",
                  "tag": "v1.36.3", "pullPolicy": "Always"},
        "schedulerName": "dsan-chart-override",
        "leaseName": "dsan-chart-override",
        "replicas": 1,  # no PDB with one replica
        "qps": 200,
        "burst": 400,
        "verbosity": 3,
        "extender": {
            "weight": 3,
            "httpTimeout": "250ms",
            "ignorable": False,
            "filter": True,
            "managedResources": [{"name": "nvidia.com/gpu", "ignoredByScheduler": False}],
        },
        "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
        "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists",
                         "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}]}}},
        "podAnnotations": {"example.com/team": "platform"},
    },
    "sidecar": {
        "image": {"repository": "sidecar-x", "tag": "t1", "pullPolicy": "Never"},
        "config": {
            "http_port": 9999,
            "grpc_port": -1,  # gRPC off: must not become a containerPort
            "metrics_port": 9555,
            "scheduler_name": "dsan-chart-override",
            "url_prefix": "/score",
            "policy": "fgd",
            "fallback_policy": "tetris",
            "telemetry_window": 8,
            "telemetry_stale_s": 30.5,
            "assume_max": 1_000_000,
            "max_body_bytes": 16_777_216,
            "watch_telemetry": False,
            "strict_node_names": True,
            "log_level": "DEBUG",
        },
    },
    "devicePlugin": {
        "image": {"repository": "dp-x", "tag": "t2"},
        "nodeSelector": {"example.com/gpu": "yes"},
        "tolerations": [{"key": "example.com/gpu", "operator": "Exists"}],
        "restrictToOwnNode": False,
        "config": {
            "resource_name": "example.com/gpu",
            "plugin_dir": "/var/lib/kubelet/dp",
            "endpoint": "dsan-test.sock",
            "backend": "fake",
            "fail_on_init_error": True,
            "fake_gpus": 4,
            "fake_model": "H100-SXM5-80GB",
            "fake_topology": "nvswitch",
            "allocate_modes": ["envvar", "cdi"],
            "cdi_kind": "example.com/gpu",
            "pre_start_required": True,
            "health_enabled": False,
            "ignored_xids": [13, 79],
            "recovery_quiet_s": 12.5,
            "sample_interval_s": 0.5,
            "window_s": 20,
            "horizon_s": 600,
            "metrics_addr": "127.0.0.1",
            "metrics_port": -1,  # no /metrics: no containerPort, no metrics Service
            "crd_enabled": False,
            "crd_interval_s": 2.5,
            "crd_backoff_max_s": 45,  # a YAML int for a float field
            "register_backoff_max_s": 12.0,
            "health_poll_s": 0.75,
            "socket_check_s": 1.25,
            "mode": "device-plugin",
            "max_watch_streams": 2,
            "pod_attribution": False,
            "pod_resources_socket": "/run/pr/kubelet.sock",
            "pod_resources_interval_s": 2.5,
        },
    },
    "metrics": {"service": {"annotations": {"example.com/scrape": "yes"}}},
}

#: Production-shaped: gRPC scoring with the quota, the sidecar on a CPU of its own (a
#: Guaranteed pod), three replicas behind a PDB, prometheus-operator's ServiceMonitor and the
#: Grafana dashboard.
PRODUCTION: dict[str, Any] = {
    "scheduler": {"scoreVia": "grpc", "replicas": 3,
                  "podDisruptionBudget": {"maxUnavailable": 2},
                  "extender": {"weight": 7, "httpTimeout": "80ms", "filter": True},
                  "resources": {"requests": {"cpu": "1500m", "memory": "256Mi"}}},
    "sidecar": {"exclusiveCpus": 1},
    "metrics": {"serviceMonitor": {"enabled": True, "interval": "15s",
                                   "labels": {"release": "kube-prometheus-stack"}},
                "dashboard": {"enabled": True}},
}
VARIANTS = {"default": {}, "override": OVERRIDE, "production": PRODUCTION}


@pytest.fixture(scope="module", params=list(VARIANTS))
def rendered(
    request: pytest.FixtureRequest, helm: Helm, tmp_path_factory: pytest.TempPathFactory
) -> Rendered:
    release = f"chart-{request.param}"
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    values_file = None
    args = ["--namespace", f"dsan-{release}", "--include-crds"]
    if request.param != "default":
        over = VARIANTS[request.param]
        values_file = tmp_path_factory.mktemp("values") / f"{request.param}.yaml"
        values_file.write_text(yaml.safe_dump(over))
        values = deep_merge(values, over)
        args += ["--values", str(values_file)]
    return Rendered(release, f"dsan-{release}", values, values_file,
                    helm.template(release, *args))


def test_helm_lint_passes_strict(helm: Helm, rendered: Rendered) -> None:
    extra = ["--values", str(rendered.values_file)] if rendered.values_file else []
    out = helm("lint", "--strict", str(CHART), *extra)
    assert "0 chart(s) failed" in out, out


def test_render_holds_every_component(rendered: Rendered) -> None:
    v = rendered.values
    dp_metrics = v["devicePlugin"]["config"]["metrics_port"] > 0
    expected = (["CustomResourceDefinition", "ConfigMap", "Deployment", "DaemonSet"]
                + ["ServiceAccount"] * 2 + ["ClusterRole"] * 2 + ["ClusterRoleBinding"] * 2
                + ["Role"] + ["RoleBinding"] * 2 + ["Service"] * (1 + dp_metrics)
                # the scheduler may patch only the dsan.io/scored-by annotation of a pod
                + ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"])
    if v["scheduler"]["replicas"] > 1:
        expected.append("PodDisruptionBudget")
    if v["devicePlugin"]["restrictToOwnNode"]:
        expected += ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    if v["metrics"]["serviceMonitor"]["enabled"]:
        expected.append("ServiceMonitor")
    if v["metrics"]["dashboard"]["enabled"]:
        expected.append("ConfigMap")
    assert sorted(d["kind"] for d in rendered.docs) == sorted(expected)
    cluster_scoped = {"CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
                      "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    for d in rendered.docs:
        if d["kind"] in cluster_scoped:
            assert "namespace" not in d["metadata"], d["metadata"]
        elif d["metadata"]["name"].endswith("-auth-reader"):
            # The scheduler's auth-reader binding must sit beside its Role in kube-system.
            assert d["metadata"]["namespace"] == "kube-system"
        else:
            assert d["metadata"].get("namespace") == rendered.namespace, d["metadata"]


def test_every_object_passes_kubeconform_against_the_apiserver_schemas(
    rendered: Rendered, chart_tools: ChartTools, apiserver_openapi: dict[str, Any],
    tmp_path: Path,
) -> None:
    """Strict: an unknown field anywhere (a typo in a template) is an error, as is a kind
    the apiserver does not serve."""
    kinds = {(d["apiVersion"], d["kind"]) for d in rendered.docs}
    write_schemas(apiserver_openapi, tmp_path / "schemas", kinds)
    manifest = tmp_path / "rendered.yaml"
    manifest.write_text(yaml.safe_dump_all(rendered.docs))
    proc = subprocess.run(
        [str(chart_tools.kubeconform), "-strict", "-summary",
         "-schema-location", f"{tmp_path / 'schemas'}/{LOCATION}", str(manifest)],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"Valid: {len(rendered.docs)}, Invalid: 0, Errors: 0, Skipped: 0" in proc.stdout


def test_images_come_from_the_values(rendered: Rendered) -> None:
    v = rendered.values
    reg = v["global"]["imageRegistry"]

    def ref(img: dict[str, Any]) -> str:
        r = img["registry"] or reg
        return (f"{r}/" if r else "") + f"{img['repository']}:{img['tag'] or '0.1.0'}"

    assert rendered.container("Deployment", "kube-scheduler")["image"] == \
        ref(v["scheduler"]["image"])
    assert rendered.container("Deployment", "sidecar")["image"] == ref(v["sidecar"]["image"])
    assert rendered.container("DaemonSet", "deviceplugin")["image"] == \
        ref(v["devicePlugin"]["image"])
    for kind in ("Deployment", "DaemonSet"):
        assert rendered.pod_spec(kind).get("imagePullSecrets", []) == v["imagePullSecrets"]
    assert rendered.container("Deployment", "sidecar")["imagePullPolicy"] == \
        v["sidecar"]["image"]["pullPolicy"]


def test_every_container_runs_non_root_read_only_without_capabilities(
    rendered: Rendered,
) -> None:
    """The scheduler pod runs as 65532 with nothing writable but an emptyDir /tmp; the device
    plugin is the documented exception (root, for the kubelet's root-owned sockets), with the
    same read-only root filesystem, no capabilities and no privilege escalation."""
    for kind in ("Deployment", "DaemonSet"):
        spec = rendered.pod_spec(kind)
        pod = spec["securityContext"]
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
        if kind == "Deployment":
            assert pod["runAsNonRoot"] is True and pod["runAsUser"] == 65532
        else:
            assert pod["runAsUser"] == 0 and "runAsNonRoot" not in pod
        assert not any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC"))
        for c in rendered.containers(kind):
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True, c["name"]
            assert sc["allowPrivilegeEscalation"] is False, c["name"]
            assert sc["capabilities"] == {"drop": ["ALL"]}, c["name"]
            assert not sc.get("privileged"), c["name"]
    tmp = {m["mountPath"]: m["name"] for m in
           rendered.container("Deployment", "sidecar")["volumeMounts"]}
    vols = {v["name"]: v for v in rendered.pod_spec("Deployment")["volumes"]}
    assert "emptyDir" in vols[tmp["/tmp"]]


def test_probes_are_the_kubelets_own_http_gets(rendered: Rendered) -> None:
    """No probe starts a process in a container (an exec probe of the sidecar would start a
    Python interpreter every few seconds); the sidecar's go to its metrics listener."""
    metrics = rendered.values["sidecar"]["config"]["metrics_port"]
    for kind in ("Deployment", "DaemonSet"):
        for c in rendered.containers(kind):
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                if probe in c:
                    assert "exec" not in c[probe], (c["name"], probe)
    sidecar = rendered.container("Deployment", "sidecar")
    ports = {p["name"]: p["containerPort"] for p in sidecar["ports"]}
    assert ports["metrics"] == metrics
    assert sidecar["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    # A native sidecar whose startup probe waits for the informers: the kubelet starts
    # kube-scheduler after it, so no pod is scored before the sidecar can.
    spec = rendered.pod_spec("Deployment")
    assert [c["name"] for c in spec["initContainers"]] == ["sidecar"]
    assert sidecar["restartPolicy"] == "Always"
    assert sidecar["startupProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert [c["name"] for c in spec["containers"]] == ["kube-scheduler"]
    assert sidecar["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    ks = rendered.container("Deployment", "kube-scheduler")
    assert ks["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"


def test_scheduler_pods_spread_over_nodes_and_survive_drains(rendered: Rendered) -> None:
    v = rendered.values["scheduler"]
    spec = rendered.pod_spec("Deployment")
    if v["affinity"]:
        assert spec["affinity"] == v["affinity"]
    else:
        (term,) = spec["affinity"]["podAntiAffinity"][
            "preferredDuringSchedulingIgnoredDuringExecution"]
        assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
        assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == \
            rendered.one("Deployment")["spec"]["selector"]["matchLabels"]
    assert spec.get("nodeSelector", {}) == v["nodeSelector"]
    assert spec.get("tolerations", []) == v["tolerations"]
    pdbs = rendered.all("PodDisruptionBudget")
    if v["replicas"] > 1 and v["podDisruptionBudget"]["enabled"]:
        (pdb,) = pdbs
        assert pdb["spec"]["maxUnavailable"] == v["podDisruptionBudget"]["maxUnavailable"]
        assert pdb["spec"]["selector"] == rendered.one("Deployment")["spec"]["selector"]
    else:
        assert not pdbs


def test_metrics_services_and_monitor_select_the_metrics_ports(rendered: Rendered) -> None:
    """Only the metrics listener is in a Service: never the extender or gRPC ports."""
    v = rendered.values
    for svc in rendered.all("Service"):
        (port,) = svc["spec"]["ports"]
        assert port["name"] == "metrics" and svc["spec"]["clusterIP"] == "None"
        component = svc["spec"]["selector"]["app.kubernetes.io/component"]
        kind = "Deployment" if component == "scheduler" else "DaemonSet"
        labels = rendered.one(kind)["spec"]["template"]["metadata"]["labels"]
        assert all(labels[k] == val for k, val in svc["spec"]["selector"].items())
        assert svc["metadata"].get("annotations", {}) == v["metrics"]["service"]["annotations"]
        if component == "scheduler":
            assert port["port"] == v["sidecar"]["config"]["metrics_port"]
    if v["metrics"]["serviceMonitor"]["enabled"]:
        sm = rendered.one("ServiceMonitor")
        (ep,) = sm["spec"]["endpoints"]
        assert ep["port"] == "metrics" and ep["interval"] == \
            v["metrics"]["serviceMonitor"]["interval"]
        for svc in rendered.all("Service"):
            assert all(svc["metadata"]["labels"].get(k) == val
                       for k, val in sm["spec"]["selector"]["matchLabels"].items())
        for k, val in v["metrics"]["serviceMonitor"]["labels"].items():
            assert sm["metadata"]["labels"][k] == val
    if v["metrics"]["dashboard"]["enabled"]:
        dash = rendered.one("ConfigMap", "-dashboard")
        assert dash["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert dash["data"]["dsan.json"] == (CHART / "dashboards" / "dsan.json").read_text()


def test_sidecar_config_file_and_command_parse_into_the_values(
    rendered: Rendered, tmp_path: Path
) -> None:
    cm = rendered.one("ConfigMap", "-config")
    expected = SidecarConfig.from_mapping(rendered.values["sidecar"]["config"])
    assert SidecarConfig.from_mapping(yaml.safe_load(cm["data"]["sidecar.yaml"])) == expected
    # The container's own command line, through `dsan serve`'s parser, with the mounted file.
    (tmp_path / "sidecar.yaml").write_text(cm["data"]["sidecar.yaml"])
    command = rendered.container("Deployment", "sidecar")["command"]
    assert command[0] == "dsan"
    argv = [a.replace("/etc/dsan/", f"{tmp_path}/") for a in command[1:]]
    args = build_parser(argv).parse_args(argv)
    assert args.func is sc_cli.run
    assert sc_cli.config_from_args(args) == expected
    if "sidecar" in VARIANTS[rendered.release.removeprefix("chart-")]:
        assert expected != SidecarConfig()  # the override really reached the file


def test_deviceplugin_flags_parse_into_the_values(
    rendered: Rendered, monkeypatch: pytest.MonkeyPatch
) -> None:
    container = rendered.container("DaemonSet", "deviceplugin")
    env = {e["name"]: e for e in container.get("env", [])}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    monkeypatch.setenv("NODE_NAME", "gpu-node-7")  # what the downward API gives the pod
    command = container["command"]
    assert command[0] == "dsan"
    args = build_parser(command[1:]).parse_args(command[1:])
    assert args.func is dp_cli.run
    got = dp_cli.config_from_args(args)
    base = PluginConfig(node_name="gpu-node-7")
    given: dict[str, Any] = {}
    for f in fields(PluginConfig):
        if f.name in rendered.values["devicePlugin"]["config"]:
            value = rendered.values["devicePlugin"]["config"][f.name]
            default = getattr(base, f.name)
            if isinstance(default, (tuple, frozenset, Path, float)):
                value = type(default)(value)  # YAML lists/strings/ints -> the field's type
            given[f.name] = value
    assert got == dataclasses.replace(base, **given)
    mounts = {m["name"]: m for m in container.get("volumeMounts") or []}
    # The device-plugins dir only when it registers; the PodResources socket's dir read-only.
    if got.mode == "device-plugin":
        assert Path(mounts["device-plugins"]["mountPath"]) == got.plugin_dir
    else:
        assert "device-plugins" not in mounts
    if got.pod_attribution:
        assert Path(mounts["pod-resources"]["mountPath"]) == got.pod_resources_socket.parent
        assert mounts["pod-resources"]["readOnly"] is True
    else:
        assert "pod-resources" not in mounts
    if got.metrics_port > 0:
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"


def test_scheduler_config_carries_the_values(rendered: Rendered) -> None:
    cfg = yaml.safe_load(rendered.one("ConfigMap", "-config")["data"]["scheduler-config.yaml"])
    v, sc = rendered.values["scheduler"], rendered.values["sidecar"]["config"]
    assert cfg["kind"] == "KubeSchedulerConfiguration"
    assert [p["schedulerName"] for p in cfg["profiles"]] == [v["schedulerName"]]
    assert (cfg["clientConnection"]["qps"], cfg["clientConnection"]["burst"]) == (
        v["qps"], v["burst"]
    )
    le = cfg["leaderElection"]
    assert (le["leaderElect"], le["resourceName"], le["resourceNamespace"]) == (
        v["leaderElect"], v["leaseName"], rendered.namespace
    )
    if v["scoreVia"] == "grpc":
        # DSANScore and DSANPreemption, pointed at the sidecar's gRPC port; no extender.
        assert "extenders" not in cfg
        (profile,) = cfg["profiles"]
        args = {"address": f"127.0.0.1:{sc['grpc_port']}",
                "timeout": v["extender"]["httpTimeout"]}
        assert profile["pluginConfig"] == [{"name": "DSANScore", "args": args},
                                           {"name": "DSANPreemption", "args": args}]
        assert profile["plugins"]["score"]["enabled"] == [
            {"name": "DSANScore", "weight": v["extender"]["weight"]}]
        assert profile["plugins"]["multiPoint"] == {
            "enabled": [{"name": "DSANPreemption"}], "disabled": [{"name": "DefaultPreemption"}]}
        # The quota, the extender's filterVerb in plugin mode: DSANScore's PreFilter/Filter.
        quota = [{"name": "DSANScore"}] if v["extender"]["filter"] else None
        for point in ("preFilter", "filter"):
            assert profile["plugins"].get(point, {}).get("enabled") == quota, point
        return
    (ext,) = cfg["extenders"]
    assert ext["urlPrefix"] == f"http://127.0.0.1:{sc['http_port']}{sc['url_prefix']}"
    assert (ext["weight"], ext["httpTimeout"], ext["ignorable"]) == (
        v["extender"]["weight"], v["extender"]["httpTimeout"], v["extender"]["ignorable"]
    )
    assert ext.get("managedResources", []) == v["extender"]["managedResources"]
    assert (ext["prioritizeVerb"], ext["preemptVerb"]) == ("prioritize", "preempt")
    assert ext.get("filterVerb") == ("filter" if v["extender"]["filter"] else None)


def test_exclusive_cpus_make_every_request_a_limit_and_the_sidecar_cpus_whole(
    rendered: Rendered,
) -> None:
    values = rendered.values
    n = values["sidecar"]["exclusiveCpus"]
    given = {"kube-scheduler": values["scheduler"]["resources"],
             "sidecar": values["sidecar"]["resources"]}
    for c in rendered.containers("Deployment"):
        if not n:
            assert c["resources"] == given[c["name"]]
            continue
        want = dict(given[c["name"]]["requests"])
        if c["name"] == "sidecar":
            want["cpu"] = str(n)  # a quantity string, as the API types spell it
        assert c["resources"] == {"requests": want, "limits": want}, c["name"]


@pytest.mark.parametrize(("sets", "message"), [
    # --set-json: helm's --set keeps 1.5 a string (it parses whole numbers only).
    (["json:sidecar.exclusiveCpus=1.5"], "must be a whole number of CPUs, got 1.5"),
    (["sidecar.exclusiveCpus=1", "scheduler.resources.requests.memory=null"],
     "needs cpu and memory requests on every container of the scheduler pod; kube-scheduler"),
    (["sidecar.config.htp_port=1"], "additional properties 'htp_port' not allowed"),
    (["sidecar.config.http_port=high"], "at '/sidecar/config/http_port': got string, want "
                                        "integer"),
    (["sidecar.config.policy=fdg"], "at '/sidecar/config/policy'"),
    (["sidecar.config.metrics_port=-1"], "at '/sidecar/config/metrics_port'"),
    (["scheduler.scoreVia=gateway"], "at '/scheduler/scoreVia'"),
    (["devicePlugin.config.backend=nvidia"], "at '/devicePlugin/config/backend'"),
    (["scheduler.scoreVia=grpc", "sidecar.config.grpc_port=-1"],
     "scheduler.scoreVia: grpc needs the sidecar's gRPC server on a fixed port"),
    (["metrics.serviceMonitor.enabled=true", "metrics.service.enabled=false"],
     "metrics.serviceMonitor.enabled needs metrics.service.enabled"),
    (["scheduler.schedulerName=gpu-sched"],
     "sidecar.config.scheduler_name (dsan-scheduler) must equal scheduler.schedulerName"),
])
def test_values_that_cannot_work_are_refused_before_anything_is_installed(
    helm: Helm, sets: list[str], message: str
) -> None:
    args = [a for s in sets for a in (("--set-json", s[5:]) if s.startswith("json:")
                                      else ("--set", s))]
    out = helm.run("template", "x", str(CHART), *args)
    assert out.returncode != 0 and message in out.stderr, out.stderr


# --- against the real control plane ---------------------------------------------------------


@pytest.fixture(scope="module")
def installed(rendered: Rendered, helm: Helm, control_plane: Any,
              servicemonitor_crd: None) -> Iterator[Rendered]:
    """`helm install` the render's values into a fresh namespace (CRDs skipped: the session's
    CRD is shared, and it is checked by a dry-run apply instead); `helm uninstall` afterwards."""
    control_plane.ensure_namespace(rendered.namespace)
    extra = ["--values", str(rendered.values_file)] if rendered.values_file else []
    kube = ["--kubeconfig", str(control_plane.kubeconfig), "--namespace", rendered.namespace]
    try:
        helm("install", rendered.release, str(CHART), "--skip-crds", *kube, *extra)
        yield rendered
    finally:
        # Also after a failed install: the control plane is shared by the session, and helm
        # may have created part of the release (cluster-scoped RBAC included) before failing.
        helm("uninstall", rendered.release, *kube, check=False)


def test_apiserver_accepts_every_rendered_object(installed: Rendered, control_plane: Any) -> None:
    from kubernetes import client, dynamic

    with control_plane.api_client() as api:
        dyn = dynamic.DynamicClient(api)
        for doc in installed.docs:
            res = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
            meta = doc["metadata"]
            if doc["kind"] == "CustomResourceDefinition":
                # Accepted and valid as a whole (structural schema), without touching the
                # shared CRD: force takes the fields over only within this dry run.
                out = dyn.server_side_apply(
                    res, body=doc, field_manager="dsan-chart-test", force_conflicts=True,
                    dry_run="All",
                )
                assert out.metadata.name == meta["name"]
                continue
            live = dyn.get(res, name=meta["name"], namespace=meta.get("namespace"))
            assert live.metadata.labels["app.kubernetes.io/instance"] == installed.release
        # No controller manager runs here, so make each workload's Pod ourselves (dry run): the
        # priority class, the ServiceAccount and the whole pod spec pass admission.
        core: Any = client.CoreV1Api(api)  # Any: the typed client wants V1Pod, we have YAML
        for kind in ("Deployment", "DaemonSet"):
            template = installed.one(kind)["spec"]["template"]
            pod = {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {**template["metadata"], "name": f"{installed.release}-{kind.lower()}"},
                "spec": template["spec"],
            }
            out = core.create_namespaced_pod(installed.namespace, pod, dry_run="All")
            assert out.spec.service_account_name == template["spec"]["serviceAccountName"]
            if kind == "Deployment":
                # What the kubelet's static CPU manager needs to give the sidecar whole CPUs.
                exclusive = installed.values["sidecar"]["exclusiveCpus"]
                assert out.status.qos_class == ("Guaranteed" if exclusive else "Burstable")
            assert out.spec.priority is not None and out.spec.priority >= 2_000_000_000


def test_kube_scheduler_runs_the_rendered_config_as_the_chart_service_account(
    installed: Rendered, control_plane: Any
) -> None:
    with _rendered_scheduler(control_plane, installed) as proc:
        time.sleep(1.0)  # informers list everything once started: let a refusal surface
        proc.check_alive()
    forbidden = _forbidden(proc.log)
    assert not forbidden, "the chart's RBAC is missing something:\n" + "\n".join(forbidden[:10])


def test_helm_upgrade_rolls_the_scheduler_pods_and_uninstall_leaves_nothing(
    helm: Helm, control_plane: Any, tmp_path: Path
) -> None:
    """A values change reaches the live ConfigMap, and the pod template's config checksum
    changes with it, so the Deployment rolls its pods onto the new config (a ConfigMap change
    alone restarts nothing). `helm uninstall` then removes every object of the release,
    the cluster-scoped RBAC and admission policy included."""
    from kubernetes import client, dynamic

    release, ns = "chart-upgrade", "dsan-chart-upgrade"
    control_plane.ensure_namespace(ns)
    kube = ["--kubeconfig", str(control_plane.kubeconfig), "--namespace", ns]
    values = tmp_path / "override.yaml"
    values.write_text(yaml.safe_dump(OVERRIDE))
    chart_values = yaml.safe_load((CHART / "values.yaml").read_text())
    with control_plane.api_client() as api:
        apps: Any = client.AppsV1Api(api)
        core: Any = client.CoreV1Api(api)
        dyn = dynamic.DynamicClient(api)

        def live() -> tuple[str, SidecarConfig]:
            dep = apps.read_namespaced_deployment(f"{release}-dsan-scheduler", ns)
            cm = core.read_namespaced_config_map(f"{release}-dsan-config", ns)
            checksum = dep.spec.template.metadata.annotations["checksum/config"]
            return checksum, SidecarConfig.from_mapping(yaml.safe_load(cm.data["sidecar.yaml"]))

        def objects(*args: str) -> list[tuple[str, str]]:
            """The objects of the release rendered with ``args`` that exist in the cluster."""
            docs = helm.template(release, "--namespace", ns, *args)
            found = []
            for d in docs:
                res = dyn.resources.get(api_version=d["apiVersion"], kind=d["kind"])
                with contextlib.suppress(client.exceptions.ApiException):
                    dyn.get(res, name=d["metadata"]["name"],
                            namespace=d["metadata"].get("namespace"))
                    found.append((d["kind"], d["metadata"]["name"]))
            return found

        try:
            out = helm("install", release, str(CHART), "--skip-crds", *kube)
            # NOTES.txt: how to opt in and where to look, with this release's names.
            assert "schedulerName: dsan-scheduler" in out, out
            assert f"deploy/{release}-dsan-scheduler -c sidecar" in out, out
            before, cfg = live()
            assert cfg == SidecarConfig.from_mapping(chart_values["sidecar"]["config"])
            helm("upgrade", release, str(CHART), "--skip-crds", "--values", str(values), *kube)
            after, cfg = live()
            assert cfg == SidecarConfig.from_mapping(
                deep_merge(chart_values, OVERRIDE)["sidecar"]["config"])
            assert after != before, "config changed but the pod template did not: no rollout"
            upgraded = helm.template(release, "--namespace", ns, "--values", str(values))
            assert len(objects("--values", str(values))) == len(upgraded)
            # What the upgrade turned off (a PDB for one replica, the admission policy) went.
            assert len(objects()) < len(helm.template(release, "--namespace", ns))
        finally:
            helm("uninstall", release, *kube, check=False)
        assert objects() == objects("--values", str(values)) == [], \
            "helm uninstall left objects behind"


@pytest.mark.parametrize("via", ["extender", "grpc"])
def test_rendered_release_schedules_a_pod_through_the_rendered_sidecar(
    helm: Helm, control_plane: Any, tmp_path: Path, via: str
) -> None:
    """The whole Deployment pod outside a kubelet: `dsan serve` with the rendered command and
    file and kube-scheduler with the rendered config, both as the chart's ServiceAccount; the
    rendered probes (the kubelet's HTTP GETs) pass against the live sidecar and fail once it
    stops; an opted-in pod is scored, over the API the values chose, and bound."""
    from kubernetes import client

    from tests.support.workload import NodeShape, add_nodes, node_manifest, pod_manifest

    http_port, grpc_port, metrics_port = free_port(), free_port(), free_port()
    sets = {
        "sidecar.config.http_port": http_port,  # a shared machine: no fixed ports
        "sidecar.config.grpc_port": grpc_port,
        "sidecar.config.metrics_port": metrics_port,
        "sidecar.config.metrics_address": "127.0.0.1",  # the pod IP's stand-in
        "sidecar.config.policy": "bestfit",  # a heuristic: no model needed to score here
        "scheduler.schedulerName": f"dsan-chart-e2e-{via}",
        "sidecar.config.scheduler_name": f"dsan-chart-e2e-{via}",
        "scheduler.leaseName": f"dsan-chart-e2e-{via}",
        "scheduler.scoreVia": via,
    }
    release, ns = f"chart-e2e-{via}", f"dsan-chart-e2e-{via}"
    args = ["--namespace", ns, "--set", ",".join(f"{k}={v}" for k, v in sets.items())]
    rendered = Rendered(release, ns, {}, None, helm.template(release, *args))
    control_plane.ensure_namespace(ns)
    kube = ["--kubeconfig", str(control_plane.kubeconfig)]
    label = {"dsan-test": f"chart-e2e-{via}"}
    nodes = [node_manifest(f"chart-e2e-{via}-{i}", NodeShape(), label) for i in range(2)]
    sidecar = None
    with control_plane.api_client() as api:
        core: Any = client.CoreV1Api(api)
        try:
            # With its CRD, as a user installs it (helm skips a CRD that exists already), so
            # the sidecar's GPUTelemetry informer runs through the chart's RBAC too.
            helm("install", release, str(CHART), *kube, *args)
            container = rendered.container("Deployment", "sidecar")
            (tmp_path / "sidecar.yaml").write_text(
                rendered.one("ConfigMap", "-config")["data"]["sidecar.yaml"]
            )
            argv = [a.replace("/etc/dsan/", f"{tmp_path}/") for a in container["command"][1:]]
            # In a pod the in-cluster config is the ServiceAccount; here its token, by flag.
            sidecar = Proc(
                "dsan serve (chart)",
                [sys.executable, "-m", "dsan.cli", *argv,
                 f"--kubeconfig={_sa_kubeconfig(control_plane, rendered)}"],
                tmp_path / "sidecar.log",
            ).start()
            probes = {p: _http_probe(container, container[p]["httpGet"])
                      for p in ("startupProbe", "livenessProbe", "readinessProbe")}
            wait_until("the rendered readinessProbe", probes["readinessProbe"], 60, [sidecar])
            assert probes["livenessProbe"]() and probes["startupProbe"]()
            add_nodes(core, nodes, f"dsan-test=chart-e2e-{via}")
            with _rendered_scheduler(control_plane, rendered):
                pod = pod_manifest("opted-in", scheduler=f"dsan-chart-e2e-{via}",
                                   node_selector=label)
                core.create_namespaced_pod(ns, pod)
                bound = _wait_bound(core, ns, "opted-in", 30)
            assert bound in {n["metadata"]["name"] for n in nodes}
            # The metrics Service's port: what Prometheus scrapes in the cluster.
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics",
                                        timeout=5) as r:
                metrics = r.read().decode()
            asked = r'api="grpc",verb="score"' if via == "grpc" else \
                r'api="http",verb="prioritize"'
            assert re.search(r"dsan_sidecar_requests_total\{" + asked + r"\} [1-9]", metrics), \
                "the scheduler bound the pod without asking the sidecar"
            sidecar.stop()
            assert not probes["readinessProbe"](), "the readinessProbe passes with no sidecar"
            assert not probes["livenessProbe"](), "the livenessProbe passes with no sidecar"
        finally:
            if sidecar is not None:
                sidecar.stop()
            with contextlib.suppress(client.exceptions.ApiException):
                core.delete_namespaced_pod("opted-in", ns, grace_period_seconds=0)
            for n in nodes:
                with contextlib.suppress(client.exceptions.ApiException):
                    core.delete_node(n["metadata"]["name"])
            helm("uninstall", release, "--namespace", ns, *kube, check=False)
    refused = [ln for ln in (tmp_path / "sidecar.log").read_text().splitlines()
               if "forbidden" in ln.lower() or " 403" in ln]
    assert not refused, "the sidecar was refused by RBAC:\n" + "\n".join(refused[:10])


def test_rendered_deviceplugin_writes_gpu_telemetry_as_its_service_account(
    helm: Helm, control_plane: Any, tmp_path: Path
) -> None:
    """The DaemonSet's container outside a kubelet: `dsan deviceplugin` with the rendered flags
    (fake GPUs, loopback metrics), with the token the kubelet would give its pod on the node,
    writes that node's GPUTelemetry through the chart's RBAC and admission policy."""
    from kubernetes import client

    from dsan.api import types as t
    from tests.support.workload import NodeShape, node_manifest

    node = "chart-dp-node"
    sets = {
        "devicePlugin.config.backend": "fake",
        "devicePlugin.config.plugin_dir": str(tmp_path / "dp"),  # no kubelet: it waits for one
        "devicePlugin.config.metrics_addr": "127.0.0.1",
        "devicePlugin.config.metrics_port": 0,
    }
    release, ns = "chart-dp", "dsan-chart-dp"
    args = ["--namespace", ns, "--set", ",".join(f"{k}={v}" for k, v in sets.items()),
            # helm's --set keeps 0.5 a string, which the schema refuses for a number
            "--set-json", "devicePlugin.config.crd_interval_s=0.5"]
    rendered = Rendered(release, ns, {}, None, helm.template(release, *args))
    (tmp_path / "dp").mkdir()
    control_plane.ensure_namespace(ns)
    kube = ["--kubeconfig", str(control_plane.kubeconfig)]
    agent = None
    with control_plane.api_client() as api:
        custom: Any = client.CustomObjectsApi(api)
        core: Any = client.CoreV1Api(api)
        try:
            helm("install", release, str(CHART), *kube, *args)
            core.create_node(node_manifest(node, NodeShape(), {"dsan-test": "chart-dp"}))
            command = rendered.container("DaemonSet", "deviceplugin")["command"]
            kubeconfig = _sa_kubeconfig(control_plane, rendered, "DaemonSet", node=node)
            agent = Proc(
                "dsan deviceplugin (chart)",
                [sys.executable, "-m", "dsan.cli", *command[1:], f"--kubeconfig={kubeconfig}"],
                tmp_path / "deviceplugin.log",
                env={"NODE_NAME": node},  # the downward API's spec.nodeName
            ).start()

            def written() -> Any:
                with contextlib.suppress(client.exceptions.ApiException):
                    return custom.get_cluster_custom_object(
                        t.GROUP, t.VERSION, t.TELEMETRY_PLURAL, node
                    )
                return None

            wait_until("the device plugin's GPUTelemetry", lambda: written() is not None, 30,
                       [agent])
            got = GPUTelemetry.from_dict(written())
            assert got.node_name == node
            assert len(got.gpus) == PluginConfig(node_name=node).fake_gpus
        finally:
            if agent is not None:
                agent.stop()
            with contextlib.suppress(client.exceptions.ApiException):
                custom.delete_cluster_custom_object(t.GROUP, t.VERSION, t.TELEMETRY_PLURAL, node)
            with contextlib.suppress(client.exceptions.ApiException):
                core.delete_node(node)
            helm("uninstall", release, "--namespace", ns, *kube, check=False)
    log = (tmp_path / "deviceplugin.log").read_text()
    refused = [ln for ln in log.splitlines() if "forbidden" in ln.lower() or " 403" in ln]
    assert not refused, "the device plugin was refused:\n" + "\n".join(refused[:10])


def _http_probe(container: dict[str, Any], get: dict[str, Any]) -> Any:
    """The kubelet's HTTP GET probe of ``container`` (a named port resolved as the kubelet
    does), aimed at loopback, where the test's sidecar stands in for the pod IP: success is a
    2xx or 3xx status."""
    port = get["port"]
    if isinstance(port, str):
        port = next(p["containerPort"] for p in container["ports"] if p["name"] == port)
    url = f"{get.get('scheme', 'HTTP').lower()}://127.0.0.1:{port}{get['path']}"
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # as the kubelet: no verify

    def probe() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2, context=ctx) as r:
                return 200 <= r.status < 400
        except OSError:
            return False

    return probe


def _wait_bound(core: Any, ns: str, name: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        node = core.read_namespaced_pod(name, ns).spec.node_name
        if node:
            return str(node)
        time.sleep(0.2)
    raise AssertionError(f"pod {ns}/{name} not bound within {timeout} s")


def _sa_kubeconfig(control_plane: Any, rendered: Rendered, kind: str = "Deployment",
                   node: str | None = None) -> Path:
    """A kubeconfig holding a token of the ServiceAccount the chart gives ``kind``'s pods;
    with ``node``, bound to a pod of that ServiceAccount on that node (made here, as the
    DaemonSet controller would), as the kubelet's projected token is."""
    from kubernetes import client

    sa = rendered.pod_spec(kind)["serviceAccountName"]
    with control_plane.api_client() as api:
        bound = None
        if node is not None:
            core: Any = client.CoreV1Api(api)
            pod = core.create_namespaced_pod(rendered.namespace, {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"generateName": f"{rendered.release}-{kind.lower()}-"},
                "spec": {"serviceAccountName": sa, "nodeName": node,
                         "containers": [{"name": "c", "image": "x"}]}})
            bound = api.sanitize_for_serialization(pod)
        token = sa_token(api, rendered.namespace, sa, bound)
    return write_kubeconfig(
        control_plane.dir / f"{rendered.release}-{sa}-{node or 'unbound'}.kubeconfig",
        control_plane.server, control_plane.pki.ca_cert, token,
    )


@contextlib.contextmanager
def _rendered_scheduler(control_plane: Any, rendered: Rendered) -> Iterator[Proc]:
    """kube-scheduler on the rendered KubeSchedulerConfiguration as the chart's ServiceAccount,
    once it is ready and holds the chart's Lease; stopped (and the Lease deleted) on exit."""
    from kubernetes import client

    ns = rendered.namespace
    cfg = yaml.safe_load(rendered.one("ConfigMap", "-config")["data"]["scheduler-config.yaml"])
    sa_kubeconfig = _sa_kubeconfig(control_plane, rendered)
    # As in the pod: the rendered file as is, only the in-cluster credentials replaced by the
    # ServiceAccount's token (also for delegated authn/authz, as in-cluster would).
    name = f"chart-{rendered.release}"
    conn = {**cfg["clientConnection"], "kubeconfig": str(sa_kubeconfig)}
    path = control_plane.dir / f"{rendered.release}-scheduler-config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    lease_name = cfg["leaderElection"]["resourceName"]
    with control_plane.api_client() as api:
        coord: Any = client.CoordinationV1Api(api)
        proc = control_plane.start_scheduler(
            name, path,
            extra_args=(
                f"--authentication-kubeconfig={sa_kubeconfig}",
                f"--authorization-kubeconfig={sa_kubeconfig}",
            ),
            overrides={"clientConnection": conn, "leaderElection": cfg["leaderElection"]},
        )
        try:
            deadline = time.monotonic() + 30
            holder = None
            while not holder and time.monotonic() < deadline:
                proc.check_alive()
                with contextlib.suppress(client.exceptions.ApiException):
                    holder = coord.read_namespaced_lease(lease_name, ns).spec.holder_identity
                time.sleep(0.2)
            assert holder, (
                f"kube-scheduler took no Lease {ns}/{lease_name} within 30 s; refusals:\n"
                + "\n".join(_forbidden(proc.log)[:10])
            )
            yield proc
        finally:
            control_plane.stop_scheduler(name)
            with contextlib.suppress(client.exceptions.ApiException):
                coord.delete_namespaced_lease(lease_name, ns)


def _forbidden(log: Path) -> list[str]:
    """The scheduler's log lines where the apiserver refused it something (RBAC)."""
    text = log.read_text(errors="replace")
    return [line for line in text.splitlines() if "forbidden" in line.lower()]

