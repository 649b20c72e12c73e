"""Test doubles of the sidecar's cluster seams: :class:`FakeClusterView` delivers objects
pushed by test code to the cache like watch events, :class:`FakeClusterWriter` remembers the
recorder's writes, :class:`FakeWorkloads` holds the pods the elastic shrink reads and patches.
Each meets the same contract tests as the Kubernetes implementation."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dsan.api.types import ANNOTATION_DESIRED_MEMBERS
from sidecar.cache import GraphCache
from sidecar.clusterview import _dispatch
from sidecar.recorder import QueueWriter, WriteError


class FakeClusterView:
    """Objects pushed by test code, delivered to the cache like watch events."""

    def __init__(self, cache: GraphCache, nodes: Sequence[Mapping[str, Any]] | None = None,
                 pods: Sequence[Mapping[str, Any]] | None = None,
                 telemetry: Sequence[Mapping[str, Any]] | None = None) -> None:
        self.cache = cache
        self._initial = (list(nodes or []), list(pods or []), list(telemetry or []))
        self._synced = False
        self._heard = time.time()

    def start(self) -> None:
        nodes, pods, tele = self._initial
        self.cache.replace_nodes(nodes)
        self.cache.replace_pods(pods)
        self.cache.replace_telemetry(tele)
        self._initial = ([], [], [])  # delivered: keep no second copy of the cluster
        self._synced = True
        self._heard = time.time()

    def stop(self) -> None:
        self._synced = False

    def synced(self) -> bool:
        return self._synced

    def lag_seconds(self, resource: str) -> float:
        return time.time() - self._heard

    def apply(self, resource: str, kind: str, obj: Mapping[str, Any]) -> None:
        """Deliver one event: kind is ADDED, MODIFIED or DELETED."""
        _dispatch(self.cache, resource, kind, obj)
        self._heard = time.time()


@dataclass
class FakeClusterWriter:
    """Remembers what it was asked to write; ``fail[kind]`` is raised by writes of that kind."""

    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    annotations: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    fail: dict[str, WriteError] = field(default_factory=dict)
    #: Pods that exist (namespace, name); None: every pod does.
    pods: set[tuple[str, str]] | None = None

    def create_event(self, namespace: str, event: Mapping[str, Any]) -> None:
        if "event" in self.fail:
            raise self.fail["event"]
        if {event["metadata"].get("namespace"), event["regarding"]["namespace"]} != {namespace}:
            raise WriteError("invalid", "the event's namespace differs from the request's "
                             "or the pod's")
        self.events.append((namespace, dict(event)))

    def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str]) -> None:
        if "annotation" in self.fail:
            raise self.fail["annotation"]
        if self.pods is not None and (namespace, name) not in self.pods:
            raise WriteError("not_found", f"pods {name!r} not found")
        self.annotations.setdefault((namespace, name), {}).update(annotations)


@dataclass
class FakeWorkloads:
    """Pods by (namespace, name) in memory, with JSON patch ``test``/``replace``/``add``
    semantics on the desired-members annotation and on ``metadata.resourceVersion`` (bumped by
    every patch); ``fail`` is raised by every write."""

    pods: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    fail: WriteError | None = None
    patches: list[tuple[str, str, list[dict[str, Any]]]] = field(default_factory=list)

    def read_pod(self, namespace: str, name: str) -> Mapping[str, Any]:
        pod = self.pods.get((namespace, name))
        if pod is None:
            raise WriteError("not_found", f"pod {namespace}/{name} not found")
        meta = pod["metadata"]
        return {"metadata": {"annotations": dict(meta.get("annotations") or {}),
                             "resourceVersion": meta.setdefault("resourceVersion", "1")}}

    def json_patch_pod(self, namespace: str, name: str, ops: list[dict[str, Any]]) -> None:
        if self.fail is not None:
            raise self.fail
        pod = self.pods.get((namespace, name))
        if pod is None:
            raise WriteError("not_found", f"pod {namespace}/{name} not found")
        meta = pod["metadata"]
        ann = meta.setdefault("annotations", {})
        rv = meta.setdefault("resourceVersion", "1")
        key = ANNOTATION_DESIRED_MEMBERS
        for op in ops:
            now = rv if op["path"] == "/metadata/resourceVersion" else ann.get(key)
            if op["op"] == "test" and now != op["value"]:
                raise WriteError("invalid", "test failed")
        for op in ops:
            if op["op"] in ("replace", "add"):
                ann[key] = op["value"]
        meta["resourceVersion"] = str(int(rv) + 1)
        self.patches.append((namespace, name, ops))


def idle(writer: QueueWriter[Any], timeout: float = 5.0) -> bool:
    """Wait until every item queued to ``writer`` has been handled; False on timeout."""
    deadline = time.monotonic() + timeout
    while writer._queue.unfinished_tasks:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True
