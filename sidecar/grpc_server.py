"""The gRPC Scorer service (proto/scorer/v1/scorer.proto) and the standard gRPC health service.

Methods take raw bytes, so a wrong protobuf gets an INVALID_ARGUMENT that says so (and is
counted), not grpcio's generic "Exception deserializing request".
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent import futures
from typing import Protocol, TypeVar

import grpc
import numpy as np
import numpy.typing as npt
from google.protobuf.message import DecodeError, Message
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from dsan.api.gen.scorer_v1 import scorer_pb2
from dsan.core.snapshot import PodSpec
from sidecar.podspec import PodSpecMemo, podspec_from_parts
from sidecar.preemption import Proposal, Reclamation
from sidecar.scoring import NodeRows, ScoreResult
from sidecar.service import RequestError, ScoringService

SERVICE_NAME = "dsan.scorer.v1.Scorer"
_CODES = {c.name: c for c in grpc.StatusCode}
M = TypeVar("M", bound=Message)


class ScoreHandler:
    def __init__(self, service: ScoringService, reclamation: Reclamation | None = None) -> None:
        self.service = service
        #: The preemption choice, shared with the HTTP extender's preempt verb.
        self.reclamation = reclamation
        #: Pods parsed once per (requests, annotations, priority).
        self._specs = PodSpecMemo()

    def _podspec(self, pod: scorer_pb2.Pod) -> PodSpec:
        requests, annotations = tuple(pod.requests.items()), tuple(pod.annotations.items())
        name = f"{pod.namespace or 'default'}/{pod.name}"
        models = self.service.cache.models
        return self._specs.lookup(
            (requests, annotations, pod.priority), name, models,
            lambda: podspec_from_parts(name=name, requests=dict(requests),
                                       annotations=dict(annotations), priority=pod.priority,
                                       gpu_models=models))

    def node_table(self, raw: bytes, context: grpc.ServicerContext) -> bytes:
        def serve() -> tuple[bytes, None]:
            _decode(scorer_pb2.NodeTableRequest, raw)
            with self.service.cache.scoring_lock:  # the names in the rows' order
                pub = self.service.cache.snapshot()
                out = scorer_pb2.NodeTableResponse(epoch=pub.table_epoch, node_names=pub.snap.names)
            return out.SerializeToString(), None

        return _answer(context, self.service.handle("grpc", "node_table", serve))

    def score(self, raw: bytes, context: grpc.ServicerContext) -> bytes:
        out = _answer(context, self.service.handle("grpc", "score", lambda: self._score(raw)))
        # The winner's assumption once the RPC is done (grpcio runs RPC callbacks on its
        # poller thread after the status went out); the next request settles it first anyway.
        if not context.add_callback(self.service.settle):
            self.service.settle()
        return out

    def _score(self, raw: bytes) -> tuple[bytes, ScoreResult]:
        req = _decode(scorer_pb2.ScoreRequest, raw)
        pod = req.pod
        if not pod.name:
            raise RequestError("bad_pod", "ScoreRequest.pod.name is empty")
        spec = self._podspec(pod)
        # No assume_key: a gRPC pod carries no schedulerName to check, unlike the extender's.
        res = self.service.score("grpc", spec, pod.uid or spec.name, candidates(req), 100)
        tail = scorer_pb2.ScoreResponse(
            policy=self.service.policy.version, snapshot_version=res.version,
            fallback_nodes=res.fallback, unknown_nodes=res.unknown,
            node_table_epoch=res.table_epoch).SerializeToString()
        return encode_scores(res.scores) + tail, res

    def reclaim(self, raw: bytes, context: grpc.ServicerContext) -> bytes:
        return _answer(context, self.service.handle("grpc", "reclaim",
                                                    lambda: self._reclaim(raw)))

    def _reclaim(self, raw: bytes) -> tuple[bytes, None]:
        if self.reclamation is None:
            raise RequestError("bad_request", "this sidecar serves no Reclaim")
        req = _decode(scorer_pb2.ReclaimRequest, raw)
        if not req.pod.name:
            raise RequestError("bad_pod", "ReclaimRequest.pod.name is empty")
        chosen = self.reclamation.choose(req.pod.priority, proposals(req))
        out = scorer_pb2.ReclaimResponse(node="" if chosen is None else chosen.node,
                                         reclaimer=self.reclamation.reclaimer.name)
        return out.SerializeToString(), None

    def filter(self, raw: bytes, context: grpc.ServicerContext) -> bytes:
        return _answer(context, self.service.handle("grpc", "filter",
                                                    lambda: self._filter(raw)))

    def _filter(self, raw: bytes) -> tuple[bytes, None]:
        req = _decode(scorer_pb2.FilterRequest, raw)
        if not req.pod.name:
            raise RequestError("bad_pod", "FilterRequest.pod.name is empty")
        names = list(req.node_names)
        if not all(names):
            raise RequestError("bad_request", "FilterRequest.node_names has an empty name")
        _, refused = self.service.engine.filter(self._podspec(req.pod), names, fit=False)
        return scorer_pb2.FilterResponse(
            refused=refused, policy=self.service.policy.version).SerializeToString(), None


def proposals(req: scorer_pb2.ReclaimRequest) -> list[Proposal]:
    """The candidates as the preempt verb's proposals (victims looked up by UID), with the
    limits of its JSON: a node name, UIDs of 1..128 characters. As there, a candidate without
    victims is allowed and never chosen."""
    out = []
    for i, c in enumerate(req.candidates):
        where = f"ReclaimRequest.candidates[{i}]"
        if not c.node:
            raise RequestError("bad_request", f"{where}.node is empty")
        if any(not 0 < len(u) <= 128 for u in c.victim_uids):
            raise RequestError("bad_request", f"{where}.victim_uids must be 1..128 characters")
        if c.pdb_violations < 0:
            raise RequestError("bad_request", f"{where}.pdb_violations is negative")
        out.append(Proposal(c.node, tuple(c.victim_uids), c.pdb_violations))
    return out


def _decode(message: type[M], raw: bytes) -> M:
    try:
        return message.FromString(raw)
    except DecodeError as exc:
        raise RequestError("bad_protobuf", f"request is not a "
                           f"{message.DESCRIPTOR.full_name}: {exc}") from None


def _answer(context: grpc.ServicerContext, out: bytes | RequestError) -> bytes:
    """The reply, or the RPC ended with the error's status; an internal error's request id
    also goes out as trailing metadata (``x-request-id``)."""
    if not isinstance(out, RequestError):
        return out
    if out.request_id:
        context.set_trailing_metadata((("x-request-id", out.request_id),))
    context.abort(_CODES[out.grpc_code], out.message)
    raise out  # abort() raises; this line is for the type checker


def candidates(req: scorer_pb2.ScoreRequest) -> Sequence[str] | NodeRows:
    """The request's candidates: the node-table rows when it has them, else the names (the
    repeated field itself: a list copy would build every name twice per request)."""
    if not req.node_indices:
        return req.node_names
    if len(req.node_names):
        raise RequestError("bad_request", "ScoreRequest sets both node_names and node_indices")
    buf = req.node_indices
    if len(buf) % 4:
        raise RequestError("bad_request", f"node_indices has {len(buf)} bytes, not 4 per node")
    return NodeRows(np.frombuffer(buf, dtype="<u4").astype(np.int64), req.node_table_epoch)


def encode_scores(scores: npt.NDArray[np.int64]) -> bytes:
    """ScoreResponse field 1 (packed repeated int32) straight from the array: scores 0..100
    are one-byte varints, so the payload is the array as uint8, with no per-node Python int.
    Protobuf messages are concatenations of fields: the caller appends the others."""
    if scores.size and (scores.min() < 0 or scores.max() > 127):
        raise ValueError("scores must be within 0..127 to be one-byte varints")
    payload = scores.astype(np.uint8).tobytes()
    return _SCORES_TAG + _varint(len(payload)) + payload if payload else b""


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_SCORES_TAG = bytes([(1 << 3) | 2])  # field 1, length-delimited (packed)


class Servicer(Protocol):
    """The methods the server routes, on raw request bytes."""

    def score(self, raw: bytes, context: grpc.ServicerContext) -> bytes: ...

    def node_table(self, raw: bytes, context: grpc.ServicerContext) -> bytes: ...

    def reclaim(self, raw: bytes, context: grpc.ServicerContext) -> bytes: ...

    def filter(self, raw: bytes, context: grpc.ServicerContext) -> bytes: ...


class GrpcServer:
    def __init__(self, host: str, port: int, handler: Servicer,
                 workers: int = 4, max_message_bytes: int = 8 * 1024 * 1024) -> None:
        opts = [("grpc.max_receive_message_length", max_message_bytes),
                ("grpc.max_send_message_length", max_message_bytes),
                ("grpc.so_reuseport", 0)]
        self.pool = futures.ThreadPoolExecutor(max_workers=workers)
        self.server = grpc.server(self.pool, options=opts)
        methods = {name: grpc.unary_unary_rpc_method_handler(
            fn, request_deserializer=None, response_serializer=None)
            for name, fn in (("Score", handler.score), ("NodeTable", handler.node_table),
                             ("Reclaim", handler.reclaim), ("Filter", handler.filter))}
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE_NAME, methods),))
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        self.set_serving(False)
        self.port = self.server.add_insecure_port(f"{host}:{port}")
        if self.port == 0:
            raise OSError(f"gRPC server cannot listen on {host}:{port}")

    def set_serving(self, serving: bool) -> None:
        status = (health_pb2.HealthCheckResponse.SERVING if serving
                  else health_pb2.HealthCheckResponse.NOT_SERVING)
        for name in ("", SERVICE_NAME):
            self.health.set(name, status)

    def start(self) -> None:
        self.server.start()

    def stop(self, grace: float = 1.0) -> None:
        self.server.stop(grace).wait(grace + 1)
        self.pool.shutdown(wait=False)
