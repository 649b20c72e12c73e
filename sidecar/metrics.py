"""Prometheus metrics of the sidecar (``dsan_sidecar_*``), on a registry of its own.

Hot-path series are bound once; the per-request histograms are observed after the reply
(:meth:`sidecar.service.ScoringService.settle`), off the client's clock.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, Metric

APIS = ("http", "grpc", "inprocess")
#: 25 us .. 2.5 s: the budget is about a millisecond, so resolution goes there.
LATENCY_BUCKETS = (25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 750e-6, 1e-3, 1.5e-3, 2.5e-3, 5e-3,
                   7.5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 1.0, 2.5)
NODE_BUCKETS = (1, 2, 5, 10, 50, 100, 250, 500, 1000, 2500, 5000, 10000)
ERROR_REASONS = ("malformed_json", "bad_request", "bad_pod", "unknown_nodes", "stale_node_table",
                 "too_large", "bad_protobuf", "not_ready", "not_found", "method_not_allowed",
                 "internal")


class ScrapedCounters:
    """A counter family read at scrape time from :attr:`counts`, a dict of plain ints its
    owner bumps without a lock (the owner may replace it with its own dict)."""

    def __init__(self, name: str, doc: str, label: str, registry: CollectorRegistry) -> None:
        self.name, self.doc, self.label = name, doc, label
        self.counts: dict[str, int] = {}
        registry.register(self)

    def collect(self) -> Iterator[Metric]:
        fam = CounterMetricFamily(self.name, self.doc, labels=[self.label])
        for value, n in list(self.counts.items()):  # one C-level copy: safe beside a writer
            fam.add_metric([value], n)
        yield fam


class SidecarMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self._decided_lock = threading.Lock()
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
            "dsan_sidecar_requests", "Score, filter and preempt requests served", ["api", "verb"],
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
        self.decisions = ScrapedCounters(
            "dsan_sidecar_decisions",
            "Pods the sidecar scored best on a node and charged there until they bind (its "
            "placement decisions), by node", "node", r)
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
        self.bad_objects = ScrapedCounters(
            "dsan_sidecar_bad_objects", "Informed objects (Node, Pod, GPUTelemetry) skipped as "
            "malformed, by kind; each is logged once with its namespace/name", "kind", r)
        self.assumptions_ended = ScrapedCounters(
            "dsan_sidecar_assumptions_ended", "Assumptions (pods charged to their best node "
            "after a score) ended, by how: bound (seen bound anywhere), deleted, "
            "informer_event (updated while still pending), expired (assume_ttl_s), evicted "
            "(oldest past assume_max)", "how", r)
        self.assumptions_skipped = ScrapedCounters(
            "dsan_sidecar_assumptions_skipped", "Scored pods not assumed when scored, by reason: "
            "other_scheduler (the request's pod names another scheduler), not_pending (the "
            "informer had not shown the pod pending for the configured scheduler yet: it is "
            "assumed if it does within assume_ttl_s)", "reason", r)
        self.decisions_recorded = ScrapedCounters(
            "dsan_sidecar_decisions_recorded", "Writes made for pods the scheduler bound, by "
            "what: event (an events.k8s.io/v1 Event), annotation (dsan.io/scored-by)", "what",
            r)
        self.record_failures = ScrapedCounters(
            "dsan_sidecar_record_failures", "Events or annotations not written, by reason: "
            "forbidden, not_found, invalid, unavailable, error (each logged once), dropped "
            "(the recorder's queue was full)", "reason", r)
        self.explanations = ScrapedCounters(
            "dsan_sidecar_explanations", "GET /explain requests by result: ok, not_found, "
            "unexplainable, busy (another one was running), not_ready, bad_request, error",
            "result", r)
        self.preempt_latency = Histogram(
            "dsan_sidecar_preempt_latency_seconds",
            "Server-side time to answer one preempt request (choose the victims)",
            buckets=LATENCY_BUCKETS, registry=r)
        self.preemptions = ScrapedCounters(
            "dsan_sidecar_preemptions", "Preempt requests answered, by outcome: evict (one "
            "node's victims returned), none (nothing to evict: the pod waits)", "outcome", r)
        self.preempt_candidates = ScrapedCounters(
            "dsan_sidecar_preempt_candidates", "Preemption candidates (nodes with victims), by "
            "result: offered by kube-scheduler, unknown_victim (dropped: a victim the informer "
            "does not show bound on that node), quota_refused (dropped: the served policy's "
            "quota refuses the pod that node), chosen", "result", r)
        self.preempt_victims = ScrapedCounters(
            "dsan_sidecar_preempt_victims", "Victims returned for eviction, by task type",
            "task_type", r)
        self.elastic_grants = ScrapedCounters(
            "dsan_sidecar_elastic_grants", "Workload owners granted a dsan.io/desired-members "
            "from their dsan.io/max-members, by result: ok, already_set, conflict, dropped, or "
            "the API's refusal (forbidden, not_found, invalid, unavailable, error)", "result", r)
        self.elastic_shrinks = ScrapedCounters(
            "dsan_sidecar_elastic_shrinks", "Workload owners' dsan.io/desired-members lowered "
            "for evicted elastic members, by result: ok, at_minimum, no_count, conflict, "
            "dropped, or the API's refusal (forbidden, not_found, invalid, unavailable, error)",
            "result", r)
        self.ready = Gauge("dsan_sidecar_ready", "1 once the informers have synced", registry=r)
        self.cpus = Gauge(
            "dsan_sidecar_cpus", "CPUs the sidecar may run on (its affinity mask): what "
            "exclusiveCpus got from the kubelet's static CPU manager", registry=r)
        # The main thread's mask (a scrape runs on another thread): what taskset -p shows.
        self.cpus.set_function(lambda: float(len(os.sched_getaffinity(os.getpid()))))
        self.compute_threads = Gauge(
            "dsan_sidecar_compute_threads", "Threads of the sidecar's compute pools as set at "
            "start (torch's intra-op pool, numpy's BLAS; 0: not loaded), beside "
            "dsan_sidecar_cpus", ["pool"], registry=r)
        self.policy_errors = Gauge(
            "dsan_sidecar_policy_errors", "Requests where the served policy raised and the "
            "fallback policy scored instead", registry=r)
        # Hot-path series, bound once (and so exported from the start): per API, the three
        # phases' and the candidates'.
        self._series = {a: (self.latency.labels(a, "featurize"), self.latency.labels(a, "model"),
                            self.latency.labels(a, "total"), self.candidates.labels(a))
                        for a in APIS}
        for a in APIS:
            for reason in ERROR_REASONS:
                self.errors.labels(a, reason)

    def observe(self, api: str, featurize_s: float, model_s: float, total_s: float,
                candidates: int) -> None:
        """One request's phase latencies and candidate count."""
        fz, mo, to, ca = self._series[api]
        fz.observe(featurize_s)
        mo.observe(model_s)
        to.observe(total_s)
        ca.observe(candidates)

    def decided(self, node: str) -> None:
        """One assumption made: the pod is charged to ``node`` until it binds (from a
        request's settle or the informer's thread, hence the lock)."""
        self.assumed.inc()
        with self._decided_lock:
            counts = self.decisions.counts
            counts[node] = counts.get(node, 0) + 1

    def error(self, api: str, reason: str) -> None:
        self.errors.labels(api, reason).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
