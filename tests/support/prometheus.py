"""Start the real Prometheus (Debian's ``/usr/bin/prometheus``) for a test, query it, stop it.

Usage::

    with PrometheusServer.start(["127.0.0.1:9400"], tmp_path, scrape_interval="1s") as prom:
        prom.wait_for_targets_up()
        value = prom.wait_for_value('DCGM_FI_DEV_GPU_UTIL{gpu="0"}')

It listens on a free 127.0.0.1 port with its TSDB in the given folder, scrapes every target
as a static job every ``scrape_interval``, and is stopped (SIGTERM, then SIGKILL) on exit.
Readiness is ``/-/ready``; queries go through ``/api/v1/query``. A missing binary raises
:class:`PrometheusUnavailable`; call :func:`require_prometheus` to turn that into a skip.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

DEFAULT_BINARY = "/usr/bin/prometheus"


class PrometheusUnavailable(RuntimeError):
    """The prometheus binary is not installed (``make deps`` installs Debian's package)."""


def find_binary(binary: str | None = None) -> str | None:
    candidate = binary or os.environ.get("DSAN_PROMETHEUS") or DEFAULT_BINARY
    if Path(candidate).is_file() and os.access(candidate, os.X_OK):
        return candidate
    return shutil.which("prometheus")


def require_prometheus() -> str:
    """The binary's path, or a pytest skip naming what is missing."""
    import pytest

    path = find_binary()
    if path is None:
        pytest.skip("prometheus not installed (run `make deps`: Debian package `prometheus`)")
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _config(targets: Sequence[str], scrape_interval: str, job: str, metrics_path: str) -> str:
    # JSON is valid YAML, so no YAML writer is needed.
    import json

    return json.dumps({
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
        "scrape_configs": [{
            "job_name": job,
            "metrics_path": metrics_path,
            "scrape_interval": scrape_interval,
            "scrape_timeout": scrape_interval,
            "static_configs": [{"targets": list(targets)}],
        }],
    }, indent=1)


@dataclass
class PrometheusServer:
    """A running Prometheus; build it with :meth:`start`."""

    process: subprocess.Popen[bytes]
    port: int
    workdir: Path
    log_path: Path
    client: httpx.Client = field(repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @classmethod
    def start(
        cls,
        targets: Sequence[str],
        workdir: Path,
        *,
        scrape_interval: str = "1s",
        job: str = "dsan",
        metrics_path: str = "/metrics",
        binary: str | None = None,
        ready_timeout_s: float = 30.0,
    ) -> PrometheusServer:
        path = find_binary(binary)
        if path is None:
            raise PrometheusUnavailable("prometheus binary not found; run `make deps`")
        workdir = Path(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        cfg = workdir / "prometheus.yml"
        cfg.write_text(_config(targets, scrape_interval, job, metrics_path))
        port = free_port()
        log_path = workdir / "prometheus.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [
                    path,
                    f"--config.file={cfg}",
                    f"--storage.tsdb.path={workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # our own group: a stop never reaches the test runner
            )
        server = cls(proc, port, workdir, log_path, httpx.Client(timeout=5.0))
        try:
            server._wait_ready(ready_timeout_s)
        except BaseException:
            server.stop()
            raise
        return server

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"prometheus exited with {self.process.returncode}: {self.log_tail()}"
                )
            try:
                if self.client.get(f"{self.url}/-/ready").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"prometheus not ready after {timeout_s} s: {self.log_tail()}")

    def log_tail(self, n: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    # --- HTTP API ---------------------------------------------------------------------------
    def _get(self, path: str, params: dict[str, str] | None = None) -> Any:
        r = self.client.get(f"{self.url}{path}", params=params)
        body = r.json()
        if body.get("status") != "success":
            raise RuntimeError(f"prometheus {path} {params}: {body.get('error', body)}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query; each result is ``{"metric": {labels}, "value": [ts, "v"]}``."""
        data = self._get("/api/v1/query", {"query": expr})
        return list(data["result"])

    def metadata(self, metric: str) -> list[dict[str, Any]]:
        """What the scrape said about ``metric`` (``type``, ``help``), per target."""
        return list(self._get("/api/v1/targets/metadata", {"metric": metric}))

    def targets(self) -> list[dict[str, Any]]:
        return list(self._get("/api/v1/targets")["activeTargets"])

    def wait_for_targets_up(self, timeout_s: float = 30.0) -> list[dict[str, Any]]:
        """Block until every configured target has been scraped successfully."""
        deadline = time.monotonic() + timeout_s
        active: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            active = self.targets()
            if active and all(t.get("health") == "up" for t in active):
                return active
            time.sleep(0.2)
        raise TimeoutError(f"targets not up after {timeout_s} s: {active}")

    def wait_for(self, expr: str, timeout_s: float = 30.0) -> list[dict[str, Any]]:
        """Block until ``expr`` returns at least one series; return them."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            result = self.query(expr)
            if result:
                return result
            time.sleep(0.2)
        raise TimeoutError(f"no series for {expr!r} after {timeout_s} s")

    def wait_for_value(self, expr: str, timeout_s: float = 30.0) -> float:
        """The value of the first series ``expr`` returns."""
        return float(self.wait_for(expr, timeout_s)[0]["value"][1])

    # --- lifecycle --------------------------------------------------------------------------
    def stop(self, timeout_s: float = 10.0) -> None:
        self.client.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout_s)

    def __enter__(self) -> PrometheusServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextmanager
def running_prometheus(
    targets: Sequence[str], workdir: Path, **kw: Any
) -> Iterator[PrometheusServer]:
    """Context-manager shorthand for :meth:`PrometheusServer.start`."""
    server = PrometheusServer.start(targets, workdir, **kw)
    try:
        yield server
    finally:
        server.stop()
