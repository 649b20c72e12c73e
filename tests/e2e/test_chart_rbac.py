"""The chart's RBAC and admission policy, against the real apiserver: every rule it renders is
a row of docs/helm.md's RBAC table and every row is rendered (a template that adds a verb or
a resource fails here until the table says so); each ServiceAccount may do what its
component needs and nothing next to it (SubjectAccessReview, what `kubectl auth can-i --as`
asks); the device plugin may write only its own node's GPUTelemetry (the
ValidatingAdmissionPolicy, with tokens bound to pods on nodes, as the kubelet's are)."""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.helm import CHART, Helm, Rendered
from tests.support.helm import service_account_token as sa_token
from tests.support.pki import write_kubeconfig

pytestmark = pytest.mark.e2e
DOCS = Path(__file__).resolve().parents[2] / "docs" / "helm.md"
RELEASE, NS = "chart-rbac", "dsan-chart-rbac"
#: One permission: (account, where, API group, resource, verb, resource name or "").
Grant = tuple[str, str, str, str, str, str]


def _split(cell: str) -> list[str]:
    return [x.strip().strip("`") for x in cell.split(",") if x.strip()]


def documented(values: dict[str, Any]) -> set[Grant]:
    """docs/helm.md's RBAC table, one grant per (resource, verb, name) of each row, with the
    placeholders (`core`, `scheduler.leaseName`) resolved."""
    text = DOCS.read_text()
    section = text[text.index("\n## RBAC"):]
    rows = [ln for ln in section.splitlines() if ln.startswith("|")]
    header = [c.strip().lower() for c in rows[0].strip("|").split("|")]
    assert header[:6] == ["account", "where", "api group", "resources", "verbs", "names"], header
    grants: set[Grant] = set()
    for row in rows[2:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        if len(cells) < 6:
            break
        account, where = cells[0].strip("`"), cells[1]
        names = [values["scheduler"]["leaseName"] if n == "scheduler.leaseName" else n
                 for n in _split(cells[5])] or [""]
        for group in _split(cells[2]):
            for res in _split(cells[3]):
                for verb in _split(cells[4]):
                    for name in names:
                        grants.add((account, where, "" if group == "core" else group, res,
                                    verb, name))
    return grants


def rendered_grants(r: Rendered, builtin: dict[tuple[str, str], list[Any]]) -> set[Grant]:
    """What the rendered bindings grant each of the chart's ServiceAccounts; a binding to a
    Role or ClusterRole the chart does not render is read from the cluster (``builtin``)."""
    roles = {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d["rules"]
             for d in r.docs if d["kind"] in ("Role", "ClusterRole")}
    prefix = f"{r.release}-dsan-"
    grants: set[Grant] = set()
    for b in r.docs:
        if b["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        ref = b["roleRef"]
        ns = b["metadata"].get("namespace", "") if ref["kind"] == "Role" else ""
        rules = roles.get((ref["kind"], ns, ref["name"])) or builtin[(ns, ref["name"])]
        if b["kind"] == "ClusterRoleBinding":
            where = "cluster"
        elif b["metadata"]["namespace"] == r.namespace:
            where = "release namespace"
        else:
            where = b["metadata"]["namespace"]
        for subject in b["subjects"]:
            assert subject["kind"] == "ServiceAccount" and subject["name"].startswith(prefix)
            account = subject["name"].removeprefix(prefix)
            for rule in rules:
                for group in rule.get("apiGroups", []):
                    for res in rule.get("resources", []):
                        for verb in rule.get("verbs", []):
                            for name in rule.get("resourceNames") or [""]:
                                grants.add((account, where, group, res, verb, name))
    return grants


@pytest.fixture(scope="module")
def installed(helm: Helm, control_plane: Any) -> Iterator[Rendered]:
    control_plane.ensure_namespace(NS)
    kube = ["--kubeconfig", str(control_plane.kubeconfig), "--namespace", NS]
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    try:
        # With the CRD (helm skips it when the session has it already): the policy test
        # writes GPUTelemetry objects.
        helm("install", RELEASE, str(CHART), *kube)
        yield Rendered(RELEASE, NS, values, None, helm.template(RELEASE, "--namespace", NS))
    finally:
        helm("uninstall", RELEASE, *kube, check=False)


def _until_refused(dry_run: Any, within_s: float = 20.0) -> None:
    """The apiserver loads a new admission policy asynchronously, a second or more after
    `helm install` returns: wait until ``dry_run()`` (a write the policy refuses, with
    dryRun=All so nothing is stored meanwhile) is refused with 403."""
    from kubernetes import client

    deadline = time.monotonic() + within_s
    while True:
        try:
            dry_run()
        except client.exceptions.ApiException as exc:
            assert exc.status == 403, exc
            return
        assert time.monotonic() < deadline, "the admission policy never took effect"
        time.sleep(0.2)


def _builtin(control_plane: Any, r: Rendered) -> dict[tuple[str, str], list[Any]]:
    """The rules of the built-in roles the chart binds (read from the cluster)."""
    from kubernetes import client

    out: dict[tuple[str, str], list[Any]] = {}
    rendered = {d["metadata"]["name"] for d in r.docs if d["kind"] in ("Role", "ClusterRole")}
    with control_plane.api_client() as api:
        rbac: Any = client.RbacAuthorizationV1Api(api)
        for b in r.docs:
            if b["kind"] in ("RoleBinding", "ClusterRoleBinding") and \
                    b["roleRef"]["name"] not in rendered:
                ns = b["metadata"].get("namespace", "") if b["roleRef"]["kind"] == "Role" else ""
                role = (rbac.read_namespaced_role(b["roleRef"]["name"], ns) if ns
                        else rbac.read_cluster_role(b["roleRef"]["name"]))
                out[(ns, b["roleRef"]["name"])] = api.sanitize_for_serialization(role)["rules"]
    return out


def test_every_rendered_permission_is_in_the_docs_rbac_table_and_back(
    installed: Rendered, control_plane: Any
) -> None:
    got = rendered_grants(installed, _builtin(control_plane, installed))
    docs = documented(installed.values)
    assert not got - docs, ("granted but not in docs/helm.md's RBAC table: "
                            f"{sorted(got - docs)}")
    assert not docs - got, f"in docs/helm.md's RBAC table but not granted: {sorted(docs - got)}"


def test_the_table_check_catches_an_added_verb(installed: Rendered, control_plane: Any) -> None:
    """The check above, on a copy of the render with one more verb: it must tell."""
    import copy

    docs = copy.deepcopy(installed.docs)
    role = next(d for d in docs if d["kind"] == "ClusterRole"
                and d["metadata"]["name"].endswith("-deviceplugin"))
    role["rules"][0]["verbs"].append("delete")
    broken = Rendered(installed.release, installed.namespace, installed.values, None, docs)
    extra = rendered_grants(broken, _builtin(control_plane, installed)) - documented(
        installed.values)
    assert extra == {("deviceplugin", "cluster", "dsan.io", "gputelemetries", "delete", "")}


def _can(api: Any, sa: str, verb: str, resource: str, group: str = "", namespace: str = "",
         name: str = "", subresource: str = "") -> bool:
    from kubernetes import client

    authz: Any = client.AuthorizationV1Api(api)
    review = client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
        user=f"system:serviceaccount:{NS}:{RELEASE}-dsan-{sa}",
        groups=["system:serviceaccounts", f"system:serviceaccounts:{NS}", "system:authenticated"],
        resource_attributes=client.V1ResourceAttributes(
            verb=verb, resource=resource, group=group, namespace=namespace or None,
            name=name or None, subresource=subresource or None)))
    return bool(authz.create_subject_access_review(review).status.allowed)


