"""kubelet's PodResources API v1: which pod's container holds which device.

kubelet serves it on ``/var/lib/kubelet/pod-resources/kubelet.sock`` (read-only, local, the
same source dcgm-exporter uses). It knows every device-plugin assignment on the node, ours or
NVIDIA's, which is what lets the agent attribute GPUs to pods without registering itself.

The client is a small Protocol: :class:`KubeletPodResources` (gRPC over the unix socket, the
default) and :class:`FakePodResources` (memory, scriptable failures) pass the same contract
tests (``tests/integration/deviceplugin/test_podresources.py``). Every failure is a
:class:`PodResourcesError` whose ``reason`` is one short word-like string (a metric label,
so its values stay few).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import grpc

from dsan.api.gen.podresources_v1 import podresources_pb2 as pb
from dsan.api.gen.podresources_v1 import podresources_pb2_grpc as pb_grpc

#: kubelet's own limit for this API's messages (podresources.DefaultMaxMsgSize); a node with
#: many pods answers List with more than gRPC's default 4 MiB.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class DeviceAssignment:
    """One container's devices of one resource, as kubelet's List reports them."""

    namespace: str
    pod: str
    container: str
    resource_name: str
    device_ids: tuple[str, ...]


class PodResourcesError(RuntimeError):
    """The API could not be asked; ``reason`` is short and stable (``socket-absent``,
    ``unavailable``, ``deadline-exceeded``, ``unimplemented``...)."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


class PodResourcesClient(Protocol):
    def list(self, timeout_s: float) -> list[DeviceAssignment]:
        """Every container's device assignments on the node."""

    def allocatable(self, timeout_s: float) -> dict[str, tuple[str, ...]]:
        """resource name -> device IDs kubelet may hand out; raises
        ``PodResourcesError("unimplemented")`` on kubelets without GetAllocatableResources."""

    def close(self) -> None: ...


def _reason(exc: grpc.RpcError) -> PodResourcesError:
    code = exc.code() if hasattr(exc, "code") else None
    name = code.name.lower().replace("_", "-") if code is not None else "error"
    details = exc.details() if hasattr(exc, "details") else ""
    return PodResourcesError(name, (details or "")[:200])


class KubeletPodResources:
    """The real API over ``unix://<socket>``. The channel is dropped after any failure and
    dialled afresh on the next call: a restarted kubelet then answers at once, instead of
    after gRPC's reconnect backoff (up to two minutes)."""

    def __init__(self, socket: Path | str) -> None:
        self.socket = Path(socket)
        self._channel: grpc.Channel | None = None
        self._stub: pb_grpc.PodResourcesListerStub | None = None
        self._lock = threading.Lock()

    def _lister(self) -> pb_grpc.PodResourcesListerStub:
        if not os.path.exists(self.socket):
            raise PodResourcesError("socket-absent", str(self.socket))
        with self._lock:
            if self._stub is None:
                self._channel = grpc.insecure_channel(
                    f"unix://{self.socket}",
                    options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)])
                self._stub = pb_grpc.PodResourcesListerStub(self._channel)
            return self._stub

    def _fail(self, exc: grpc.RpcError) -> PodResourcesError:
        self.close()
        return _reason(exc)

    def list(self, timeout_s: float) -> list[DeviceAssignment]:
        try:
            resp = self._lister().List(pb.ListPodResourcesRequest(), timeout=timeout_s)
        except grpc.RpcError as exc:
            raise self._fail(exc) from exc
        return [DeviceAssignment(p.namespace, p.name, c.name, d.resource_name,
                                 tuple(d.device_ids))
                for p in resp.pod_resources for c in p.containers for d in c.devices]

    def allocatable(self, timeout_s: float) -> dict[str, tuple[str, ...]]:
        try:
            resp = self._lister().GetAllocatableResources(pb.AllocatableResourcesRequest(),
                                                          timeout=timeout_s)
        except grpc.RpcError as exc:
            raise self._fail(exc) from exc
        out: dict[str, list[str]] = {}
        for d in resp.devices:
            out.setdefault(d.resource_name, []).extend(d.device_ids)
        return {k: tuple(v) for k, v in out.items()}

    def close(self) -> None:
        with self._lock:
            if self._channel is not None:
                self._channel.close()
            self._channel, self._stub = None, None


@dataclass
class FakePodResources:
    """In memory. ``fail`` makes every call raise with that reason until cleared;
    ``allocatable_supported=False`` behaves like a kubelet without GetAllocatableResources."""

    assignments: list[DeviceAssignment] = field(default_factory=list)
    allocatable_ids: dict[str, tuple[str, ...]] = field(default_factory=dict)
    allocatable_supported: bool = True
    fail: str | None = None
    calls: int = 0

    def list(self, timeout_s: float) -> list[DeviceAssignment]:
        self.calls += 1
        if self.fail:
            raise PodResourcesError(self.fail)
        return list(self.assignments)

    def allocatable(self, timeout_s: float) -> dict[str, tuple[str, ...]]:
        self.calls += 1
        if self.fail:
            raise PodResourcesError(self.fail)
        if not self.allocatable_supported:
            raise PodResourcesError("unimplemented")
        return dict(self.allocatable_ids)

    def close(self) -> None:
        pass
