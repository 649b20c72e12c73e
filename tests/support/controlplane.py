"""A real Kubernetes control plane on 127.0.0.1 for e2e tests, benchmarks and `make cluster`.

etcd (Debian's 3.4), kube-apiserver and kube-scheduler (built from k8s.io/kubernetes by
hack/control-plane-build.sh, cached under ~/.cache/dsan) and kwok standing in for kubelets,
each on a free loopback port in one temp dir. What the field notes taught (see
../shared/notes/control-plane-field-notes.md) is encoded here:

- ``--endpoint-reconciler-type=none``: the `kubernetes` Service endpoint may not be loopback;
- the TaintNodesByCondition admission plugin is off: it taints every new Node not-ready and
  only the node-lifecycle controller (which we do not run) would remove it; kwok marks nodes
  Ready instead;
- pods need a ``default`` ServiceAccount: :meth:`ControlPlane.ensure_namespace` creates it
  (no controller manager runs here);
- scheduler ``clientConnection`` qps/burst are raised (the defaults cap binding at ~50 pods/s).

Usage::

    with ControlPlane(ControlPlaneConfig()) as cp:
        api = cp.api_client()
        cp.start_scheduler("dsan", SCHEDULER_CONFIG_DIR / "dsan-scheduler.yaml", extender_url=...)
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.support.pki import Pki, make_pki, write_kubeconfig
from tests.support.procs import Proc, free_port, http_ok, wait_until

REPO = Path(__file__).resolve().parents[2]
SCHEDULER_CONFIG_DIR = REPO / "scheduler-config"
BUILD_SCRIPT = REPO / "hack" / "control-plane-build.sh"


@dataclass(frozen=True)
class Binaries:
    kube_apiserver: Path
    kube_scheduler: Path
    kwok: Path
    kwok_stages: Path
    etcd: Path

    @classmethod
    def resolve(cls, build: bool = True) -> Binaries:
        """Paths from the build script; ``build`` runs it first (a no-op when cached)."""
        args = ["bash", str(BUILD_SCRIPT)] + ([] if build else ["--print"])
        proc = subprocess.run(args, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{BUILD_SCRIPT.name} failed:\n{proc.stderr[-3000:]}")
        kv = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
        bins = cls(
            kube_apiserver=Path(kv["KUBE_APISERVER"]),
            kube_scheduler=Path(kv["KUBE_SCHEDULER"]),
            kwok=Path(kv["KWOK"]),
            kwok_stages=Path(kv["KWOK_STAGES"]),
            etcd=Path(kv["ETCD"]),
        )
        missing = [
            str(p)
            for p in (bins.kube_apiserver, bins.kube_scheduler, bins.kwok,
                      bins.etcd)
            if not p.exists()
        ]
        if missing:
            raise FileNotFoundError(
                f"control-plane binaries missing (run `make control-plane`): {missing}"
            )
        return bins


@dataclass(frozen=True)
class ControlPlaneConfig:
    #: Where certs, data and logs go; None = a fresh temp dir (in /dev/shm when present,
    #: because etcd fsyncs every write).
    workdir: Path | None = None
    #: Start the stock default-scheduler (profile ``default-scheduler``) with raised qps/burst.
    default_scheduler: bool = True
    kwok: bool = True
    ready_timeout_s: float = 90.0
    #: klog verbosity of the Go components.
    verbosity: int = 1
    #: Extra kube-apiserver flags, e.g. ("--enable-priority-and-fairness=false",).
    apiserver_args: tuple[str, ...] = ()
    keep_workdir: bool = False
    binaries: Binaries | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.ready_timeout_s <= 0:
            raise ValueError(
                f"ControlPlaneConfig.ready_timeout_s must be > 0, got {self.ready_timeout_s}"
            )
        if not 0 <= self.verbosity <= 10:
            raise ValueError(f"ControlPlaneConfig.verbosity must be 0..10, got {self.verbosity}")


class ControlPlane:
    def __init__(self, config: ControlPlaneConfig | None = None) -> None:
        self.config = config or ControlPlaneConfig()
        self.bins = self.config.binaries or Binaries.resolve()
        base = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
        self.dir = self.config.workdir or Path(tempfile.mkdtemp(prefix="dsan-cp-", dir=base))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.etcd_port, self.etcd_peer_port, self.api_port = free_port(), free_port(), free_port()
        self.server = f"https://127.0.0.1:{self.api_port}"
        self.pki: Pki | None = None
        self.kubeconfig = self.dir / "admin.kubeconfig"
        self.etcd: Proc | None = None
        self.apiserver: Proc | None = None
        self.kwok: Proc | None = None
        self.schedulers: dict[str, tuple[Proc, int]] = {}
        self.timings: dict[str, float] = {}

    # --- lifecycle ------------------------------------------------------------------------
    def __enter__(self) -> ControlPlane:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> ControlPlane:
        self.pki = make_pki(self.dir / "pki")
        write_kubeconfig(self.kubeconfig, self.server, self.pki.ca_cert, self.pki.admin_token)
        self._start_etcd()
        self.start_apiserver()
        self.ensure_namespace("default")
        if self.config.kwok:
            self._start_kwok()
        if self.config.default_scheduler:
            self.start_scheduler("default", SCHEDULER_CONFIG_DIR / "default-scheduler.yaml")
        return self

    def stop(self) -> None:
        """Stop everything in reverse order; the temp dir goes too unless keep_workdir."""
        for proc, _ in list(self.schedulers.values()):
            proc.stop()
        self.schedulers.clear()
        for p in (self.kwok, self.apiserver, self.etcd):
            if p is not None:
                # The apiserver drains open watches for up to ~10 s on SIGTERM; a test
                # cluster has nothing worth draining.
                p.stop(timeout=3.0)
        if self.config.workdir is None and not self.config.keep_workdir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def _start_etcd(self) -> None:
        client = f"http://127.0.0.1:{self.etcd_port}"
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        self.etcd = Proc(
            "etcd",
            [
                str(self.bins.etcd),
                "--name=dsan",
                f"--data-dir={self.dir / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=dsan={peer}",
                "--log-level=warn",
                "--quota-backend-bytes=4294967296",
            ],
            self.dir / "etcd.log",
        ).start()
        self.timings["etcd"] = wait_until(
            "etcd", lambda: http_ok(f"{client}/health"), self.config.ready_timeout_s, [self.etcd]
        )

    def start_apiserver(self) -> None:
        """(Re)start kube-apiserver on the same port, certs and etcd: the fault tests' restart."""
        assert self.pki is not None
        pki = self.pki
        self.apiserver = Proc(
            "kube-apiserver",
            [
                str(self.bins.kube_apiserver),
                f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.api_port}",
                f"--tls-cert-file={pki.serving_cert}",
                f"--tls-private-key-file={pki.serving_key}",
                f"--client-ca-file={pki.ca_cert}",
                f"--token-auth-file={pki.token_file}",
                "--authorization-mode=RBAC",
                f"--service-account-key-file={pki.sa_pub}",
                f"--service-account-signing-key-file={pki.sa_key}",
                "--service-account-issuer=https://kubernetes.default.svc",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--endpoint-reconciler-type=none",
                "--disable-admission-plugins=TaintNodesByCondition",
                "--profiling=false",
                f"--v={self.config.verbosity}",
                *self.config.apiserver_args,
            ],
            self.dir / "kube-apiserver.log",
        ).start()
        self.timings["apiserver"] = self.wait_apiserver_ready()

    def wait_apiserver_ready(self) -> float:
        assert self.pki is not None and self.apiserver is not None
        pki = self.pki
        return wait_until(
            "kube-apiserver /readyz",
            lambda: http_ok(f"{self.server}/readyz", pki.admin_token, pki.ca_cert),
            self.config.ready_timeout_s,
            [self.apiserver],
            interval=0.2,
        )

    def restart_apiserver(self, down_s: float = 0.0) -> float:
        """Stop the apiserver, stay down ``down_s`` s, start it again; returns seconds to ready."""
        assert self.apiserver is not None
        self.apiserver.stop(timeout=3.0)
        time.sleep(down_s)
        self.start_apiserver()
        self.wait_reconnected()
        return self.timings["apiserver"]

    def wait_reconnected(self, timeout: float = 90.0) -> float:
        """After an apiserver restart, wait until kwok and the default scheduler work again.

        Their client-go watches back off (up to ~30 s) while the apiserver is down; without
        this, the next test's nodes stay NotReady or its pods Pending for that long. A canary
        node must turn Ready (kwok) and a canary pod must bind to it (default scheduler).
        """
        from kubernetes import client

        from tests.support.workload import NodeShape, node_manifest, pod_manifest

        start = time.monotonic()
        if self.kwok is None:
            return 0.0
        name = f"canary-{int(start * 1000) % 10**9}"
        with self.api_client() as api:
            core: Any = client.CoreV1Api(api)  # manifests are plain dicts
            core.create_node(node_manifest(name, NodeShape(gpus=0), {"dsan.io/canary": "true"}))
            try:

                def ready() -> bool:
                    n = core.read_node(name)
                    conds = n.status.conditions or []
                    return any(c.type == "Ready" and c.status == "True" for c in conds)

                wait_until("kwok after apiserver restart", ready, timeout, [self.kwok])
                if "default" in self.schedulers:
                    pod = pod_manifest(name, cpu="10m", memory="1Mi")
                    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": name}
                    core.create_namespaced_pod("default", pod)
                    wait_until(
                        "default scheduler after apiserver restart",
                        lambda: bool(core.read_namespaced_pod(name, "default").spec.node_name),
                        timeout,
                        [self.schedulers["default"][0]],
                    )
                    core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
            finally:
                core.delete_node(name)
        return time.monotonic() - start

    def _start_kwok(self) -> None:
        port = free_port()
        self.kwok = Proc(
            "kwok",
            [
                str(self.bins.kwok),
                f"--kubeconfig={self.kubeconfig}",
                f"--config={self.bins.kwok_stages}",
                "--manage-all-nodes=true",
                f"--server-address=127.0.0.1:{port}",
                "--cidr=10.0.0.0/16",
                "--node-ip=10.255.0.1",
            ],
            self.dir / "kwok.log",
        ).start()
        self.timings["kwok"] = wait_until(
            "kwok /healthz",
            lambda: http_ok(f"http://127.0.0.1:{port}/healthz"),
            self.config.ready_timeout_s,
            [self.kwok],
        )

    # --- schedulers -------------------------------------------------------------------------
    def start_scheduler(
        self,
        name: str,
        config_file: Path,
        extender_url: str | None = None,
        extra_args: tuple[str, ...] = (),
        overrides: dict[str, Any] | None = None,
        score_address: str | None = None,
    ) -> Proc:
        """Start a kube-scheduler from a KubeSchedulerConfiguration file, templated for us:
        our kubeconfig, no leader election, and (if given) the extender's URL or the
        DSANScore and DSANPreemption plugins' gRPC address."""
        cfg = yaml.safe_load(config_file.read_text())
        cfg.setdefault("clientConnection", {})["kubeconfig"] = str(self.kubeconfig)
        cfg["leaderElection"] = {"leaderElect": False}
        if extender_url is not None:
            for ext in cfg.get("extenders", []):
                ext["urlPrefix"] = extender_url
        if score_address is not None:
            for profile in cfg.get("profiles", []):
                for pc in profile.get("pluginConfig", []):
                    if pc.get("name") in ("DSANScore", "DSANPreemption"):
                        pc.setdefault("args", {})["address"] = score_address
        cfg.update(overrides or {})
        path = self.dir / f"scheduler-{name}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        port = free_port()
        proc = Proc(
            f"kube-scheduler[{name}]",
            [
                str(self.bins.kube_scheduler),
                f"--config={path}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.dir / ('certs-' + name)}",
                f"--authentication-kubeconfig={self.kubeconfig}",
                f"--authorization-kubeconfig={self.kubeconfig}",
                "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
                f"--v={self.config.verbosity}",
                *extra_args,
            ],
            self.dir / f"kube-scheduler-{name}.log",
        ).start()
        self.schedulers[name] = (proc, port)
        self.timings[f"scheduler-{name}"] = wait_until(
            f"kube-scheduler[{name}]",
            lambda: http_ok(f"https://127.0.0.1:{port}/readyz", insecure=True),
            self.config.ready_timeout_s,
            [proc],
        )
        return proc

    def stop_scheduler(self, name: str) -> None:
        proc, _ = self.schedulers.pop(name)
        proc.stop()

    def scheduler_metrics(self, name: str) -> str:
        """The scheduler's Prometheus text exposition (/metrics is allowed without auth here)."""
        import ssl
        import urllib.request

        _, port = self.schedulers[name]
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        with urllib.request.urlopen(
            f"https://127.0.0.1:{port}/metrics", context=ctx, timeout=10
        ) as r:
            return str(r.read().decode())

    # --- API access --------------------------------------------------------------------------
    def api_client(self, pool: int = 16) -> Any:
        """A fresh kubernetes.client.ApiClient for this cluster (admin token, CA-verified), with
        ``pool`` keep-alive connections so thread pools can create objects in parallel."""
        from kubernetes import client
        from kubernetes import config as kconfig

        cfg = client.Configuration()
        kconfig.load_kube_config(config_file=str(self.kubeconfig), client_configuration=cfg)
        cfg.connection_pool_maxsize = pool
        return client.ApiClient(cfg)

    def ensure_namespace(self, name: str) -> None:
        """Create ``name`` and its ``default`` ServiceAccount (no controller manager makes it)."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        with self.api_client() as api:
            core = client.CoreV1Api(api)
            meta = client.V1ObjectMeta
            for create in (
                lambda: core.create_namespace(client.V1Namespace(metadata=meta(name=name))),
                lambda: core.create_namespaced_service_account(
                    name, client.V1ServiceAccount(metadata=meta(name="default"))
                ),
            ):
                try:
                    create()
                except ApiException as e:
                    if e.status != 409:  # already exists is fine: idempotent
                        raise
