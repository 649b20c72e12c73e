"""score-gateway (scheduler-plugin/cmd/score-gateway) as a child process on a free port, in
front of a sidecar's Score relay socket."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.controlplane import Binaries
from tests.support.procs import Proc, free_port, wait_until


@functools.cache
def built_gateway() -> Path:
    """The control-plane build's score-gateway (the build script runs once per process)."""
    return Binaries.resolve().score_gateway


@dataclass
class Gateway:
    relay_socket: str
    log_dir: Path
    port: int = field(default_factory=free_port)
    health_interval: str = "50ms"
    #: The binary; None = the control-plane build's.
    exe: Path | None = None
    proc: Proc | None = None

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 10.0) -> Gateway:
        exe = self.exe or built_gateway()
        self.proc = Proc("score-gateway",
                         [str(exe), f"-listen={self.target}", f"-relay={self.relay_socket}",
                          f"-health-interval={self.health_interval}"],
                         self.log_dir / f"score-gateway-{self.port}.log").start()
        log = self.proc.log
        wait_until("score-gateway", lambda: "serving grpc on" in log.read_text(), timeout,
                   [self.proc], interval=0.02)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()
