"""The gRPC Score service (proto/scorer/v1/scorer.proto) and the standard gRPC health service.

The Score method is registered with a raw-bytes request deserializer so a wrong protobuf gets
an INVALID_ARGUMENT status that says so (and is counted), instead of grpcio's generic
"Exception deserializing request".
"""

from __future__ import annotations

import time
from concurrent import futures
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from dsan.api.gen.scorer_v1 import scorer_pb2
from sidecar.podspec import PodError, podspec_from_parts
from sidecar.service import RequestError, ScoringService

SERVICE_NAME = "dsan.scorer.v1.Scorer"
_CODES = {c.name: c for c in grpc.StatusCode}


class ScoreHandler:
    def __init__(self, service: ScoringService) -> None:
        self.service = service
        self.metrics = service.metrics

    def score(self, raw: bytes, context: grpc.ServicerContext) -> scorer_pb2.ScoreResponse:
        t0 = time.perf_counter()
        try:
            resp, res = self._score(raw)
        except RequestError as err:
            self.service.refuse("grpc", err)
            context.abort(_CODES[err.grpc_code], err.message)
        self.metrics.requests.labels("grpc", "score").inc()
        self.metrics.observe("grpc", res.featurize_s, res.model_s, time.perf_counter() - t0,
                             len(resp.scores))
        return resp

    def _score(self, raw: bytes) -> tuple[scorer_pb2.ScoreResponse, Any]:
        self.service.check_ready()
        try:
            req = scorer_pb2.ScoreRequest.FromString(raw)
        except DecodeError as exc:
            raise RequestError("bad_protobuf",
                               f"request is not a dsan.scorer.v1.ScoreRequest: {exc}") from None
        pod = req.pod
        if not pod.name:
            raise RequestError("bad_pod", "ScoreRequest.pod.name is empty")
        try:
            spec = podspec_from_parts(
                name=f"{pod.namespace or 'default'}/{pod.name}", requests=dict(pod.requests),
                annotations=dict(pod.annotations), priority=pod.priority,
                gpu_models=self.service.cache.models)
        except PodError as exc:
            raise RequestError("bad_pod", str(exc)) from None
        names = list(req.node_names)
        key = pod.uid or f"{pod.namespace or 'default'}/{pod.name}"
        res = self.service.score("grpc", spec, key, names, 100)
        resp = scorer_pb2.ScoreResponse(
            scores=res.scores.tolist(), policy=self.service.policy.version,
            snapshot_version=res.version, fallback_nodes=res.fallback,
            unknown_nodes=res.unknown)
        return resp, res


class NoopScoreHandler:
    """The gRPC latency floor: decode, reply zeros, same server and serializer."""

    def score(self, raw: bytes, context: grpc.ServicerContext) -> scorer_pb2.ScoreResponse:
        req = scorer_pb2.ScoreRequest.FromString(raw)
        return scorer_pb2.ScoreResponse(scores=[0] * len(req.node_names), policy="noop")


class GrpcServer:
    def __init__(self, host: str, port: int, handler: ScoreHandler | NoopScoreHandler,
                 workers: int = 4, max_message_bytes: int = 8 * 1024 * 1024) -> None:
        opts = [("grpc.max_receive_message_length", max_message_bytes),
                ("grpc.max_send_message_length", max_message_bytes),
                ("grpc.so_reuseport", 0)]
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers), options=opts)
        method = grpc.unary_unary_rpc_method_handler(
            handler.score, request_deserializer=None,
            response_serializer=scorer_pb2.ScoreResponse.SerializeToString)
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE_NAME, {"Score": method}),))
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
