"""The images `make images` builds, run: each answers --help as non-root; the sidecar image
carries no training stack and stays under 400 MB; the chart's scheduler pod runs from the
images against the real control plane, each container exactly as rendered (command, security
context, volumes, in-cluster credentials; tests/support/images.py) and schedules an opted-in
pod, through the extender and through the DSANScore plugin, and through the extender with the
upstream kube-scheduler image too; the device plugin image, with the fake backend, writes its
node's GPUTelemetry; the images push to a registry and pull back as docs/helm.md says."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.helm import CHART, ChartTools, Helm, Rendered
from tests.support.helm import service_account_token as sa_token
from tests.support.images import Images, PodRunner
from tests.support.procs import Proc, free_port, wait_until

pytestmark = pytest.mark.e2e
MAX_SIDECAR_BYTES = 400_000_000


@pytest.fixture(scope="module")
def images() -> Images:
    return Images.resolve()


def test_images_run_as_non_root_and_the_sidecar_carries_no_training_stack(
    images: Images,
) -> None:
    for image in (images.sidecar, images.deviceplugin, images.scheduler):
        cfg = images.inspect(image)["Config"]
        assert cfg["User"] == "65532:65532", image
    assert images.inspect(images.sidecar)["Size"] <= MAX_SIDECAR_BYTES
    probe = ("import importlib.util as u; "
             "print([m for m in ('torch', 'torch_geometric', 'tensorboard', 'matplotlib', "
             "'pip') if u.find_spec(m)])")
    out = images.podman("run", "--rm", "--entrypoint", "python", images.sidecar, "-c", probe)
    assert out.stdout.strip() == "[]", out.stdout


@pytest.mark.parametrize(("which", "args", "expect"), [
    ("sidecar", ["--help"], "The DSAN scoring sidecar"),
    ("deviceplugin", ["--help"], "GPU telemetry agent"),
    ("scheduler", ["--help"], "The Kubernetes scheduler is a control plane process"),
    ("scheduler", ["--version"], "Kubernetes v1.36.3"),
])
def test_each_image_answers(images: Images, which: str, args: list[str], expect: str) -> None:
    out = images.podman("run", "--rm", "--read-only", "--cap-drop", "all",
                        getattr(images, which), *args)
    assert expect in out.stdout, out.stdout[-2000:]


def test_the_cli_lists_its_serving_commands_without_the_training_stack(images: Images) -> None:
    out = images.podman("run", "--rm", "--entrypoint", "dsan", images.sidecar, "--help")
    for command in ("serve", "deviceplugin"):
        assert re.search(rf"^\s+{command}\s+run", out.stdout, re.M), out.stdout


@contextlib.contextmanager
def _scheduler_pod(helm: Helm, control_plane: Any, images: Images, tmp_path: Path, via: str,
                   scheduler_image: str) -> Iterator[tuple[Rendered, int]]:
    """The chart's scheduler pod from the images: installed with helm, its two containers run
    by podman as rendered; yields the render and the sidecar's metrics port once both are
    ready and the scheduler holds the Lease."""
    from kubernetes import client

    name = f"img-{via}-{'up' if scheduler_image == images.upstream_scheduler else 'ours'}"
    ports = {k: free_port() for k in ("http", "grpc", "metrics")}
    sets = {
        "sidecar.config.http_port": ports["http"], "sidecar.config.grpc_port": ports["grpc"],
        "sidecar.config.metrics_port": ports["metrics"],
        "scheduler.scoreVia": via, "scheduler.schedulerName": name, "scheduler.leaseName": name,
        "sidecar.config.scheduler_name": name,
        "scheduler.replicas": 1,
    }
    ns = f"dsan-{name}"
    args = ["--namespace", ns, "--set", ",".join(f"{k}={v}" for k, v in sets.items())]
    rendered = Rendered(name, ns, {}, None, helm.template(name, *args))
    control_plane.ensure_namespace(ns)
    kube = ["--kubeconfig", str(control_plane.kubeconfig)]
    spec = rendered.pod_spec("Deployment")
    cm = rendered.one("ConfigMap", "-config")
    runner = None
    with control_plane.api_client() as api:
        try:
            helm("install", name, str(CHART), "--skip-crds", *kube, *args)
            runner = PodRunner(
                images, tmp_path, ("127.0.0.1", control_plane.api_port),
                control_plane.pki.ca_cert, sa_token(api, ns, spec["serviceAccountName"]), ns,
                config_maps={cm["metadata"]["name"]: cm["data"]})
            # As the kubelet: the native sidecar first, the app container once the sidecar's
            # startup probe (GET /readyz on its metrics port) passed.
            sidecar = runner.start(f"{name}-sidecar-{os.getpid()}", images.sidecar, spec,
                                   rendered.container("Deployment", "sidecar"))
            base = f"http://127.0.0.1:{ports['metrics']}"
            wait_until("the sidecar's startupProbe (GET /readyz)",
                       lambda: _ok(f"{base}/readyz"), 90, [sidecar])
            # The containers share the host's network here, so kube-scheduler's secure port
            # moves off its fixed 10259 (free on a real pod's own network).
            secure = free_port()
            scheduler = runner.start(f"{name}-scheduler-{os.getpid()}", scheduler_image, spec,
                                     rendered.container("Deployment", "kube-scheduler"),
                                     extra_args=(f"--secure-port={secure}",))
            wait_until("kube-scheduler's readinessProbe (GET https /readyz)",
                       lambda: _ok(f"https://127.0.0.1:{secure}/readyz"), 60, [scheduler])
            coord: Any = client.CoordinationV1Api(api)

            def leader() -> bool:
                with contextlib.suppress(client.exceptions.ApiException):
                    return bool(coord.read_namespaced_lease(name, ns).spec.holder_identity)
                return False

            wait_until("the Lease", leader, 30, [scheduler])
            yield rendered, ports["metrics"]
            for p in (sidecar, scheduler):
                p.check_alive()
                log = p.log.read_text(errors="replace")
                assert "forbidden" not in log.lower(), log[-3000:]
        finally:
            if runner is not None:
                runner.stop_all()
            helm("uninstall", name, "--namespace", ns, *kube, check=False)


@pytest.mark.parametrize(("via", "upstream"), [
    ("extender", False), ("grpc", False), ("extender", True)])
def test_the_chart_scheduler_pod_runs_from_the_images_and_binds_an_opted_in_pod(
    helm: Helm, control_plane: Any, images: Images, tmp_path: Path, via: str, upstream: bool,
) -> None:
    from kubernetes import client

    from tests.support.workload import NodeShape, add_nodes, node_manifest, pod_manifest

    image = images.upstream_scheduler if upstream else images.scheduler
    tag = f"img-{via}-{'up' if upstream else 'ours'}"
    label = {"dsan-test": tag}
    nodes = [node_manifest(f"{tag}-{i}", NodeShape(), label) for i in range(2)]
    with control_plane.api_client() as api:
        core: Any = client.CoreV1Api(api)
        try:
            add_nodes(core, nodes, f"dsan-test={tag}")
            with _scheduler_pod(helm, control_plane, images, tmp_path, via, image) as (r, mport):
                core.create_namespaced_pod(r.namespace, pod_manifest(
                    "opted-in", scheduler=tag, node_selector=label))
                deadline = time.monotonic() + 30
                while not core.read_namespaced_pod("opted-in", r.namespace).spec.node_name:
                    assert time.monotonic() < deadline, "the opted-in pod was not bound"
                    time.sleep(0.2)
                with urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics",
                                            timeout=5) as resp:
                    metrics = resp.read().decode()
                asked = r'api="grpc",verb="score"' if via == "grpc" else \
                    r'api="http",verb="prioritize"'
                assert re.search(r"dsan_sidecar_requests_total\{" + asked + r"\} [1-9]",
                                 metrics), "bound without asking the sidecar"
                assert re.search(r'dsan_sidecar_decisions_total\{node="' + tag, metrics), [
                    ln for ln in metrics.splitlines() if ln.startswith("dsan_sidecar_assum")]
        finally:
            for n in nodes:
                with contextlib.suppress(client.exceptions.ApiException):
                    core.delete_node(n["metadata"]["name"])


def test_the_deviceplugin_image_writes_its_nodes_gpu_telemetry(
    helm: Helm, control_plane: Any, images: Images, tmp_path: Path
) -> None:
    """The DaemonSet's container from the image, as rendered (root, read-only, no
    capabilities; the kubelet's plugin dir a temp dir), fake GPUs, in-cluster credentials
    bound to a pod on the node: the admission policy lets it write that node's object."""
    from kubernetes import client

    from dsan.api import types as t
    from tests.support.workload import NodeShape, node_manifest

    node, name, ns = "img-dp-node", "img-dp", "dsan-img-dp"
    metrics = free_port()
    args = ["--namespace", ns, "--set",
            f"devicePlugin.config.backend=fake,devicePlugin.config.metrics_port={metrics}",
            "--set-json", "devicePlugin.config.crd_interval_s=0.5"]
    rendered = Rendered(name, ns, {}, None, helm.template(name, *args))
    spec = rendered.pod_spec("DaemonSet")
    control_plane.ensure_namespace(ns)
    kube = ["--kubeconfig", str(control_plane.kubeconfig)]
    # The kubelet's directories the chart mounts (by mode): empty, so no PodResources to
    # attribute (tested with a fake server in tests/integration/deviceplugin).
    kubelet = {f"/var/lib/kubelet/{d}": tmp_path / d for d in ("device-plugins", "pod-resources")}
    for d in kubelet.values():
        d.mkdir()
    runner = None
    with control_plane.api_client() as api:
        core: Any = client.CoreV1Api(api)
        custom: Any = client.CustomObjectsApi(api)
        try:
            # With its CRD (helm skips a CRD that exists already): the object's type.
            helm("install", name, str(CHART), *kube, *args)
            core.create_node(node_manifest(node, NodeShape(), {"dsan-test": name}))
            pod = core.create_namespaced_pod(ns, {
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "dp"},
                "spec": {"serviceAccountName": spec["serviceAccountName"], "nodeName": node,
                         "containers": [{"name": "c", "image": "x"}]}})
            token = sa_token(api, ns, spec["serviceAccountName"],
                             api.sanitize_for_serialization(pod))
            runner = PodRunner(images, tmp_path, ("127.0.0.1", control_plane.api_port),
                               control_plane.pki.ca_cert, token, ns,
                               host_paths=kubelet)
            agent = runner.start(f"{name}-{os.getpid()}", images.deviceplugin, spec,
                                 rendered.container("DaemonSet", "deviceplugin"),
                                 env={"NODE_NAME": node})

            def written() -> bool:
                with contextlib.suppress(client.exceptions.ApiException):
                    custom.get_cluster_custom_object(t.GROUP, t.VERSION, t.TELEMETRY_PLURAL,
                                                     node)
                    return True
                return False

            wait_until("the device plugin's GPUTelemetry", written, 60, [agent])
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=5) as r:
                assert "DCGM_FI_DEV_GPU_UTIL" in r.read().decode()
            agent.check_alive()
            assert "forbidden" not in agent.log.read_text(errors="replace").lower()
        finally:
            if runner is not None:
                runner.stop_all()
            for delete in (lambda: custom.delete_cluster_custom_object(
                    t.GROUP, t.VERSION, t.TELEMETRY_PLURAL, node),
                    lambda: core.delete_node(node),
                    lambda: core.delete_namespaced_pod("dp", ns, grace_period_seconds=0)):
                with contextlib.suppress(client.exceptions.ApiException):
                    delete()
            helm("uninstall", name, "--namespace", ns, *kube, check=False)


