"""Per-pod attribution: which pod's container uses which of this node's GPUs.

A thread asks kubelet's PodResources API (``List``, and ``GetAllocatableResources`` where the
kubelet has it) every ``pod_resources_interval_s`` and publishes an immutable per-GPU tuple of
:class:`~dsan.api.telemetry.PodRef`; ``/metrics`` and the GPUTelemetry writer only read it.
Device IDs are matched to GPUs the way NVIDIA's plugin names them: the GPU UUID (its default),
``<uuid>::<n>`` (time-slicing replicas), or the GPU index (``deviceIDStrategy=index``, only
for ``resource_name``, where an index cannot be another vendor's device).

Optional, so it degrades: no socket, an RPC error or a timeout clears the mapping (no stale
claims), sets ``available`` false with a short ``reason`` (exported as a metric label) and is
logged once per change of state, not per poll; the next poll tries again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from deviceplugin.podresources import PodResourcesClient, PodResourcesError
from dsan.api.telemetry import GPUInfo, PodRef

log = logging.getLogger(__name__)
#: Per-call deadline: the socket is local, an answer takes milliseconds.
CALL_TIMEOUT_S = 2.0


class PodAttribution:
    def __init__(self, client: PodResourcesClient, gpus: Sequence[GPUInfo], resource_name: str,
                 interval_s: float = 5.0) -> None:
        self.client = client
        self.resource_name = resource_name
        self.interval_s = interval_s
        self._index = {g.uuid: g.index for g in gpus}
        self.n = len(gpus)
        #: Per GPU index: the containers holding it (several only with GPU sharing).
        self.pods: tuple[tuple[PodRef, ...], ...] = ((),) * self.n
        #: Per GPU index: kubelet lists it as allocatable; None while unknown.
        self.allocatable: tuple[bool, ...] | None = None
        self.available = False
        self.reason = "not polled yet"
        #: Device IDs of ``resource_name`` that match no GPU here (MIG devices, a foreign
        #: ID scheme): attribution is incomplete while this is not 0.
        self.unmatched = 0
        self.polls = 0
        self.failures = 0
        self._allocatable_supported = True
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def gpu_of(self, device_id: str, resource: str) -> int | None:
        base = device_id.split("::", 1)[0]
        i = self._index.get(base)
        if i is None and resource == self.resource_name and base.isascii() and base.isdigit():
            i = int(base) if int(base) < self.n else None
        return i

    def refresh_once(self) -> bool:
        self.polls += 1
        try:
            assignments = self.client.list(CALL_TIMEOUT_S)
            alloc = self._allocatable_ids()
        except PodResourcesError as exc:
            self.failures += 1
            self.pods, self.allocatable = ((),) * self.n, None
            self._set_state(False, exc.reason, str(exc))
            return False
        by_gpu: list[set[PodRef]] = [set() for _ in range(self.n)]
        unmatched = 0
        for a in assignments:
            for dev in a.device_ids:
                i = self.gpu_of(dev, a.resource_name)
                if i is not None:
                    by_gpu[i].add(PodRef(a.namespace, a.pod, a.container))
                elif a.resource_name == self.resource_name:
                    unmatched += 1
        if unmatched and not self.unmatched:
            log.warning("%d %s device IDs from kubelet match no GPU on this node (MIG or "
                        "another ID scheme?); those pods are not attributed", unmatched,
                        self.resource_name)
        self.unmatched = unmatched
        self.pods = tuple(tuple(sorted(s)) for s in by_gpu)
        if alloc is not None:
            flags = [False] * self.n
            for resource, ids in alloc.items():
                for dev in ids:
                    i = self.gpu_of(dev, resource)
                    if i is not None:
                        flags[i] = True
            self.allocatable = tuple(flags)
        self._set_state(True, "")
        return True

    def _allocatable_ids(self) -> dict[str, tuple[str, ...]] | None:
        if not self._allocatable_supported:
            return None
        try:
            return self.client.allocatable(CALL_TIMEOUT_S)
        except PodResourcesError as exc:
            if exc.reason != "unimplemented":
                raise
            self._allocatable_supported = False
            log.info("kubelet has no GetAllocatableResources; attributing through List only")
            return None

    def _set_state(self, ok: bool, reason: str, detail: str = "") -> None:
        if (ok, reason) != (self.available, self.reason):
            if ok:
                log.info("per-pod GPU attribution on (kubelet PodResources API)")
            else:
                log.warning("per-pod GPU attribution off, telemetry goes on without it: %s",
                            detail or reason)
        self.available, self.reason = ok, reason

    # --- thread ---------------------------------------------------------------------------
    def poll(self) -> bool:
        """:meth:`refresh_once` that never raises: an unexpected error degrades like a failed
        call."""
        try:
            return self.refresh_once()
        except Exception as exc:  # never let attribution take the agent down
            self.failures += 1
            self.pods, self.allocatable = ((),) * self.n, None
            self._set_state(False, "error", f"{type(exc).__name__}: {exc}")
            return False

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll()
            self._stop.wait(self.interval_s)

    def start(self) -> PodAttribution:
        self._thread = threading.Thread(target=self._run, name="pod-attribution", daemon=True)
        self._thread.start()
        return self

    @property
    def crashed(self) -> bool:
        """Its thread ended without stop() (a bug): /healthz fails, kubelet restarts us."""
        return self._thread is not None and not self._thread.is_alive() and not self._stop.is_set()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.client.close()
