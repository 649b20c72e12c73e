"""The whole DSAN stack on loopback: control plane + default scheduler + sidecar + dsan-scheduler
+ kwok GPU nodes. Used by `make cluster` (hack/cluster.sh) and `make cluster-demo`.

    python -m tests.support.localcluster --dir /tmp/dsan-cluster --nodes 50

runs in the foreground until SIGTERM/SIGINT; when everything is up it writes ``<dir>/env``
(KUBECONFIG=..., SIDECAR_URL=..., ...) and then ``<dir>/ready``.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.support.controlplane import SCHEDULER_CONFIG_DIR, ControlPlane, ControlPlaneConfig
from tests.support.sidecar import Sidecar
from tests.support.workload import add_nodes, fleet


@dataclass(frozen=True)
class LocalClusterConfig:
    nodes: int = 50
    #: Sidecar policy; None = the sidecar's default (DSAN, falling back to its heuristic).
    policy: str | None = None
    workdir: Path | None = None

    def __post_init__(self) -> None:
        if self.nodes < 0:
            raise ValueError(f"LocalClusterConfig.nodes must be >= 0, got {self.nodes}")


class LocalCluster:
    def __init__(self, config: LocalClusterConfig) -> None:
        self.config = config
        self.cp = ControlPlane(ControlPlaneConfig(workdir=config.workdir))
        self.sidecar: Sidecar | None = None

    def __enter__(self) -> LocalCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        from kubernetes import client

        self.cp.start()
        if self.config.nodes:
            with self.cp.api_client() as api:
                add_nodes(
                    client.CoreV1Api(api),
                    fleet(self.config.nodes, prefix="kwok"),
                    "type=kwok",
                    timeout=300,
                )
        self.sidecar = Sidecar(self.cp.kubeconfig, self.cp.dir, policy=self.config.policy)
        self.sidecar.start(ready_timeout=120)
        self.cp.start_scheduler(
            "dsan",
            SCHEDULER_CONFIG_DIR / "dsan-scheduler.yaml",
            extender_url=self.sidecar.extender_url,
        )

    def stop(self) -> None:
        if self.sidecar is not None:
            self.sidecar.stop()
        self.cp.stop()

    def env(self) -> dict[str, Any]:
        assert self.sidecar is not None
        return {
            "KUBECONFIG": self.cp.kubeconfig,
            "APISERVER": self.cp.server,
            "SIDECAR_URL": self.sidecar.url,
            "SIDECAR_METRICS": f"{self.sidecar.url}/metrics",
            "SIDECAR_GRPC": f"127.0.0.1:{self.sidecar.grpc_port}",
            "LOGS": self.cp.dir,
        }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="run the DSAN stack on loopback until signalled")
    ap.add_argument("--dir", type=Path, required=True, help="state dir (kubeconfig, logs, env)")
    ap.add_argument("--nodes", type=int, default=50)
    ap.add_argument("--policy", default=None)
    args = ap.parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    args.dir.mkdir(parents=True, exist_ok=True)
    cfg = LocalClusterConfig(nodes=args.nodes, policy=args.policy, workdir=args.dir)
    with LocalCluster(cfg) as lc:
        (args.dir / "env").write_text("".join(f"{k}={v}\n" for k, v in lc.env().items()))
        (args.dir / "ready").touch()
        print("ready", flush=True)
        while not stop.wait(1.0):
            procs = [lc.cp.apiserver, lc.cp.etcd, lc.sidecar.proc if lc.sidecar else None]
            for proc in procs:
                if proc is not None and not proc.alive():
                    print(f"{proc.name} died; see {proc.log}", file=sys.stderr)
                    return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