#: (account, verb, resource, group, namespace, name, subresource) -> allowed?
#: "NS" stands for the release namespace, "LEASE" for the chart's Lease name.
CAN_I: list[tuple[str, str, str, str, str, str, str, bool]] = [
    # The scheduler pod: schedule, bind, preempt, record; its own Lease only.
    ("scheduler", "list", "nodes", "", "", "", "", True),
    ("scheduler", "watch", "pods", "", "", "", "", True),
    ("scheduler", "create", "pods", "", "default", "", "binding", True),
    ("scheduler", "delete", "pods", "", "default", "", "", True),
    ("scheduler", "patch", "pods", "", "default", "", "", True),
    ("scheduler", "create", "events", "events.k8s.io", "default", "", "", True),
    ("scheduler", "list", "gputelemetries", "dsan.io", "", "", "", True),
    ("scheduler", "create", "leases", "coordination.k8s.io", "NS", "", "", True),
    ("scheduler", "update", "leases", "coordination.k8s.io", "NS", "LEASE", "", True),
    ("scheduler", "update", "leases", "coordination.k8s.io", "NS", "kube-scheduler", "", False),
    ("scheduler", "create", "leases", "coordination.k8s.io", "kube-system", "", "", False),
    ("scheduler", "update", "leases", "coordination.k8s.io", "kube-system", "LEASE", "", False),
    ("scheduler", "get", "secrets", "", "NS", "", "", False),
    ("scheduler", "create", "pods", "", "default", "", "", False),
    ("scheduler", "update", "nodes", "", "", "", "", False),
    ("scheduler", "create", "gputelemetries", "dsan.io", "", "", "", False),
    ("scheduler", "get", "configmaps", "", "kube-system", "extension-apiserver-authentication",
     "", True),
    ("scheduler", "get", "configmaps", "", "kube-system", "kubeadm-config", "", False),
    # The device plugin: its GPUTelemetry by server-side apply, nothing else.
    ("deviceplugin", "create", "gputelemetries", "dsan.io", "", "", "", True),
    ("deviceplugin", "patch", "gputelemetries", "dsan.io", "", "node-a", "", True),
    ("deviceplugin", "get", "gputelemetries", "dsan.io", "", "node-a", "", True),
    ("deviceplugin", "list", "gputelemetries", "dsan.io", "", "", "", False),
    ("deviceplugin", "delete", "gputelemetries", "dsan.io", "", "node-a", "", False),
    ("deviceplugin", "list", "pods", "", "", "", "", False),
    ("deviceplugin", "get", "nodes", "", "", "node-a", "", False),
    ("deviceplugin", "get", "secrets", "", "NS", "", "", False),
    ("deviceplugin", "create", "leases", "coordination.k8s.io", "NS", "", "", False),
]


