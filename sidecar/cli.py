"""``dsan serve``: flags (every SidecarConfig field, with dashes) over an optional --config
YAML over the defaults; wire the sidecar and run it. Once the informers have synced, one
stable line goes to stdout: ``serving extender on <url> grpc on <host:port>``.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import queue
import signal
import sys
import time
from dataclasses import MISSING, fields
from typing import Any

from sidecar.config import ConfigError, SidecarConfig


def _bool(v: str) -> bool:
    if v.lower() in ("1", "true", "yes", "on"):
        return True
    if v.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {v!r}")


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "serve", help="run the scoring sidecar (extender HTTP + gRPC Score)",
        description="The DSAN scoring sidecar: kube-scheduler extender over HTTP, gRPC Score "
                    "service, /healthz /readyz /metrics. See docs/sidecar.md.")
    p.add_argument("--config", help="YAML file whose keys are SidecarConfig field names")
    p.add_argument("--ready-timeout", type=float, default=0.0,
                   help="exit 1 if the informers have not synced after this many seconds "
                        "(0 = wait forever)")
    for f in fields(SidecarConfig):
        default = f.default if f.default is not MISSING else None
        kind: Any = {bool: _bool, int: int, float: float}.get(type(default), str)
        p.add_argument("--" + f.name.replace("_", "-"), dest=f.name, type=kind,
                       default=argparse.SUPPRESS, help=f"(default: {default!r})")
    p.set_defaults(func=run)
    return p


def config_from_args(args: argparse.Namespace) -> SidecarConfig:
    base = SidecarConfig.from_yaml(args.config) if getattr(args, "config", None) else \
        SidecarConfig()
    given = {f.name: getattr(args, f.name) for f in fields(SidecarConfig) if hasattr(args, f.name)}
    return dataclasses.replace(base, **given)


def run(args: argparse.Namespace) -> int:
    try:
        cfg = config_from_args(args)
        logging.basicConfig(level=cfg.log_level.upper(),
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        from sidecar.app import Sidecar  # after config validation: imports kubernetes, grpc

        sidecar = Sidecar(cfg)
    except (ConfigError, OSError) as exc:
        print(f"dsan serve: {exc}", file=sys.stderr)
        return 2
    log = logging.getLogger("dsan.sidecar")
    signals = Signals()
    sidecar.start()
    log.info("listening: extender %s, grpc %s, policy %s; waiting for informers",
             sidecar.extender_url, sidecar.grpc_target, sidecar.service.policy.version)
    if sidecar.metrics_http is not None:
        log.info("metrics, healthz, readyz on %s:%d", cfg.metrics_address,
                 sidecar.metrics_http.port)
    timeout = args.ready_timeout or None
    while not signals.stopping(log) and not sidecar.wait_ready(0.2):
        if timeout is not None:
            timeout -= 0.2
            if timeout <= 0:
                print("dsan serve: informers did not sync in time", file=sys.stderr)
                sidecar.stop()
                return 1
    if not signals.stopping(log):
        print(f"serving extender on {sidecar.extender_url} grpc on "
              f"{sidecar.grpc_target or 'disabled'}", flush=True)
        while not signals.stopping(log, wait=True):
            pass
    log.info("draining (up to %.1f s), then exiting", cfg.drain_timeout_s)
    t0 = time.monotonic()
    left = sidecar.stop(drain_s=cfg.drain_timeout_s)
    if left:
        log.warning("drain timed out after %.1f s with %d HTTP request(s) in flight; exiting",
                    time.monotonic() - t0, left)
    else:
        log.info("drained in %.2f s; exiting", time.monotonic() - t0)
    return 0


class Signals:
    """SIGTERM and SIGINT stop the sidecar (after a drain); SIGHUP is logged and ignored (the
    config is read once at start). Handlers only queue the signal for the main thread to
    log: a handler that logs could interrupt a log call of the same thread."""

    def __init__(self) -> None:
        self._got: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._stop = False
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, lambda signum, _frame: self._got.put(signum))

    def stopping(self, log: logging.Logger, wait: bool = False) -> bool:
        """Whether a stop signal came (``wait``: up to a second for one); logs each signal."""
        try:
            while True:
                signum = self._got.get(timeout=1.0) if wait else self._got.get_nowait()
                wait = False
                name = signal.Signals(signum).name
                if signum == signal.SIGHUP:
                    log.info("SIGHUP received: ignored (the config is read only at start; "
                             "restart the sidecar to change it)")
                else:
                    log.info("%s received", name)
                    self._stop = True
        except queue.Empty:
            return self._stop
