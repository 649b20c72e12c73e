"""The images `make images` builds (hack/images.sh), and running a rendered pod's containers
from them with podman as a kubelet would, for tests/e2e/test_images.py.

No kubelet runs here, so :class:`PodRunner` does a kubelet's part for one container: the
rendered command, the rendered security context (user, read-only root filesystem, no
capabilities, no privilege escalation; podman's default seccomp profile is the runtime
default), the ConfigMap and emptyDir volumes, and the in-cluster credentials (the
ServiceAccount token directory and ``KUBERNETES_SERVICE_HOST``/``PORT``). The containers share
the host's network, where the test control plane listens on loopback, so the pod's loopback
and the pod IP are both 127.0.0.1 here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.procs import Proc

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "hack" / "images.sh"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


@dataclass(frozen=True)
class Images:
    sidecar: str
    deviceplugin: str
    scheduler: str
    upstream_scheduler: str
    containers_conf: Path

    @classmethod
    def resolve(cls, build: bool = True) -> Images:
        """Names from hack/images.sh; ``build`` runs it first (seconds when nothing changed)."""
        proc = subprocess.run(["bash", str(BUILD), *([] if build else ["--print"])],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{BUILD.name} failed:\n{proc.stderr[-4000:]}")
        kv = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
        return cls(kv["SIDECAR"], kv["DEVICEPLUGIN"], kv["SCHEDULER"], kv["UPSTREAM_SCHEDULER"],
                   Path(kv["CONTAINERS_CONF"]))

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "CONTAINERS_CONF": str(self.containers_conf)}

    def podman(self, *args: str, timeout: float = 120.0,
               check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(["podman", *args], capture_output=True, text=True,
                              env=self.env, timeout=timeout)
        if check:
            assert proc.returncode == 0, f"podman {' '.join(args)}:\n{proc.stderr}{proc.stdout}"
        return proc

    def inspect(self, image: str) -> dict[str, Any]:
        import json

        return dict(json.loads(self.podman("image", "inspect", image).stdout)[0])


@dataclass
class PodRunner:
    """Runs containers of one rendered pod spec from the images, as the pod's kubelet would."""

    images: Images
    workdir: Path
    #: The in-cluster credentials: (API server host, port, CA file, token, namespace).
    server: tuple[str, int]
    ca_cert: Path
    token: str
    namespace: str
    #: ConfigMap name -> {file: content}, for the pod's configMap volumes.
    config_maps: dict[str, dict[str, str]] = field(default_factory=dict)
    #: hostPath -> where it is on this machine instead (a temp dir for the kubelet's).
    host_paths: dict[str, Path] = field(default_factory=dict)
    started: list[str] = field(default_factory=list)

    def _sa_dir(self) -> Path:
        d = self.workdir / "serviceaccount"
        if not d.exists():
            d.mkdir(parents=True)
            (d / "token").write_text(self.token)
            shutil.copy(self.ca_cert, d / "ca.crt")
            (d / "namespace").write_text(self.namespace)
            for f in d.iterdir():
                f.chmod(0o644)  # readable by the container's user, as the kubelet's projection
        return d

    def _volume_args(self, spec: dict[str, Any], container: dict[str, Any]) -> list[str]:
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        args: list[str] = []
        for m in container.get("volumeMounts", []):
            v = volumes[m["name"]]
            ro = ":ro" if m.get("readOnly") else ""
            if "configMap" in v:
                d = self.workdir / f"cm-{v['name']}"
                d.mkdir(exist_ok=True)
                for name, content in self.config_maps[v["configMap"]["name"]].items():
                    (d / name).write_text(content)
                    (d / name).chmod(0o644)
                d.chmod(0o755)
                args += ["-v", f"{d}:{m['mountPath']}{ro}"]
            elif "emptyDir" in v:
                args += ["--tmpfs", f"{m['mountPath']}:rw,mode=1777"]
            elif "hostPath" in v:
                host = self.host_paths[v["hostPath"]["path"]]
                args += ["-v", f"{host}:{m['mountPath']}{ro}"]
            else:
                raise ValueError(f"volume kind not handled here: {v}")
        return args

    def start(self, name: str, image: str, spec: dict[str, Any], container: dict[str, Any],
              extra_args: tuple[str, ...] = (), env: dict[str, str] | None = None) -> Proc:
        """``podman run`` the container in the foreground (its log is the Proc's); ``env``
        gives what the kubelet would resolve (downward API values)."""
        pod_sc, sc = spec.get("securityContext", {}), container.get("securityContext", {})
        user = sc.get("runAsUser", pod_sc.get("runAsUser"))
        group = sc.get("runAsGroup", pod_sc.get("runAsGroup"))
        argv = ["podman", "run", "--rm", "--name", name, "--network", "host",
                "--pull", "never", "--stop-timeout", "5"]
        if user is not None:
            argv += ["--user", f"{user}:{group if group is not None else user}"]
        if sc.get("readOnlyRootFilesystem"):
            argv.append("--read-only")
        if "ALL" in sc.get("capabilities", {}).get("drop", []):
            argv += ["--cap-drop", "all"]
        if sc.get("allowPrivilegeEscalation") is False:
            argv += ["--security-opt", "no-new-privileges"]
        assert not sc.get("privileged")
        host, port = self.server
        argv += ["-e", f"KUBERNETES_SERVICE_HOST={host}", "-e", f"KUBERNETES_SERVICE_PORT={port}",
                 "-v", f"{self._sa_dir()}:{SA_DIR}:ro"]
        given = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
        for k, v in {**given, **(env or {})}.items():
            argv += ["-e", f"{k}={v}"]
        argv += self._volume_args(spec, container)
        command = list(container["command"])
        argv += ["--entrypoint", command[0], image, *command[1:], *extra_args]
        self.started.append(name)
        return Proc(name, argv, self.workdir / f"{name}.log", env=self.images.env).start()

    def stop_all(self) -> None:
        for name in self.started:
            self.images.podman("rm", "-f", "-t", "2", name, check=False)
        self.started.clear()
