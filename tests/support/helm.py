"""The real helm CLI, kubeconform and crane for chart and image tests, built from their Go
modules by hack/helm-build.sh (cached under ~/.cache/dsan; a no-op when built), and the
chart's render as tests read it."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "dsan-scheduler"
BUILD = REPO / "hack" / "helm-build.sh"


@dataclass(frozen=True)
class ChartTools:
    helm: Path
    kubeconform: Path
    #: go-containerregistry's CLI (``crane registry serve``: a registry on loopback).
    crane: Path

    @classmethod
    def resolve(cls, build: bool = True) -> ChartTools:
        """Paths from the build script; ``build`` runs it first (a no-op when cached)."""
        proc = subprocess.run(["bash", str(BUILD), *([] if build else ["--print"])],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{BUILD.name} failed:\n{proc.stderr[-3000:]}")
        kv = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
        return cls(Path(kv["HELM"]), Path(kv["KUBECONFORM"]), Path(kv["CRANE"]))


class Helm:
    """The real helm CLI with its config/cache/data homes in a temp dir (nothing in ~)."""

    def __init__(self, binary: Path, home: Path) -> None:
        self.binary = binary
        self.env = {
            **os.environ,
            **{f"HELM_{k}_HOME": str(home / k.lower()) for k in ("CONFIG", "CACHE", "DATA")},
        }

    def run(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.binary), *args], capture_output=True, text=True,
                              env=self.env, timeout=timeout)

    def __call__(self, *args: str, check: bool = True, timeout: float = 120.0) -> str:
        proc = self.run(*args, timeout=timeout)
        if check:
            assert proc.returncode == 0, (
                f"helm {' '.join(args)} failed:\n{proc.stderr}{proc.stdout}"
            )
        return proc.stdout

    def template(self, release: str, *args: str, chart: Path = CHART) -> list[dict[str, Any]]:
        """``helm template`` parsed: every rendered object, in order."""
        return [d for d in yaml.safe_load_all(self("template", release, str(chart), *args)) if d]


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and k in out else v
    return out


@dataclass(frozen=True)
class Rendered:
    """One ``helm template`` of the chart: the release, its namespace, the effective values
    (values.yaml with the override merged in) and the rendered objects."""

    release: str
    namespace: str
    values: dict[str, Any]
    values_file: Path | None
    docs: list[dict[str, Any]]

    def one(self, kind: str, suffix: str = "") -> dict[str, Any]:
        found = [
            d for d in self.docs if d["kind"] == kind and d["metadata"]["name"].endswith(suffix)
        ]
        assert len(found) == 1, f"expected one {kind} *{suffix}, got {len(found)}"
        return found[0]

    def all(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.docs if d["kind"] == kind]

    def pod_spec(self, kind: str) -> dict[str, Any]:
        return dict(self.one(kind)["spec"]["template"]["spec"])

    def containers(self, kind: str) -> list[dict[str, Any]]:
        """Every container of ``kind``'s pods, init containers (the native sidecar) first."""
        spec = self.pod_spec(kind)
        return [*spec.get("initContainers", []), *spec["containers"]]

    def container(self, kind: str, name: str) -> dict[str, Any]:
        return next(c for c in self.containers(kind) if c["name"] == name)


def service_account_token(api: Any, namespace: str, name: str,
                          bound_pod: dict[str, Any] | None = None) -> str:
    """A token of ServiceAccount ``namespace/name``, as the kubelet gets one for a pod: with
    ``bound_pod`` (a live Pod object as a dict, with ``metadata.uid``) the token is bound to
    that pod, and so carries the node the pod runs on."""
    from kubernetes import client

    ref = None
    if bound_pod is not None:
        meta = bound_pod["metadata"]
        ref = client.V1BoundObjectReference(api_version="v1", kind="Pod", name=meta["name"],
                                            uid=meta["uid"])
    core: Any = client.CoreV1Api(api)
    return str(core.create_namespaced_service_account_token(
        name, namespace, client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(
            audiences=[], expiration_seconds=3600, bound_object_ref=ref))).status.token)
