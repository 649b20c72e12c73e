"""A stand-in for NVIDIA's device plugin: serves ``nvidia-gpu.sock`` in the device-plugins
directory and registers ``nvidia.com/gpu`` with kubelet, advertising the node's GPUs by UUID
(NVIDIA's default device-ID strategy) and answering Allocate with NVIDIA_VISIBLE_DEVICES. Only
what the coexistence tests need: it never goes Unhealthy and does not re-register."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc

from dsan.api.gen.deviceplugin_v1beta1 import api_pb2 as pb
from dsan.api.gen.deviceplugin_v1beta1 import api_pb2_grpc as pb_grpc

ENDPOINT = "nvidia-gpu.sock"


class FakeNvidiaPlugin(pb_grpc.DevicePluginServicer):
    def __init__(self, plugin_dir: Path, uuids: list[str]) -> None:
        self.dir = plugin_dir
        self.uuids = uuids
        self.allocated: list[list[str]] = []
        self._stop = threading.Event()
        self._server: grpc.Server | None = None

    def GetDevicePluginOptions(self, request: pb.Empty, context: grpc.ServicerContext
                               ) -> pb.DevicePluginOptions:
        return pb.DevicePluginOptions()

    def ListAndWatch(self, request: pb.Empty, context: grpc.ServicerContext
                     ) -> Iterator[pb.ListAndWatchResponse]:
        yield pb.ListAndWatchResponse(devices=[pb.Device(ID=u, health="Healthy")
                                               for u in self.uuids])
        while not self._stop.wait(0.1) and context.is_active():
            pass

    def Allocate(self, request: pb.AllocateRequest, context: grpc.ServicerContext
                 ) -> pb.AllocateResponse:
        out = pb.AllocateResponse()
        for req in request.container_requests:
            self.allocated.append(list(req.devices_ids))
            out.container_responses.add(envs={"NVIDIA_VISIBLE_DEVICES": ",".join(req.devices_ids)})
        return out

    def start(self) -> FakeNvidiaPlugin:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_DevicePluginServicer_to_server(self, server)
        server.add_insecure_port(f"unix://{self.dir / ENDPOINT}")
        server.start()
        self._server = server
        with grpc.insecure_channel(f"unix://{self.dir / 'kubelet.sock'}") as ch:
            pb_grpc.RegistrationStub(ch).Register(pb.RegisterRequest(
                version="v1beta1", endpoint=ENDPOINT, resource_name="nvidia.com/gpu",
                options=pb.DevicePluginOptions()), timeout=5)
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._server is not None:
            self._server.stop(grace=0).wait(5)
        (self.dir / ENDPOINT).unlink(missing_ok=True)