def test_the_images_push_to_a_registry_and_pull_back(
    images: Images, chart_tools: ChartTools, tmp_path: Path
) -> None:
    """docs/helm.md's step 2, against a registry on loopback (crane registry serve)."""
    port = free_port()
    registry = Proc("crane registry", [str(chart_tools.crane), "registry", "serve",
                                       "--address", f"127.0.0.1:{port}"],
                    tmp_path / "registry.log").start()
    reg = f"127.0.0.1:{port}/dsan"
    try:
        wait_until("the registry", lambda: _ok(f"http://127.0.0.1:{port}/v2/"), 30, [registry])
        for image in (images.sidecar, images.deviceplugin, images.scheduler):
            target = f"{reg}/{image.removeprefix('localhost/')}"
            images.podman("push", "--quiet", "--tls-verify=false", image, target, timeout=300)
        listed = subprocess.run([str(chart_tools.crane), "catalog", f"127.0.0.1:{port}",
                                 "--insecure"], capture_output=True, text=True, check=True)
        assert sorted(listed.stdout.split()) == [
            "dsan/dsan-deviceplugin", "dsan/dsan-kube-scheduler", "dsan/dsan-sidecar"]
        pulled = f"{reg}/{images.scheduler.removeprefix('localhost/')}"
        images.podman("pull", "--quiet", "--tls-verify=false", pulled)
        assert images.inspect(pulled)["Id"] == images.inspect(images.scheduler)["Id"]
        images.podman("rmi", pulled)
    finally:
        registry.stop()


def _ok(url: str) -> bool:
    import ssl

    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=2, context=ctx) as r:
            return 200 <= r.status < 400
    except OSError:
        return False