def test_each_service_account_can_do_what_it_needs_and_no_more(
    installed: Rendered, control_plane: Any
) -> None:
    lease = installed.values["scheduler"]["leaseName"]
    wrong = []
    with control_plane.api_client() as api:
        for sa, verb, res, group, ns, name, sub, allowed in CAN_I:
            ns = NS if ns == "NS" else ns
            name = lease if name == "LEASE" else name
            if _can(api, sa, verb, res, group, ns, name, sub) != allowed:
                wrong.append(f"{sa} {verb} {group or 'core'}/{res}{'/' + sub if sub else ''} "
                             f"{ns or '(cluster)'} {name}: expected "
                             f"{'allowed' if allowed else 'denied'}")
    assert not wrong, "\n".join(wrong)


def test_the_device_plugin_writes_only_its_own_nodes_gpu_telemetry(
    installed: Rendered, control_plane: Any, tmp_path: Path
) -> None:
    """Tokens as the kubelet's: bound to a device-plugin pod on node A. Apply A's object:
    allowed; B's, or A's naming node B inside, or any with a token bound to no pod: refused
    by the admission policy (RBAC alone would allow all of them)."""
    from kubernetes import client, config

    from deviceplugin.crwriter import KubernetesTelemetryStore
    from dsan.api import types as t
    from tests.support.workload import NodeShape, node_manifest

    nodes = ["chart-rbac-node-a", "chart-rbac-node-b"]
    sa = f"{RELEASE}-dsan-deviceplugin"

    def telemetry(name: str, node: str) -> dict[str, Any]:
        return {"apiVersion": f"{t.GROUP}/{t.VERSION}", "kind": "GPUTelemetry",
                "metadata": {"name": name},
                "spec": {"nodeName": node, "gpus": [
                    {"uuid": "GPU-1", "index": 0, "model": "A100", "memoryTotalMiB": 81920}]}}

    def store(token: str, tag: str) -> KubernetesTelemetryStore:
        kc = write_kubeconfig(tmp_path / f"{tag}.kubeconfig", control_plane.server,
                              control_plane.pki.ca_cert, token)
        return KubernetesTelemetryStore(kubeconfig=str(kc))

    def refused(s: KubernetesTelemetryStore, obj: dict[str, Any]) -> str:
        try:
            s.apply(obj)
        except client.exceptions.ApiException as exc:
            assert exc.status == 403, exc
            return str(exc.body)
        return ""

    with control_plane.api_client() as api:
        core: Any = client.CoreV1Api(api)
        custom: Any = client.CustomObjectsApi(api)
        try:
            for n in nodes:
                core.create_node(node_manifest(n, NodeShape(), {"dsan-test": "chart-rbac"}))
            pod = core.create_namespaced_pod(NS, {
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "dp-on-a"},
                "spec": {"serviceAccountName": sa, "nodeName": nodes[0],
                         "containers": [{"name": "c", "image": "x"}]}})
            token_a = sa_token(api, NS, sa, api.sanitize_for_serialization(pod))
            on_a, unbound = store(token_a, "on-a"), store(sa_token(api, NS, sa), "unbound")
            kc = write_kubeconfig(tmp_path / "probe.kubeconfig", control_plane.server,
                                  control_plane.pki.ca_cert, token_a)
            with config.new_client_from_config(config_file=str(kc)) as probe:
                _until_refused(lambda: client.CustomObjectsApi(probe).create_cluster_custom_object(
                    t.GROUP, t.VERSION, t.TELEMETRY_PLURAL, telemetry(nodes[1], nodes[1]),
                    dry_run="All"))

            assert refused(on_a, telemetry(nodes[0], nodes[0])) == ""
            msg = refused(on_a, telemetry(nodes[1], nodes[1]))
            assert f"may write only GPUTelemetry {nodes[0]}, not {nodes[1]}" in msg, msg
            assert refused(on_a, telemetry(nodes[0], nodes[1])), "spec.nodeName was not checked"
            msg = refused(unbound, telemetry(nodes[0], nodes[0]))
            assert "only with a token bound to a pod on a node" in msg, msg
            # The policy binds only the device plugin: an admin still writes B's object.
            custom.create_cluster_custom_object(t.GROUP, t.VERSION, t.TELEMETRY_PLURAL,
                                                telemetry(nodes[1], nodes[1]))
        finally:
            with contextlib.suppress(client.exceptions.ApiException):
                core.delete_namespaced_pod("dp-on-a", NS, grace_period_seconds=0)
            for n in nodes:
                for delete in (lambda n=n: core.delete_node(n),
                               lambda n=n: custom.delete_cluster_custom_object(
                                   t.GROUP, t.VERSION, t.TELEMETRY_PLURAL, n)):
                    with contextlib.suppress(client.exceptions.ApiException):
                        delete()


