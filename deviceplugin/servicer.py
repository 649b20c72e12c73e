"""The kubelet device-plugin gRPC service (v1beta1). It only translates: every decision is
the resource manager's, and a bad request gets INVALID_ARGUMENT with the manager's message.

A ListAndWatch stream holds one of the server's worker threads for its whole life, so the
number of open streams is capped (``max_watch_streams``) and :class:`~deviceplugin.kubelet.
PluginServer` sizes its pool to that cap plus threads only unary calls can use: however many
watchers a local client opens, kubelet's Allocate is served at once, and the extra streams
are refused with RESOURCE_EXHAUSTED.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import grpc

from deviceplugin.resources import AllocationError, DeviceView, ResourceManager
from dsan.api.gen.deviceplugin_v1beta1 import api_pb2 as pb
from dsan.api.gen.deviceplugin_v1beta1 import api_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

#: ListAndWatch re-checks for shutdown this often even without changes.
_STREAM_TICK_S = 1.0


def _device(d: DeviceView) -> pb.Device:
    topo = None
    if d.numa_node is not None:
        topo = pb.TopologyInfo(nodes=[pb.NUMANode(ID=d.numa_node)])
    return pb.Device(ID=d.id, health=d.health, topology=topo)


class DevicePluginServicer(pb_grpc.DevicePluginServicer):
    def __init__(self, manager: ResourceManager, pre_start_required: bool = False,
                 max_watch_streams: int = 4) -> None:
        self.manager = manager
        self.pre_start_required = pre_start_required
        self.max_watch_streams = max_watch_streams
        self.stopping = threading.Event()
        self.streams_sent = 0  # ListAndWatch messages, for tests and metrics
        self.streams_refused = 0
        self.open_streams = 0
        self._streams_lock = threading.Lock()

    def GetDevicePluginOptions(self, request: pb.Empty, context: grpc.ServicerContext
                               ) -> pb.DevicePluginOptions:
        return pb.DevicePluginOptions(pre_start_required=self.pre_start_required,
                                      get_preferred_allocation_available=True)

    def ListAndWatch(self, request: pb.Empty, context: grpc.ServicerContext
                     ) -> Iterator[pb.ListAndWatchResponse]:
        with self._streams_lock:
            admitted = self.open_streams < self.max_watch_streams
            if admitted:
                self.open_streams += 1
            else:
                self.streams_refused += 1
        if not admitted:
            n = self.streams_refused
            if n & (n - 1) == 0:  # 1st, 2nd, 4th...: a flood of watchers is no log flood
                log.warning("ListAndWatch refused (%d so far): %d streams already open", n,
                            self.max_watch_streams)
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"ListAndWatch: {self.max_watch_streams} streams already open "
                          f"(max_watch_streams); kubelet needs one")
        # A client that goes away ends the wait at once, not at the next tick, so its
        # slot and its thread are free again immediately.
        gone = threading.Event()

        def leave() -> None:
            gone.set()
            self.manager.wake()

        context.add_callback(leave)
        try:
            seen = -1
            while not self.stopping.is_set() and not gone.is_set() and context.is_active():
                version = self.manager.version
                if version != seen:
                    seen = version
                    self.streams_sent += 1
                    yield pb.ListAndWatchResponse(
                        devices=[_device(d) for d in self.manager.devices()])
                self.manager.wait_for_change(seen, _STREAM_TICK_S, gone)
        finally:
            with self._streams_lock:
                self.open_streams -= 1

    def GetPreferredAllocation(self, request: pb.PreferredAllocationRequest,
                               context: grpc.ServicerContext) -> pb.PreferredAllocationResponse:
        out = pb.PreferredAllocationResponse()
        for req in request.container_requests:
            try:
                ids = self.manager.preferred(list(req.available_deviceIDs),
                                             list(req.must_include_deviceIDs),
                                             int(req.allocation_size))
            except AllocationError as exc:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"GetPreferredAllocation: {exc}")
            out.container_responses.add(deviceIDs=ids)
        return out

    def Allocate(self, request: pb.AllocateRequest, context: grpc.ServicerContext
                 ) -> pb.AllocateResponse:
        out = pb.AllocateResponse()
        try:
            allocs = self.manager.allocate_request(
                [list(req.devices_ids) for req in request.container_requests])
        except AllocationError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"Allocate: {exc}")
        for alloc in allocs:
            resp = out.container_responses.add()
            resp.envs.update(alloc.envs)
            for container_path, host_path, perms in alloc.device_specs:
                resp.devices.add(container_path=container_path, host_path=host_path,
                                 permissions=perms)
            for name in alloc.cdi_devices:
                resp.cdi_devices.add(name=name)
        return out

    def PreStartContainer(self, request: pb.PreStartContainerRequest,
                          context: grpc.ServicerContext) -> pb.PreStartContainerResponse:
        try:
            self.manager.check_known(list(request.devices_ids))
        except AllocationError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"PreStartContainer: {exc}")
        return pb.PreStartContainerResponse()
