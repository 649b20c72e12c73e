"""Writes the node's GPUTelemetry custom resource every few seconds.

The store is a small Protocol: :class:`KubernetesTelemetryStore` (server-side apply through
the ``kubernetes`` client, the default) and :class:`FakeTelemetryStore` (memory, scriptable
failures) pass the same tests. API failures are retried with capped exponential backoff and
jitter; nothing queues up while the API is down, because every attempt builds the summary
afresh from the sampler, so memory stays bounded however long the outage lasts.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol, cast

from deviceplugin.attribution import PodAttribution
from deviceplugin.backend import COL
from deviceplugin.resources import ResourceManager
from deviceplugin.sampler import TelemetrySampler
from dsan.api.telemetry import (
    HEALTHY,
    UNHEALTHY,
    WINDOW_METRICS,
    GPUStatus,
    GPUTelemetry,
)
from dsan.api.types import GROUP, TELEMETRY_PLURAL, VERSION

log = logging.getLogger(__name__)
FIELD_MANAGER = "dsan-deviceplugin"


class TelemetryStore(Protocol):
    def apply(self, obj: dict[str, Any]) -> None:
        """Create or update the object (by ``metadata.name``); raise on failure."""

    def get(self, name: str) -> dict[str, Any] | None:
        """The stored object, or None when there is none."""


class FakeTelemetryStore:
    """In memory; ``fail_next`` makes that many ``apply`` calls raise, like an API outage."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.fail_next = 0
        self.calls = 0

    def apply(self, obj: dict[str, Any]) -> None:
        self.calls += 1
        if self.fail_next > 0:
            self.fail_next -= 1
            raise ConnectionError("fake apiserver unavailable")
        self.objects[obj["metadata"]["name"]] = obj

    def get(self, name: str) -> dict[str, Any] | None:
        return self.objects.get(name)


class KubernetesTelemetryStore:
    """Server-side apply of the cluster-scoped object, as field manager ``dsan-deviceplugin``."""

    def __init__(self, kubeconfig: str | None = None, api_client: Any = None) -> None:
        from kubernetes import client, config  # lazily: nothing touches a cluster at import

        if api_client is None:
            if kubeconfig:
                api_client = config.new_client_from_config(config_file=kubeconfig)
            else:
                config.load_incluster_config()
                api_client = client.ApiClient()
        self._api = client.CustomObjectsApi(api_client)
        self._exc = client.exceptions.ApiException

    def apply(self, obj: dict[str, Any]) -> None:
        self._api.patch_cluster_custom_object(
            GROUP, VERSION, TELEMETRY_PLURAL, obj["metadata"]["name"], obj,
            field_manager=FIELD_MANAGER, force=True,
            _content_type="application/apply-patch+yaml", _request_timeout=10)

    def get(self, name: str) -> dict[str, Any] | None:
        try:
            out = cast(dict[str, Any], self._api.get_cluster_custom_object(
                GROUP, VERSION, TELEMETRY_PLURAL, name, _request_timeout=10))
        except self._exc as exc:
            if exc.status == 404:
                return None
            raise
        return out


def build_summary(
    node_name: str,
    manager: ResourceManager | None,
    sampler: TelemetrySampler | None,
    *,
    available: bool,
    reason: str = "",
    window_s: int = 10,
    horizon_s: int = 300,
    interval_s: float = 1.0,
    attribution: PodAttribution | None = None,
) -> GPUTelemetry:
    """The CR content now: identity and topology from the manager, windows from the sampler,
    the containers holding each GPU from the pod attribution."""
    infos = tuple(manager.infos) if manager is not None else ()
    health = manager.health_snapshot() if manager is not None else []
    now = datetime.now(UTC)
    cols = [COL[m] for m in WINDOW_METRICS]
    if sampler is not None and available:
        _, win = sampler.windows(now.timestamp())
        series = win[:, :, cols]  # (W, n, len(WINDOW_METRICS))
    else:
        series = None
    attributed = attribution is not None and attribution.available
    pods = attribution.pods if attribution is not None and attributed else ()
    statuses = []
    for d, (ok, why, n_xid, last) in zip(infos, health, strict=True):
        windows = {} if series is None else {
            m: tuple(series[:, d.index, k].tolist()) for k, m in enumerate(WINDOW_METRICS)}
        statuses.append(GPUStatus(uuid=d.uuid, index=d.index,
                                  health=HEALTHY if ok else UNHEALTHY, health_reason=why,
                                  xid_errors=n_xid, last_xid=last, windows=windows,
                                  pods=pods[d.index] if d.index < len(pods) else ()))
    return GPUTelemetry(node_name=node_name, gpus=infos, statuses=tuple(statuses),
                        sampled_at=now, available=available, reason=reason,
                        window_seconds=window_s, horizon_seconds=horizon_s,
                        sample_interval_seconds=interval_s, pod_attribution=attributed)


class TelemetryWriter:
    def __init__(
        self,
        store: TelemetryStore,
        build: Callable[[], GPUTelemetry],
        interval_s: float = 5.0,
        backoff_max_s: float = 60.0,
        rng: random.Random | None = None,
    ) -> None:
        self.store = store
        self.build = build
        self.interval_s = interval_s
        self.backoff_max_s = backoff_max_s
        self._rng = rng or random.Random()
        self.writes = 0
        self.failures = 0  # consecutive
        self.last_error = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def write_once(self) -> bool:
        try:
            obj = self.build().to_dict()
            self.store.apply(obj)
        except Exception as exc:  # any API or network error: retry later, keep serving
            self.failures += 1
            self.last_error = f"{type(exc).__name__}: {exc}"[:500]
            if self.failures & (self.failures - 1) == 0:  # 1st, 2nd, 4th, 8th...: no log flood
                log.warning("GPUTelemetry write failed (%d in a row): %s", self.failures,
                            self.last_error)
            return False
        self.failures = 0
        self.writes += 1
        return True

    def next_delay(self) -> float:
        """The interval after a success; capped exponential backoff with jitter after failures."""
        if self.failures == 0:
            return self.interval_s
        base = min(self.backoff_max_s, self.interval_s * 2 ** min(self.failures - 1, 16))
        return base * (0.5 + 0.5 * self._rng.random())

    def _run(self) -> None:
        while not self._stop.is_set():
            self.write_once()
            self._stop.wait(self.next_delay())

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="cr-writer", daemon=True)
        self._thread.start()

    @property
    def crashed(self) -> bool:
        """Its thread ended without stop() (a bug): /healthz fails, kubelet restarts us."""
        return self._thread is not None and not self._thread.is_alive() and not self._stop.is_set()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
