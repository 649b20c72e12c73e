"""Serving the plugin socket and registering with kubelet, again whenever either goes away.

kubelet, when it restarts, deletes every socket in the device-plugins directory and creates
a fresh ``kubelet.sock``; plugins must notice and register again. We poll (``stat`` is
cheap) for two things every ``socket_check_s``: our own socket missing -> serve again and
re-register; kubelet's socket replaced (new inode) -> re-register. A kubelet that is absent or
refuses is retried with exponential backoff capped at ``register_backoff_max_s``.
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent import futures
from pathlib import Path

import grpc

from deviceplugin.config import PluginConfig
from deviceplugin.resources import ResourceManager
from deviceplugin.servicer import DevicePluginServicer
from dsan.api.gen.deviceplugin_v1beta1 import api_pb2 as pb
from dsan.api.gen.deviceplugin_v1beta1 import api_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)
API_VERSION = "v1beta1"
_BACKOFF_START_S = 0.2
#: Worker threads only unary calls can use: the pool is ``max_watch_streams`` (each open
#: stream holds one) plus these. kubelet serialises its Allocate / GetPreferredAllocation /
#: PreStartContainer calls per resource, so a few are plenty.
UNARY_WORKERS = 4


def _inode(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


class PluginServer:
    def __init__(self, manager: ResourceManager, config: PluginConfig) -> None:
        self.manager = manager
        self.config = config
        self.servicer = DevicePluginServicer(manager, config.pre_start_required,
                                             config.max_watch_streams)
        self._server: grpc.Server | None = None
        self._server_inode: tuple[int, int] | None = None
        self._registered_with: tuple[int, int] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.registrations = 0
        self.serve_count = 0
        self.last_error = ""

    # --- serving ------------------------------------------------------------------------------
    def _serve(self) -> None:
        self._stop_server()
        path = self.config.plugin_socket_path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)  # a stale socket from a previous run
        workers = self.config.max_watch_streams + UNARY_WORKERS
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers,
                                                        thread_name_prefix="dp"))
        pb_grpc.add_DevicePluginServicer_to_server(self.servicer, server)
        server.add_insecure_port(f"unix://{path}")
        server.start()
        self._server = server
        self._server_inode = _inode(path)
        self.serve_count += 1
        log.info("serving device plugin on %s", path)

    def _stop_server(self) -> None:
        if self._server is not None:
            self._server.stop(grace=0).wait(5)
            self._server = None

    @property
    def registered(self) -> bool:
        """Registered with the kubelet whose socket is there now (readiness)."""
        return self._registered_with is not None

    # --- registration -------------------------------------------------------------------------
    def _register(self) -> None:
        opts = pb.DevicePluginOptions(pre_start_required=self.config.pre_start_required,
                                      get_preferred_allocation_available=True)
        with grpc.insecure_channel(f"unix://{self.config.kubelet_socket_path}") as ch:
            pb_grpc.RegistrationStub(ch).Register(
                pb.RegisterRequest(version=API_VERSION, endpoint=self.config.endpoint,
                                   resource_name=self.config.resource_name, options=opts),
                timeout=5.0)
        self.registrations += 1
        log.info("registered %s with kubelet at %s", self.config.resource_name,
                 self.config.kubelet_socket_path)

    # --- the watch loop -----------------------------------------------------------------------
    def step(self) -> float:
        """One pass of the loop; returns how long to wait before the next one."""
        own = _inode(self.config.plugin_socket_path)
        if self._server is None or own is None or own != self._server_inode:
            self._serve()
            self._registered_with = None  # kubelet must learn about the new socket
        kubelet = _inode(self.config.kubelet_socket_path)
        if kubelet is None:
            self._registered_with = None
            return self.config.socket_check_s
        if kubelet != self._registered_with:
            try:
                self._register()
            except grpc.RpcError as exc:
                self.last_error = f"{exc.code()}: {exc.details()}"
                log.warning("registration failed (%s); retrying", self.last_error)
                return -1.0  # signal: back off
            self._registered_with = kubelet
            self.last_error = ""  # answered: /readyz must not give it as the reason later
        return self.config.socket_check_s

    def _run(self) -> None:
        backoff = _BACKOFF_START_S
        while not self._stop.is_set():
            try:
                wait = self.step()
            except Exception as exc:  # keep the agent alive; the next pass retries
                log.exception("plugin server loop error")
                self.last_error = str(exc)
                wait = -1.0
            if wait < 0:
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self.config.register_backoff_max_s)
            else:
                backoff = _BACKOFF_START_S
                self._stop.wait(wait)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="plugin-server", daemon=True)
        self._thread.start()

    @property
    def crashed(self) -> bool:
        """Its thread ended without stop() (a bug): /healthz fails, kubelet restarts us."""
        return self._thread is not None and not self._thread.is_alive() and not self._stop.is_set()

    def stop(self) -> None:
        self._stop.set()
        self.servicer.stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._stop_server()
        self.config.plugin_socket_path.unlink(missing_ok=True)
