"""A test kubelet: a real gRPC Registration server on a unix socket in a temp dir that does
what kubelet's device manager does: accepts Register, dials the plugin's socket, asks for its
options, streams ListAndWatch in the background, and lets the test call GetPreferredAllocation,
Allocate and PreStartContainer. ``restart()`` behaves like a kubelet restart: it deletes every
socket in the directory and serves a fresh ``kubelet.sock``.

Given a :class:`PodResourcesState`, it keeps it as kubelet keeps its PodResources API: every
device a plugin streams is allocatable under the plugin's resource, and :meth:`admit` (kubelet
admitting a container: Allocate on the plugin, then record who holds what) is listed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent import futures
from pathlib import Path

import grpc

from dsan.api.gen.deviceplugin_v1beta1 import api_pb2 as pb
from dsan.api.gen.deviceplugin_v1beta1 import api_pb2_grpc as pb_grpc
from tests.integration.deviceplugin.podresources_server import PodResourcesState

Devices = dict[str, str]  # ID -> health


class LocalKubelet(pb_grpc.RegistrationServicer):
    def __init__(self, plugin_dir: Path, pod_resources: PodResourcesState | None = None) -> None:
        self.dir = plugin_dir
        self.pod_resources = pod_resources
        self.socket = plugin_dir / "kubelet.sock"
        self.registrations: list[pb.RegisterRequest] = []
        self.options: pb.DevicePluginOptions | None = None
        #: (monotonic receive time, devices) per ListAndWatch message, across registrations.
        self.updates: list[tuple[float, Devices]] = []
        self.topology: dict[str, list[int]] = {}
        self._cond = threading.Condition()
        self._server: grpc.Server | None = None
        self._channel: grpc.Channel | None = None

    # --- Registration service (called by the plugin) ------------------------------------------
    def Register(self, request: pb.RegisterRequest, context: grpc.ServicerContext) -> pb.Empty:
        if request.version != "v1beta1":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"bad version {request.version}")
        with self._cond:
            self.registrations.append(request)
            self._cond.notify_all()
        # Like kubelet: answer first, then connect to the plugin asynchronously.
        threading.Thread(target=self._connect, args=(request.endpoint,), daemon=True).start()
        return pb.Empty()

    def _connect(self, endpoint: str) -> None:
        resource = self.registrations[-1].resource_name
        ch = grpc.insecure_channel(f"unix://{self.dir / endpoint}")
        self._channel = ch
        stub = pb_grpc.DevicePluginStub(ch)
        try:
            self.options = stub.GetDevicePluginOptions(pb.Empty(), timeout=5)
            for msg in stub.ListAndWatch(pb.Empty()):
                now = time.monotonic()
                if self.pod_resources is not None:
                    with self.pod_resources.lock:
                        self.pod_resources.allocatable[resource] = tuple(
                            d.ID for d in msg.devices)
                with self._cond:
                    self.updates.append((now, {d.ID: d.health for d in msg.devices}))
                    self.topology = {d.ID: [n.ID for n in d.topology.nodes] for d in msg.devices}
                    self._cond.notify_all()
        except grpc.RpcError:
            pass  # the plugin went away or we were stopped; a new Register reconnects

    # --- what a test uses ------------------------------------------------------------------------
    def stub(self) -> pb_grpc.DevicePluginStub:
        assert self.registrations, "plugin never registered"
        ch = grpc.insecure_channel(f"unix://{self.dir / self.registrations[-1].endpoint}")
        return pb_grpc.DevicePluginStub(ch)

    def admit(self, namespace: str, pod: str, container: str,
              ids: list[str]) -> pb.AllocateResponse:
        """What kubelet does for a container that requests the plugin's resource."""
        resp = self.stub().Allocate(pb.AllocateRequest(container_requests=[
            pb.ContainerAllocateRequest(devices_ids=ids)]), timeout=5)
        if self.pod_resources is not None:
            with self.pod_resources.lock:
                self.pod_resources.assignments.append(
                    (namespace, pod, container, self.registrations[-1].resource_name,
                     tuple(ids)))
        return resp

    def remove_pod(self, namespace: str, pod: str) -> None:
        assert self.pod_resources is not None
        with self.pod_resources.lock:
            self.pod_resources.assignments = [
                a for a in self.pod_resources.assignments if (a[0], a[1]) != (namespace, pod)]

    def wait_for(self, pred: Callable[[], bool], timeout: float = 10.0) -> None:
        with self._cond:
            if not self._cond.wait_for(pred, timeout=timeout):
                raise TimeoutError(f"condition not met in {timeout} s; "
                                   f"registrations={len(self.registrations)} "
                                   f"last update={self.latest()}")

    def latest(self) -> Devices:
        return self.updates[-1][1] if self.updates else {}

    def wait_for_health(self, dev: str, health: str, timeout: float = 10.0) -> float:
        """Block until the newest ListAndWatch says ``dev`` is ``health``; return that time."""
        self.wait_for(lambda: self.latest().get(dev) == health, timeout)
        return self.updates[-1][0]

    # --- lifecycle ---------------------------------------------------------------------------
    def start(self) -> LocalKubelet:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_RegistrationServicer_to_server(self, server)
        server.add_insecure_port(f"unix://{self.socket}")
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=0).wait(5)
            self._server = None
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        # kubelet removes every socket in the directory when it goes down or comes back.
        for sock in self.dir.glob("*.sock"):
            sock.unlink(missing_ok=True)

    def restart(self) -> None:
        self.stop()
        self.start()


