"""A test PodResources server: kubelet's PodResourcesLister v1 (the real proto, generated stubs)
on a unix socket, answering from a :class:`PodResourcesState` that a test or the test kubelet
fills in. ``stop()`` removes the socket, as kubelet's does when it goes down."""

from __future__ import annotations

import threading
import time
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from dsan.api.gen.podresources_v1 import podresources_pb2 as pb
from dsan.api.gen.podresources_v1 import podresources_pb2_grpc as pb_grpc

#: (namespace, pod, container, resource name, device IDs)
Assignment = tuple[str, str, str, str, tuple[str, ...]]


@dataclass
class PodResourcesState:
    assignments: list[Assignment] = field(default_factory=list)
    #: resource name -> device IDs kubelet may hand out
    allocatable: dict[str, tuple[str, ...]] = field(default_factory=dict)
    allocatable_supported: bool = True
    #: seconds each call waits before answering (a hung kubelet)
    delay_s: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)


class LocalPodResources(pb_grpc.PodResourcesListerServicer):
    def __init__(self, socket: Path, state: PodResourcesState | None = None) -> None:
        self.socket = socket
        self.state = state or PodResourcesState()
        self.calls: list[str] = []
        self._server: grpc.Server | None = None

    def List(self, request: pb.ListPodResourcesRequest, context: grpc.ServicerContext
             ) -> pb.ListPodResourcesResponse:
        self.calls.append("List")
        time.sleep(self.state.delay_s)
        pods: dict[tuple[str, str], pb.PodResources] = {}
        with self.state.lock:
            assignments = list(self.state.assignments)
        for ns, pod, container, resource, ids in assignments:
            p = pods.setdefault((ns, pod), pb.PodResources(name=pod, namespace=ns))
            c = next((c for c in p.containers if c.name == container), None)
            if c is None:
                c = p.containers.add(name=container)
            c.devices.add(resource_name=resource, device_ids=list(ids),
                          topology=pb.TopologyInfo(nodes=[pb.NUMANode(ID=0)]))
        return pb.ListPodResourcesResponse(pod_resources=list(pods.values()))

    def GetAllocatableResources(self, request: pb.AllocatableResourcesRequest,
                                context: grpc.ServicerContext) -> pb.AllocatableResourcesResponse:
        self.calls.append("GetAllocatableResources")
        time.sleep(self.state.delay_s)
        if not self.state.allocatable_supported:  # a kubelet before the feature
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "method not implemented")
        with self.state.lock:
            alloc = dict(self.state.allocatable)
        return pb.AllocatableResourcesResponse(
            devices=[pb.ContainerDevices(resource_name=r, device_ids=list(ids))
                     for r, ids in alloc.items()],
            cpu_ids=[0, 1])

    def start(self) -> LocalPodResources:
        self.socket.parent.mkdir(parents=True, exist_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_PodResourcesListerServicer_to_server(self, server)
        server.add_insecure_port(f"unix://{self.socket}")
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=0).wait(5)
            self._server = None
        self.socket.unlink(missing_ok=True)
