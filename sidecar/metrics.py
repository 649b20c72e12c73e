"""Prometheus metrics of the sidecar, on a registry of its own (tests run many sidecars).

Names are ``dsan_sidecar_*``. Label children used on the hot path are bound once here, so a
request pays a few attribute lookups and ``observe`` calls, never a label lookup.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.exposition import generate_latest

APIS = ("http", "grpc", "inprocess")
PHASES = ("featurize", "model", "total")
#: 25 us .. 2.5 s: the budget is about a millisecond, so resolution goes there.
LATENCY_BUCKETS = (25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 750e-6, 1e-3, 1.5e-3, 2.5e-3, 5e-3,
                   7.5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 1.0, 2.5)
NODE_BUCKETS = (1, 2, 5, 10, 50, 100, 250, 500, 1000, 2500, 5000, 10000)
ERROR_REASONS = ("malformed_json", "bad_request", "bad_pod", "unknown_nodes", "too_large",
                 "bad_protobuf", "not_ready", "not_found", "method_not_allowed", "internal")


class SidecarMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.latency = Histogram(
            "dsan_sidecar_score_latency_seconds",
            "Server-side time to score one pod, by API and phase (featurize, model, total)",
            ["api", "phase"], buckets=LATENCY_BUCKETS, registry=r)
        self.settle = Histogram(
            "dsan_sidecar_settle_seconds",
            "Time to apply one request's deferred assumption after its reply was sent "
            "(charge the winner, refresh the served pod class)",
            buckets=LATENCY_BUCKETS, registry=r)
        self.candidates = Histogram(
            "dsan_sidecar_candidate_nodes", "Candidate nodes per score request",
            ["api"], buckets=NODE_BUCKETS, registry=r)
        self.requests = Counter(
            "dsan_sidecar_requests", "Score and filter requests served", ["api", "verb"],
            registry=r)
        self.errors = Counter(
            "dsan_sidecar_request_errors", "Requests refused, by API and reason",
            ["api", "reason"], registry=r)
        self.fallbacks = Counter(
            "dsan_sidecar_fallback_nodes",
            "Candidate nodes scored by the fallback policy because their telemetry was stale",
            registry=r)
        self.unknown_nodes = Counter(
            "dsan_sidecar_unknown_nodes", "Candidate names not in the cache (scored 0)",
            registry=r)
        self.assumed = Counter(
            "dsan_sidecar_assumed_pods", "Pods charged to their best node before binding",
            registry=r)
        self.policy = Info("dsan_sidecar_policy", "Served policy and its fallback", registry=r)
        self.cache_age = Gauge(
            "dsan_sidecar_cache_age_seconds", "Seconds since the cache last changed", registry=r)
        self.cache_nodes = Gauge("dsan_sidecar_cache_nodes", "Nodes in the cache", registry=r)
        self.cache_assumed = Gauge(
            "dsan_sidecar_cache_assumed_pods", "Assumed pods currently charged", registry=r)
        self.informer_lag = Gauge(
            "dsan_sidecar_informer_lag_seconds",
            "Seconds since each informer last heard from the apiserver (event, bookmark, list)",
            ["resource"], registry=r)
        self.bad_objects = Gauge(
            "dsan_sidecar_bad_objects", "Informed objects skipped as malformed, by kind",
            ["kind"], registry=r)
        self.ready = Gauge("dsan_sidecar_ready", "1 once the informers have synced", registry=r)
        self.policy_errors = Gauge(
            "dsan_sidecar_policy_errors", "Requests where the served policy raised and the "
            "fallback policy scored instead", registry=r)
        # Hot-path children, bound once.
        self.lat = {(a, p): self.latency.labels(a, p) for a in APIS for p in PHASES}
        self.cand = {a: self.candidates.labels(a) for a in APIS}
        for a in APIS:
            for reason in ERROR_REASONS:
                self.errors.labels(a, reason)

    def observe(self, api: str, featurize_s: float, model_s: float, total_s: float,
                candidates: int) -> None:
        self.lat[api, "featurize"].observe(featurize_s)
        self.lat[api, "model"].observe(model_s)
        self.lat[api, "total"].observe(total_s)
        self.cand[api].observe(candidates)

    def error(self, api: str, reason: str) -> None:
        self.errors.labels(api, reason).inc()

    def set_policy(self, policy: str, version: str, fallback: str) -> None:
        self.policy.info({"policy": policy, "version": version, "fallback": fallback})

    def bind_gauges(self, cache_age: Callable[[], float], nodes: Callable[[], float],
                    assumed: Callable[[], float],
                    informer_lag: dict[str, Callable[[], float]],
                    bad_objects: dict[str, Callable[[], float]],
                    ready: Callable[[], float],
                    policy_errors: Callable[[], float] = lambda: 0.0) -> None:
        """Gauges read at scrape time, so nothing on the hot path maintains them."""
        self.cache_age.set_function(cache_age)
        self.cache_nodes.set_function(nodes)
        self.cache_assumed.set_function(assumed)
        for res, fn in informer_lag.items():
            self.informer_lag.labels(res).set_function(fn)
        for kind, fn in bad_objects.items():
            self.bad_objects.labels(kind).set_function(fn)
        self.ready.set_function(ready)
        self.policy_errors.set_function(policy_errors)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
