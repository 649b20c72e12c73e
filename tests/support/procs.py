"""Child processes for loopback test systems: free ports, logs to files, readiness, clean stop."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def free_port() -> int:
    """A port the kernel just handed out on 127.0.0.1 (tiny race, acceptable on a test box)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class Proc:
    """One child process, stdout+stderr in ``log``, in its own process group (exact stop)."""

    def __init__(
        self, name: str, argv: Sequence[str], log: Path, env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name, self.argv, self.log = name, list(argv), log
        self._env = env
        self._cwd = cwd
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Proc:
        fh = self.log.open("ab")
        self.popen = subprocess.Popen(
            self.argv,
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(self._env or {})},
            cwd=self._cwd,
            start_new_session=True,
        )
        fh.close()
        return self

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def check_alive(self) -> None:
        if not self.alive():
            code = None if self.popen is None else self.popen.returncode
            raise RuntimeError(
                f"{self.name} exited (code {code}); log {self.log}:\n{tail(self.log)}"
            )

    def stop(self, timeout: float = 10.0, sig: int = signal.SIGTERM) -> None:
        """SIGTERM, wait, then SIGKILL: only this process's own group, never a name match."""
        if self.popen is None or self.popen.poll() is not None:
            return
        try:
            os.killpg(self.popen.pid, sig)
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(5)
        except ProcessLookupError:
            pass

    def kill(self) -> None:
        """SIGKILL at once: the fault tests' "the process died" case."""
        self.stop(timeout=5, sig=signal.SIGKILL)


def wait_until(
    what: str,
    probe: Callable[[], bool],
    timeout: float,
    procs: Sequence[Proc] = (),
    interval: float = 0.1,
) -> float:
    """Poll ``probe`` until true; fail fast with the log tail if a process we wait on dies."""
    start = time.monotonic()
    while True:
        for p in procs:
            p.check_alive()
        try:
            if probe():
                return time.monotonic() - start
        except Exception:
            pass
        if time.monotonic() - start > timeout:
            logs = "\n".join(f"--- {p.name} ({p.log}):\n{tail(p.log)}" for p in procs)
            raise TimeoutError(f"{what} not ready after {timeout:.0f} s\n{logs}")
        time.sleep(interval)


def eventually(what: str, probe: Callable[[], Any], timeout: float) -> Any:
    """``probe()``'s first truthy value, polled every 0.2 s; AssertionError with the last
    value after ``timeout`` seconds (exceptions propagate: a broken probe is a failure)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout} s (last {last!r})")


def http_ok(
    url: str,
    token: str | None = None,
    cafile: Path | None = None,
    insecure: bool = False,
    timeout: float = 2.0,
) -> bool:
    """GET ``url``: did it answer 200? (TLS verified against ``cafile`` unless insecure)."""
    ctx: ssl.SSLContext | None = None
    if url.startswith("https"):
        ctx = ssl.create_default_context(cafile=str(cafile) if cafile else None)
        if insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=ctx) as resp:
            return int(resp.status) == 200
    except (urllib.error.URLError, OSError):
        return False
