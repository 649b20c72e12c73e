"""Wiring: config -> cache, cluster view, policies, scoring service, HTTP and gRPC servers.

The outside world comes in through constructor arguments (a view factory, the scorers), so
tests build a whole sidecar around a fake cluster view (``tests/support/fakes.py``) on loopback
ports.
"""

from __future__ import annotations

import functools
import gc
import logging
import socket
import threading
import time
from collections.abc import Callable

from dsan.policies.base import Scorer
from dsan.policies.reclaim import RECLAIMERS
from sidecar.cache import GraphCache
from sidecar.clusterview import RESOURCES, ClusterView, KubeClusterView, load_api_client
from sidecar.config import ConfigError, SidecarConfig
from sidecar.decisions import Decisions
from sidecar.explainer import Explainer
from sidecar.extender import ExtenderApp, ExtenderServer
from sidecar.grpc_server import GrpcServer, ScoreHandler
from sidecar.metrics import SidecarMetrics
from sidecar.preemption import Reclamation
from sidecar.recorder import ClusterWriter, KubeClusterWriter, Recorder
from sidecar.scoring import ScoringEngine
from sidecar.service import PolicyInfo, ScoringService
from sidecar.shrinker import Granter, Shrinker, WorkloadWriter
from sidecar.threadlimits import limit_threads, pool_sizes

log = logging.getLogger("dsan.sidecar")
ViewFactory = Callable[[GraphCache], ClusterView]


def load_policies(cfg: SidecarConfig) -> tuple[Scorer, Scorer, PolicyInfo]:
    """The served scorer and the fallback; a policy with a model degrades to the fallback when
    the model cannot be loaded."""
    from dsan.policies.registry import MODEL_FREE, make_scorer, needs

    if cfg.fallback_policy not in MODEL_FREE:
        raise ConfigError(f"sidecar config: fallback_policy: {cfg.fallback_policy!r} is not one "
                          f"of the policies without a model: {', '.join(MODEL_FREE)}")
    fallback = make_scorer(cfg.fallback_policy)
    try:
        model = needs(cfg.policy).model
    except ValueError as exc:
        raise ConfigError(f"sidecar config: policy: {exc}") from None
    if not model:
        scorer = make_scorer(cfg.policy)
    else:
        try:
            scorer = make_scorer(cfg.policy, model_dir=cfg.model_dir,
                                 embed_refresh_s=cfg.embed_refresh_s, runtime=cfg.runtime)
        except Exception as exc:
            log.warning("policy %r cannot be loaded (%s); serving %r instead", cfg.policy, exc,
                        cfg.fallback_policy)
            scorer = fallback
    limit_threads(cfg.torch_threads, cfg.blas_threads)
    version = scorer.version
    if version != scorer.name:
        version = f"{scorer.name}@{version}"
    return scorer, fallback, PolicyInfo(scorer.name, version, fallback.name)