def test_the_scheduler_patches_only_the_scored_by_annotation_of_a_pod(
    installed: Rendered, control_plane: Any, tmp_path: Path
) -> None:
    """With the scheduler's token: the sidecar's annotation may be set, a workload owner's
    desired-members lowered (the elastic shrink) or, where it declares max-members and has
    none, added within its bounds (the elastic grant); a label, another annotation, raising a
    count or adding one elsewhere, or a spec field is refused by the admission policy (RBAC
    allows them)."""
    from kubernetes import client, config

    from dsan.api.types import (
        ANNOTATION_DESIRED_MEMBERS,
        ANNOTATION_MAX_MEMBERS,
        ANNOTATION_MIN_MEMBERS,
        ANNOTATION_SCORED_BY,
    )

    sa = f"{RELEASE}-dsan-scheduler"
    with control_plane.api_client() as admin:
        core: Any = client.CoreV1Api(admin)
        core.create_namespaced_pod(NS, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "annotated", "annotations": {
                "team": "a", ANNOTATION_DESIRED_MEMBERS: "4"}},
            "spec": {"schedulerName": "dsan-scheduler",
                     "containers": [{"name": "c", "image": "x"}]}})
        try:
            kc = write_kubeconfig(tmp_path / "sched.kubeconfig", control_plane.server,
                                  control_plane.pki.ca_cert, sa_token(admin, NS, sa))
            with config.new_client_from_config(config_file=str(kc)) as api:
                pods: Any = client.CoreV1Api(api)

                def refused(body: dict[str, Any]) -> str:
                    try:
                        pods.patch_namespaced_pod("annotated", NS, body)
                    except client.exceptions.ApiException as exc:
                        assert exc.status == 403, exc
                        return str(exc.body)
                    return ""

                _until_refused(lambda: pods.patch_namespaced_pod(
                    "annotated", NS, {"metadata": {"labels": {"x": "y"}}}, dry_run="All"))
                ours = {"metadata": {"annotations": {ANNOTATION_SCORED_BY: "dsan@v1"}}}
                assert refused(ours) == ""
                msg = refused({"metadata": {"labels": {"x": "y"}}})
                assert "only the dsan.io/scored-by annotation" in msg, msg
                assert refused({"metadata": {"annotations": {"team": "b"}}})
                assert refused({"metadata": {"annotations": {"other": "1"}}})
                assert refused({"spec": {"activeDeadlineSeconds": 5}})

                def count(n: str) -> dict[str, Any]:
                    return {"metadata": {"annotations": {ANNOTATION_DESIRED_MEMBERS: n}}}

                assert refused(count("3")) == ""
                assert refused(count("5"))
            core.create_namespaced_pod(NS, {
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "no-count"},
                "spec": {"containers": [{"name": "c", "image": "x"}]}})
            with config.new_client_from_config(config_file=str(kc)) as api:
                try:
                    client.CoreV1Api(api).patch_namespaced_pod("no-count", NS, count("1"))
                    raise AssertionError("adding a desired-members count was allowed")
                except client.exceptions.ApiException as exc:
                    assert exc.status == 403, exc
            # The elastic grant: a count may be added where the owner declares a maximum and
            # has none, within its min-members..max-members, once.
            core.create_namespaced_pod(NS, {
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "grantee", "annotations": {
                    ANNOTATION_MIN_MEMBERS: "2", ANNOTATION_MAX_MEMBERS: "6"}},
                "spec": {"containers": [{"name": "c", "image": "x"}]}})
            with config.new_client_from_config(config_file=str(kc)) as api:
                grantee: Any = client.CoreV1Api(api)
                for n, allowed in (("7", False), ("1", False), ("x", False), ("5", True),
                                   ("6", False)):
                    try:
                        grantee.patch_namespaced_pod("grantee", NS, count(n))
                        assert allowed, f"granting {n} of 2..6 was allowed"
                    except client.exceptions.ApiException as exc:
                        # "x" breaks the policy's int(): an evaluation error, 422 Invalid
                        assert not allowed and exc.status == (422 if n == "x" else 403), (n, exc)
            assert core.read_namespaced_pod("grantee", NS).metadata.annotations[
                ANNOTATION_DESIRED_MEMBERS] == "5"
            got = core.read_namespaced_pod("annotated", NS)
            assert got.metadata.annotations == {"team": "a", ANNOTATION_SCORED_BY: "dsan@v1",
                                                ANNOTATION_DESIRED_MEMBERS: "3"}
            assert not got.metadata.labels and got.spec.active_deadline_seconds is None
        finally:
            core.delete_namespaced_pod("annotated", NS, grace_period_seconds=0)


def test_tables_rows_name_real_kinds() -> None:
    """A table row spelled wrong would never match a rendered rule: each resource is a plural
    lower-case name (or a subresource of one), each verb a Kubernetes verb."""
    verbs = {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
    for _account, _where, _group, res, verb, _name in documented({"scheduler": {
            "leaseName": "x"}}):
        assert verb in verbs, verb
        assert re.fullmatch(r"[a-z]+(/[a-z]+)?", res), res
