"""The Helm chart for real. The real `helm` CLI (built by hack/helm-build.sh) lints and renders
charts/dsan-scheduler with its default values and with an override; `helm install` puts every
rendered object into the real kube-apiserver (the CRD goes through a server-side dry-run apply,
the workloads' pod templates through a dry-run Pod create, because no controller manager runs
here); the rendered sidecar config file and device-plugin flags parse with the components' own
parsers into exactly the values given; and the real kube-scheduler runs the rendered
KubeSchedulerConfiguration as the chart's ServiceAccount: it gets ready, takes the chart's Lease
and is never forbidden anything (so the chart's RBAC is enough). Then each workload's container
runs outside a kubelet exactly as rendered, with its ServiceAccount's token: the scheduler pod
(sidecar + kube-scheduler, rendered exec probes included) schedules an opted-in pod, and the
device plugin writes its node's GPUTelemetry. See docs/helm.md."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, fields
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
from tests.support.pki import write_kubeconfig
from tests.support.procs import Proc, free_port, wait_until

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "dsan-scheduler"
BUILD = ROOT / "hack" / "helm-build.sh"

#: Every value changed from its default where the chart renders it, so a key that the chart
#: drops, misspells or hard-codes shows up as a mismatch below.
OVERRIDE: dict[str, Any] = {
    "scheduler": {
        "schedulerName": "dsan-chart-override",
        "leaseName": "dsan-chart-override",
        "qps": 200,
        "burst": 400,
        "verbosity": 3,
        "extender": {
            "weight": 3,
            "httpTimeout": "250ms",
            "ignorable": False,
            "managedResources": [{"name": "nvidia.com/gpu", "ignoredByScheduler": False}],
        },
    },
    "sidecar": {
        "config": {
            "http_port": 9999,
            "grpc_port": -1,  # gRPC off: must not become a containerPort
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
        }
    },
    "devicePlugin": {
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
            "metrics_port": -1,  # no /metrics: must not become a containerPort
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
        }
    },
}


#: scoreVia: gateway, every gateway value changed from its default.
GATEWAY: dict[str, Any] = {
    "scheduler": {"scoreVia": "gateway", "extender": {"weight": 7, "httpTimeout": "80ms"},
                  "resources": {"requests": {"cpu": "1500m", "memory": "256Mi"}}},
    # The latency deployment: the sidecar on a CPU of its own (a Guaranteed pod).
    "sidecar": {"config": {"relay_socket": "/run/dsan-relay/score.sock"}, "exclusiveCpus": 1},
    "gateway": {"listen": "127.0.0.1:50077", "conns": 2, "maxMessageBytes": 4194304,
                "healthInterval": "250ms"},
}


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and k in out else v
    return out


@dataclass(frozen=True)
class Rendered:
    release: str
    namespace: str
    values: dict[str, Any]  # the effective values: values.yaml with the override merged in
    values_file: Path | None
    docs: list[dict[str, Any]]

    def one(self, kind: str, suffix: str = "") -> dict[str, Any]:
        found = [
            d for d in self.docs if d["kind"] == kind and d["metadata"]["name"].endswith(suffix)
        ]
        assert len(found) == 1, f"expected one {kind} *{suffix}, got {len(found)}"
        return found[0]

    def container(self, kind: str, name: str) -> dict[str, Any]:
        spec = self.one(kind)["spec"]["template"]["spec"]
        return next(c for c in spec["containers"] if c["name"] == name)


class Helm:
    """The real helm CLI with its config/cache/data homes in a temp dir (nothing in ~)."""

    def __init__(self, binary: Path, home: Path) -> None:
        self.binary = binary
        self.env = {
            **os.environ,
            **{f"HELM_{k}_HOME": str(home / k.lower()) for k in ("CONFIG", "CACHE", "DATA")},
        }

    def __call__(self, *args: str, check: bool = True, timeout: float = 120.0) -> str:
        proc = subprocess.run(
            [str(self.binary), *args], capture_output=True, text=True, env=self.env,
            timeout=timeout,
        )
        if check:
            assert proc.returncode == 0, (
                f"helm {' '.join(args)} failed:\n{proc.stderr}{proc.stdout}"
            )
        return proc.stdout


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    proc = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True)
    assert proc.returncode == 0, f"{BUILD.name} failed:\n{proc.stderr[-3000:]}"
    path = Path(proc.stdout.strip().splitlines()[-1].split("=", 1)[1])
    return Helm(path, tmp_path_factory.mktemp("helm-home"))


@pytest.fixture(scope="module", params=["default", "override", "gateway"])
def rendered(
    request: pytest.FixtureRequest, helm: Helm, tmp_path_factory: pytest.TempPathFactory
) -> Rendered:
    release = f"chart-{request.param}"
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    values_file = None
    args = ["template", release, str(CHART), "--namespace", f"dsan-{release}", "--include-crds"]
    if request.param != "default":
        over = OVERRIDE if request.param == "override" else GATEWAY
        values_file = tmp_path_factory.mktemp("values") / f"{request.param}.yaml"
        values_file.write_text(yaml.safe_dump(over))
        values = _deep_merge(values, over)
        args += ["--values", str(values_file)]
    docs = [d for d in yaml.safe_load_all(helm(*args)) if d]
    return Rendered(release, f"dsan-{release}", values, values_file, docs)


def test_helm_lint_passes_strict_with_default_and_override_values(
    helm: Helm, rendered: Rendered
) -> None:
    extra = ["--values", str(rendered.values_file)] if rendered.values_file else []
    out = helm("lint", "--strict", str(CHART), *extra)
    assert "0 chart(s) failed" in out, out


def test_render_holds_every_component(rendered: Rendered) -> None:
    kinds = sorted(d["kind"] for d in rendered.docs)
    assert kinds == sorted(
        ["CustomResourceDefinition", "ConfigMap", "Deployment", "DaemonSet"]
        + ["ServiceAccount"] * 2 + ["ClusterRole"] * 2 + ["ClusterRoleBinding"] * 4
        + ["RoleBinding"]
    ), kinds
    cluster_scoped = {"CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"}
    for d in rendered.docs:
        if d["kind"] not in cluster_scoped:
            # The scheduler's auth-reader binding must sit beside its Role in kube-system.
            want = "kube-system" if d["kind"] == "RoleBinding" else rendered.namespace
            assert d["metadata"].get("namespace") == want, d["metadata"]


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
    if rendered.values_file is not None:
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
    if v["scoreVia"] == "gateway":
        # The DSANScore plugin, pointed at the gateway; no extender.
        assert "extenders" not in cfg
        (profile,) = cfg["profiles"]
        (pc,) = profile["pluginConfig"]
        assert pc == {"name": "DSANScore", "args": {
            "address": rendered.values["gateway"]["listen"],
            "timeout": v["extender"]["httpTimeout"]}}
        assert profile["plugins"]["score"]["enabled"] == [
            {"name": "DSANScore", "weight": v["extender"]["weight"]}]
        return
    (ext,) = cfg["extenders"]
    assert ext["urlPrefix"] == f"http://127.0.0.1:{sc['http_port']}{sc['url_prefix']}"
    assert (ext["weight"], ext["httpTimeout"], ext["ignorable"]) == (
        v["extender"]["weight"], v["extender"]["httpTimeout"], v["extender"]["ignorable"]
    )
    assert ext.get("managedResources", []) == v["extender"]["managedResources"]


def test_score_gateway_runs_only_with_score_via_gateway_and_carries_its_values(
    rendered: Rendered,
) -> None:
    spec = rendered.one("Deployment")["spec"]["template"]["spec"]
    names = [c["name"] for c in spec["containers"]]
    if rendered.values["scheduler"]["scoreVia"] != "gateway":
        assert names == ["kube-scheduler", "sidecar"]
        assert [v["name"] for v in spec["volumes"]] == ["config"]
        return
    assert names == ["kube-scheduler", "sidecar", "score-gateway"]
    g, sock = rendered.values["gateway"], rendered.values["sidecar"]["config"]["relay_socket"]
    gw = rendered.container("Deployment", "score-gateway")
    assert gw["command"] == [
        "/usr/local/bin/score-gateway", f"-listen={g['listen']}", f"-relay={sock}",
        f"-conns={g['conns']}", f"-max-message-bytes={g['maxMessageBytes']}",
        f"-health-interval={g['healthInterval']}"]
    assert gw["readinessProbe"]["exec"]["command"] == [
        "/usr/local/bin/score-gateway", f"-probe={g['listen']}"]
    # The socket's directory is one emptyDir, mounted in both containers.
    sidecar = rendered.container("Deployment", "sidecar")
    for c in (gw, sidecar):
        assert {"name": "relay", "mountPath": str(Path(sock).parent)} in c["volumeMounts"]
    assert {"name": "relay", "emptyDir": {}} in spec["volumes"]


def test_exclusive_cpus_make_every_request_a_limit_and_the_sidecar_cpus_whole(
    rendered: Rendered,
) -> None:
    values = rendered.values
    n = values["sidecar"]["exclusiveCpus"]
    given = {"kube-scheduler": values["scheduler"]["resources"],
             "sidecar": values["sidecar"]["resources"],
             "score-gateway": values["gateway"]["resources"]}
    spec = rendered.one("Deployment")["spec"]["template"]["spec"]
    for c in spec["containers"]:
        if not n:
            assert c["resources"] == given[c["name"]]
            continue
        want = dict(given[c["name"]]["requests"])
        if c["name"] == "sidecar":
            want["cpu"] = str(n)  # a quantity string, as the API types spell it
        assert c["resources"] == {"requests": want, "limits": want}, c["name"]


@pytest.mark.parametrize(("sets", "message"), [
    (["sidecar.exclusiveCpus=1.5"], "must be a whole number of CPUs, got 1.5"),
    (["sidecar.exclusiveCpus=1", "gateway.resources.requests.memory=null",
      "scheduler.scoreVia=gateway", "sidecar.config.relay_socket=/run/d/s.sock"],
     "needs cpu and memory requests on every container of the scheduler pod; score-gateway"),
])
def test_exclusive_cpus_refuse_what_cannot_be_guaranteed(
    helm: Helm, sets: list[str], message: str
) -> None:
    out = subprocess.run(
        [str(helm.binary), "template", "x", str(CHART), *(a for s in sets for a in ("--set", s))],
        capture_output=True, text=True, env=helm.env)
    assert out.returncode != 0 and message in out.stderr, out.stderr


def test_score_via_gateway_without_a_relay_socket_is_refused(helm: Helm) -> None:
    out = subprocess.run(
        [str(helm.binary), "template", "x", str(CHART), "--set", "scheduler.scoreVia=gateway"],
        capture_output=True, text=True, env=helm.env)
    assert out.returncode != 0 and "needs sidecar.config.relay_socket" in out.stderr


# --- against the real control plane ---------------------------------------------------------


@pytest.fixture(scope="module")
def installed(rendered: Rendered, helm: Helm, control_plane: Any) -> Iterator[Rendered]:
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


def test_helm_upgrade_to_new_values_rolls_the_scheduler_pods(
    helm: Helm, control_plane: Any, tmp_path: Path
) -> None:
    """A values change reaches the live ConfigMap, and the pod template's config checksum
    changes with it, so the Deployment rolls its pods onto the new config (a ConfigMap change
    alone restarts nothing)."""
    from kubernetes import client

    release, ns = "chart-upgrade", "dsan-chart-upgrade"
    control_plane.ensure_namespace(ns)
    kube = ["--kubeconfig", str(control_plane.kubeconfig), "--namespace", ns]
    values = tmp_path / "override.yaml"
    values.write_text(yaml.safe_dump(OVERRIDE))
    with control_plane.api_client() as api:
        apps: Any = client.AppsV1Api(api)
        core: Any = client.CoreV1Api(api)

        def live() -> tuple[str, SidecarConfig]:
            dep = apps.read_namespaced_deployment(f"{release}-dsan-scheduler", ns)
            cm = core.read_namespaced_config_map(f"{release}-dsan-config", ns)
            checksum = dep.spec.template.metadata.annotations["checksum/config"]
            return checksum, SidecarConfig.from_mapping(yaml.safe_load(cm.data["sidecar.yaml"]))

        try:
            helm("install", release, str(CHART), "--skip-crds", *kube)
            before, cfg = live()
            assert cfg == SidecarConfig()
            helm("upgrade", release, str(CHART), "--skip-crds", "--values", str(values), *kube)
            after, cfg = live()
            assert cfg == SidecarConfig.from_mapping(OVERRIDE["sidecar"]["config"])
            assert after != before, "config changed but the pod template did not: no rollout"
        finally:
            helm("uninstall", release, *kube, check=False)


@pytest.mark.parametrize("via", ["extender", "gateway"])
def test_rendered_release_schedules_a_pod_through_the_rendered_sidecar(
    helm: Helm, control_plane: Any, tmp_path: Path, via: str
) -> None:
    """The whole Deployment pod outside a kubelet: `dsan serve` with the rendered command and
    file and kube-scheduler with the rendered config, both as the chart's ServiceAccount (and,
    with ``scoreVia: gateway``, score-gateway with its rendered command); the rendered probes
    pass against the live sidecar; an opted-in pod is scored and bound."""
    from kubernetes import client

    from tests.support.workload import NodeShape, add_nodes, node_manifest, pod_manifest

    http_port, grpc_port = free_port(), free_port()  # a shared machine: no fixed 8888
    sets = {
        "sidecar.config.http_port": http_port,
        "sidecar.config.grpc_port": grpc_port,
        "sidecar.config.policy": "bestfit",  # a heuristic: no model needed to score here
        "scheduler.schedulerName": f"dsan-chart-e2e-{via}",
        "scheduler.leaseName": f"dsan-chart-e2e-{via}",
    }
    sockdir = Path(tempfile.mkdtemp(prefix="dsan-chart-"))  # a socket path has 107 bytes
    if via == "gateway":
        sets.update({"scheduler.scoreVia": "gateway",
                     "sidecar.config.relay_socket": str(sockdir / "score.sock"),
                     "gateway.listen": f"127.0.0.1:{free_port()}",
                     "gateway.healthInterval": "100ms"})
    release, ns = f"chart-e2e-{via}", f"dsan-chart-e2e-{via}"
    args = ["--namespace", ns, "--set", ",".join(f"{k}={v}" for k, v in sets.items())]
    docs = [d for d in yaml.safe_load_all(helm("template", release, str(CHART), *args)) if d]
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    rendered = Rendered(release, ns, values, None, docs)
    control_plane.ensure_namespace(ns)
    kube = ["--kubeconfig", str(control_plane.kubeconfig)]
    label = {"dsan-test": f"chart-e2e-{via}"}
    nodes = [node_manifest(f"chart-e2e-{via}-{i}", NodeShape(), label) for i in range(2)]
    sidecar = gateway = None
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
            ready, live = (container[p]["exec"]["command"] for p in ("readinessProbe",
                                                                      "livenessProbe"))
            wait_until("the rendered readinessProbe", lambda: _probe(ready), 60, [sidecar])
            assert _probe(live), "the rendered livenessProbe fails against a live sidecar"
            gw_probe: list[str] = []
            if via == "gateway":
                # The rendered container with the image's binary replaced by our build.
                gw = rendered.container("Deployment", "score-gateway")
                exe = str(control_plane.bins.score_gateway)
                gateway = Proc("score-gateway (chart)", [exe, *gw["command"][1:]],
                               tmp_path / "gateway.log").start()
                gw_probe = [exe, *gw["readinessProbe"]["exec"]["command"][1:]]
                wait_until("the gateway's rendered readinessProbe", lambda: _probe(gw_probe),
                           30, [gateway])
            add_nodes(core, nodes, f"dsan-test=chart-e2e-{via}")
            with _rendered_scheduler(control_plane, rendered):
                pod = pod_manifest("opted-in", scheduler=f"dsan-chart-e2e-{via}",
                                   node_selector=label)
                core.create_namespaced_pod(ns, pod)
                bound = _wait_bound(core, ns, "opted-in", 30)
            assert bound in {n["metadata"]["name"] for n in nodes}
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=5) as r:
                metrics = r.read().decode()
            asked = (r'api="grpc",verb="score"' if via == "gateway"
                     else r'api="http",verb="prioritize"')
            assert re.search(r"dsan_sidecar_requests_total\{" + asked + r"\} [1-9]", metrics), \
                "the scheduler bound the pod without asking the sidecar"
            sidecar.stop()
            assert not _probe(ready), "the readinessProbe passes with no sidecar listening"
            if gw_probe:
                wait_until("the gateway's probe failing without a sidecar",
                           lambda: not _probe(gw_probe), 10)
        finally:
            if gateway is not None:
                gateway.stop()
            if sidecar is not None:
                sidecar.stop()
            shutil.rmtree(sockdir, ignore_errors=True)
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
    (fake GPUs, loopback metrics) as the chart's device-plugin ServiceAccount writes its node's
    GPUTelemetry object through the chart's RBAC."""
    from kubernetes import client

    from dsan.api import types as t

    node = "chart-dp-node"
    sets = {
        "devicePlugin.config.backend": "fake",
        "devicePlugin.config.plugin_dir": str(tmp_path / "dp"),  # no kubelet: it waits for one
        "devicePlugin.config.metrics_addr": "127.0.0.1",
        "devicePlugin.config.metrics_port": 0,
        "devicePlugin.config.crd_interval_s": 0.5,
    }
    release, ns = "chart-dp", "dsan-chart-dp"
    args = ["--namespace", ns, "--set", ",".join(f"{k}={v}" for k, v in sets.items())]
    docs = [d for d in yaml.safe_load_all(helm("template", release, str(CHART), *args)) if d]
    rendered = Rendered(release, ns, {}, None, docs)
    (tmp_path / "dp").mkdir()
    control_plane.ensure_namespace(ns)
    kube = ["--kubeconfig", str(control_plane.kubeconfig)]
    agent = None
    with control_plane.api_client() as api:
        custom: Any = client.CustomObjectsApi(api)
        try:
            helm("install", release, str(CHART), *kube, *args)
            command = rendered.container("DaemonSet", "deviceplugin")["command"]
            kubeconfig = _sa_kubeconfig(control_plane, rendered, "DaemonSet")
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
            helm("uninstall", release, "--namespace", ns, *kube, check=False)
    log = (tmp_path / "deviceplugin.log").read_text()
    refused = [ln for ln in log.splitlines() if "forbidden" in ln.lower() or " 403" in ln]
    assert not refused, "the device plugin was refused by RBAC:\n" + "\n".join(refused[:10])


def _probe(command: list[str]) -> bool:
    """Run an exec probe as the kubelet would: success is exit status 0."""
    return subprocess.run(command, capture_output=True, timeout=10).returncode == 0


def _wait_bound(core: Any, ns: str, name: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        node = core.read_namespaced_pod(name, ns).spec.node_name
        if node:
            return str(node)
        time.sleep(0.2)
    raise AssertionError(f"pod {ns}/{name} not bound within {timeout} s")


def _sa_kubeconfig(control_plane: Any, rendered: Rendered, kind: str = "Deployment") -> Path:
    """A kubeconfig holding a token of the ServiceAccount the chart gives ``kind``'s pods."""
    from kubernetes import client

    sa = rendered.one(kind)["spec"]["template"]["spec"]["serviceAccountName"]
    with control_plane.api_client() as api:
        core: Any = client.CoreV1Api(api)
        token = core.create_namespaced_service_account_token(
            sa, rendered.namespace, client.AuthenticationV1TokenRequest(
                spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
            ),
        ).status.token
    return write_kubeconfig(
        control_plane.dir / f"{rendered.release}-{sa}.kubeconfig", control_plane.server,
        control_plane.pki.ca_cert, token,
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