class Sidecar:
    def __init__(self, cfg: SidecarConfig, view_factory: ViewFactory | None = None,
                 policies: tuple[Scorer, Scorer, PolicyInfo] | None = None,
                 writer: ClusterWriter | None = None,
                 workloads: WorkloadWriter | None = None) -> None:
        """``view_factory``, ``writer`` and ``workloads`` replace the kubeconfig's cluster
        (tests); with a view factory, decisions are recorded only through ``writer`` and
        elastic workloads shrunk only through ``workloads``."""
        self.cfg = cfg
        self.cache = GraphCache(cfg)
        api = None
        if view_factory is None:
            api = load_api_client(cfg.kubeconfig)
            self.view: ClusterView = KubeClusterView(cfg, self.cache, api)
        else:
            self.view = view_factory(self.cache)
        scorer, fallback, info = policies if policies is not None else load_policies(cfg)
        self.metrics = SidecarMetrics()
        engine = ScoringEngine(self.cache, scorer, fallback, cfg.telemetry_stale_s,
                               cfg.strict_node_names)
        self.decisions = Decisions(cfg.decisions_kept, cfg.assume_ttl_s)
        self.service = ScoringService(self.cache, self.view, engine, self.metrics, info,
                                      self.decisions)
        self.explainer = Explainer(self.cache, engine, self.decisions, self.view.synced,
                                   cfg.explain_background, cfg.explain_permutations,
                                   cfg.explain_cpu_budget_s)
        kube = None if api is None else KubeClusterWriter(api)
        writer, workloads = writer or kube, workloads or kube
        self.recorder: Recorder | None = None
        if cfg.record_decisions and writer is not None:
            self.recorder = Recorder(writer, self.decisions, socket.gethostname(),
                                     cfg.record_qps, cfg.record_burst, cfg.record_queue)
            self.cache.on_bound = self.recorder.offer
            self.metrics.decisions_recorded.counts = self.recorder.recorded
            self.metrics.record_failures.counts = self.recorder.counts
        self.shrinker: Shrinker | None = None
        if cfg.elastic_shrink and workloads is not None:
            self.shrinker = Shrinker(workloads)
            self.metrics.elastic_shrinks.counts = self.shrinker.counts
        self.granter: Granter | None = None
        if cfg.elastic_grant and workloads is not None:
            self.granter = granter = Granter(workloads)
            self.metrics.elastic_grants.counts = granter.counts

            def grant(namespace: str, name: str, uid: str, task: str, lo: int, hi: int) -> None:
                n = engine.scorer.controller.grant(task, lo, hi)
                if lo <= n <= hi:  # a controller's bug grants nothing rather than too much
                    granter.offer(namespace, name, uid, n)

            self.cache.on_owner = grant
        reclaimer = RECLAIMERS[cfg.reclaimer]() if cfg.reclaimer else scorer.reclaimer
        self.reclamation = Reclamation(self.cache, reclaimer, self.shrinker)
        m = self.metrics
        m.preemptions.counts = self.reclamation.outcomes
        m.preempt_candidates.counts = self.reclamation.candidates
        m.preempt_victims.counts = self.reclamation.victims
        m.explanations.counts = self.explainer.results
        m.bad_objects.counts = self.cache.bad_objects
        m.assumptions_ended.counts = self.cache.assumptions_ended
        m.assumptions_skipped.counts = self.service.assume_skipped
        # Gauges read at scrape time: nothing on the hot path maintains them.
        m.cache_age.set_function(lambda: max(0.0, time.time() - self.cache.last_change_wall))
        m.cache_nodes.set_function(lambda: float(len(self.cache)))
        m.cache_assumed.set_function(lambda: float(self.service.assumed_count))
        for r in RESOURCES:
            m.informer_lag.labels(r).set_function(functools.partial(self.view.lag_seconds, r))
        m.ready.set_function(lambda: 1.0 if self.view.synced() else 0.0)
        m.policy_errors.set_function(lambda: float(engine.policy_errors))
        # Read once: ~1 ms of library inspection, and nothing resizes the pools later.
        for pool, n in pool_sizes().items():
            m.compute_threads.labels(pool).set(n)
        extender = ExtenderApp(self.service, self.reclamation)
        self.http = ExtenderServer(
            cfg.bind_address, cfg.http_port, cfg.url_prefix, extender, cfg.max_body_bytes,
            ready=self.view.synced, metrics_body=self.service.exposition,
            count_error=lambda reason: self.metrics.error("http", reason),
            backlog=cfg.http_backlog, explain=self.explainer.http, preempt=extender.preempt)
        handler = ScoreHandler(self.service, self.reclamation)
        self.grpc: GrpcServer | None = None
        if cfg.grpc_port >= 0:
            self.grpc = GrpcServer(cfg.bind_address, cfg.grpc_port, handler,
                                   cfg.grpc_workers, cfg.max_grpc_message_bytes)
        self.metrics_http: ExtenderServer | None = None
        if cfg.metrics_port >= 0:
            self.metrics_http = ExtenderServer(
                cfg.metrics_address, cfg.metrics_port, "", None, 0, ready=self.view.synced,
                metrics_body=self.service.exposition)
        self._stop = threading.Event()
        self._ready = threading.Event()

    @property
    def extender_url(self) -> str:
        return f"http://{self.cfg.bind_address}:{self.http.port}{self.cfg.url_prefix}"

    @property
    def grpc_target(self) -> str | None:
        return None if self.grpc is None else f"{self.cfg.bind_address}:{self.grpc.port}"

    def start(self) -> None:
        for part in (self.http, self.grpc, self.metrics_http, self.recorder, self.shrinker,
                     self.granter, self.view):
            if part is not None:
                part.start()
        threading.Thread(target=self._watch_ready, name="readiness", daemon=True).start()

    def _watch_ready(self) -> None:
        # gRPC health follows the informers; /readyz asks the view directly.
        while not self._stop.is_set():
            synced = self.view.synced()
            if self.grpc is not None:
                self.grpc.set_serving(synced)
            if synced and not self._ready.is_set():
                if self.cfg.gc_freeze_after_sync:
                    gc.collect()
                    gc.freeze()
                self._ready.set()
            self._stop.wait(0.1 if not synced else 1.0)

    def wait_ready(self, timeout: float | None = None) -> bool:
        return self._ready.wait(timeout)

    def stop(self, drain_s: float = 0.0) -> int:
        """Stop serving. With ``drain_s`` (SIGTERM): refuse new connections and RPCs, report
        not ready, and give the requests in flight up to ``drain_s`` seconds. Returns how
        many HTTP requests were still in flight when the time ran out."""
        self._stop.set()
        left = 0
        if drain_s > 0:
            stopped = None
            if self.grpc is not None:
                self.grpc.set_serving(False)
                stopped = self.grpc.server.stop(drain_s)  # running RPCs finish within it
            left = self.http.drain(drain_s)
            if stopped is not None:
                stopped.wait(drain_s + 1)
        for part in (self.view, self.recorder, self.shrinker, self.granter, self.http,
                     self.grpc, self.metrics_http):
            if part is not None:
                part.stop()
        return left
