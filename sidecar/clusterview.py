"""The cluster view: where the cache's events come from.

:class:`ClusterView` is the Protocol; :class:`KubeClusterView` runs a list + watch reflector
per resource on raw JSON (the client's models cost more than the rest of our work on a Pod);
tests feed the cache through ``tests.support.fakes.FakeClusterView``. See docs/sidecar.md,
Informers.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from dsan.api.types import GROUP, TELEMETRY_PLURAL, VERSION
from sidecar.cache import GraphCache
from sidecar.config import ConfigError, SidecarConfig

log = logging.getLogger("dsan.sidecar.informer")
RESOURCES = ("nodes", "pods", "gputelemetries")


class ClusterView(Protocol):
    """Feeds a GraphCache; ``synced`` once every resource has been listed."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def synced(self) -> bool: ...

    def lag_seconds(self, resource: str) -> float:
        """Seconds since this resource's informer last heard from its source."""
        ...


def _dispatch(cache: GraphCache, resource: str, kind: str, obj: Mapping[str, Any]) -> None:
    """One event into the cache, which counts and skips a malformed object itself: nothing
    an object holds can end a watch."""
    deleted = kind == "DELETED"
    if resource == "nodes":
        (cache.delete_node_obj if deleted else cache.upsert_node)(obj)
    elif resource == "pods":
        (cache.delete_pod if deleted else cache.upsert_pod)(obj)
    elif resource == "gputelemetries":
        (cache.delete_telemetry if deleted else cache.upsert_telemetry)(obj)
    else:
        raise ValueError(f"unknown resource {resource!r}; known: {RESOURCES}")


class _Gone(Exception):
    """The watch's resourceVersion is too old: relist."""


@dataclass
class _Reflector:
    resource: str
    list_fn: Callable[..., Any]
    replace: Callable[[list[Mapping[str, Any]]], None]
    optional: bool = False
    synced: bool = False
    heard: float = field(default_factory=time.time)
    relists: int = 0
    response: Any = None


class KubeClusterView:
    """List + watch against a real kube-apiserver, one daemon thread per resource."""

    def __init__(self, cfg: SidecarConfig, cache: GraphCache, api_client: Any,
                 list_fns: Mapping[str, Callable[..., Any]] | None = None) -> None:
        """``list_fns`` (resource -> list function) replaces the client's, for tests."""
        self.cfg = cfg
        self.cache = cache
        fns = dict(list_fns) if list_fns is not None else _client_list_fns(api_client)
        self._reflectors = [
            _Reflector("nodes", fns["nodes"], cache.replace_nodes),
            _Reflector("pods", fns["pods"], cache.replace_pods),
        ]
        if cfg.watch_telemetry:
            self._reflectors.append(
                _Reflector("gputelemetries", fns["gputelemetries"], cache.replace_telemetry,
                           optional=True))
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        for r in self._reflectors:
            t = threading.Thread(target=self._run, args=(r,), name=f"informer-{r.resource}",
                                 daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()
        for r in self._reflectors:
            resp = r.response
            conn = getattr(resp, "connection", None) if resp is not None else None
            sock = getattr(conn, "sock", None)
            if sock is not None:
                # Not close(): it needs the buffer lock the blocked watch thread holds.
                # shutdown() makes that read return.
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        for t in self._threads:
            t.join(timeout=5)

    def synced(self) -> bool:
        return all(r.synced for r in self._reflectors)

    def lag_seconds(self, resource: str) -> float:
        for r in self._reflectors:
            if r.resource == resource:
                return time.time() - r.heard
        return float("nan")

    def relists(self, resource: str) -> int:
        return next((r.relists for r in self._reflectors if r.resource == resource), 0)

    def _run(self, r: _Reflector) -> None:
        backoff = self.cfg.backoff_initial_s
        gone = False
        while not self._stop.is_set():
            try:
                rv = self._list(r, consistent=gone)
                backoff, gone = self.cfg.backoff_initial_s, False
                while not self._stop.is_set():
                    started = time.monotonic()
                    new_rv = self._watch(r, rv)
                    if new_rv == rv and time.monotonic() - started < 1.0:
                        # A watch that ends at once with nothing in it: do not spin.
                        self._stop.wait(self.cfg.backoff_initial_s)
                    rv = new_rv
            except _Gone:
                log.info("%s: resourceVersion expired (410 Gone), relisting", r.resource)
                gone = True
                continue
            except Exception as exc:  # an informer must outlive any error
                if self._stop.is_set():
                    return
                status = getattr(exc, "status", None)
                if r.optional and status == 404:
                    # No CRD installed: nothing to inform on, and not a reason to stay unready.
                    r.synced = True
                    r.heard = time.time()
                    self._stop.wait(self.cfg.backoff_max_s)
                    continue
                if status == 410:
                    gone = True
                    continue
                log.warning("%s: list/watch failed (%s), retrying in %.1fs", r.resource,
                            _describe(exc), backoff)
                self._stop.wait(backoff * (0.5 + random.random()))
                backoff = min(backoff * 2, self.cfg.backoff_max_s)

    def _list(self, r: _Reflector, consistent: bool = False) -> str:
        """List into the cache; from the watch cache ("0", cheap) unless ``consistent``: after
        a 410 the watch cache may be no newer than the version that expired, so that relist
        reads etcd (""), as client-go's reflector does."""
        resp = r.list_fn(resource_version="" if consistent else "0", _preload_content=False,
                         _request_timeout=(10, 60))
        body = json.loads(resp.data)
        r.replace(body.get("items") or [])
        r.synced = True
        r.heard = time.time()
        r.relists += 1
        return str(body["metadata"]["resourceVersion"])

    def _watch(self, r: _Reflector, rv: str) -> str:
        resp = r.list_fn(
            watch=True, resource_version=rv, allow_watch_bookmarks=True,
            timeout_seconds=self.cfg.watch_timeout_s, _preload_content=False,
            _request_timeout=(10, self.cfg.watch_timeout_s + 30),
        )
        r.response = resp
        try:
            for event in _events(resp):
                if not isinstance(event, dict):
                    raise RuntimeError(f"watch event is not an object: {str(event)[:100]}")
                kind = event.get("type")
                obj = event.get("object") or {}
                r.heard = time.time()
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise _Gone()
                    raise RuntimeError(f"watch error event: {obj.get('message', obj)}")
                meta = obj.get("metadata") if isinstance(obj, dict) else None
                new_rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
                if kind != "BOOKMARK":
                    _dispatch(self.cache, r.resource, str(kind), obj)
                if new_rv:
                    rv = str(new_rv)
        finally:
            r.response = None
            resp.release_conn()
        return rv


def _client_list_fns(api_client: Any) -> dict[str, Callable[..., Any]]:
    from kubernetes import client  # not at import time: DEVELOPERS.md rule 4

    core = client.CoreV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)

    def list_telemetry(**kw: Any) -> Any:
        return custom.list_cluster_custom_object(GROUP, VERSION, TELEMETRY_PLURAL, **kw)

    return {"nodes": core.list_node, "pods": core.list_pod_for_all_namespaces,
            "gputelemetries": list_telemetry}


def _events(resp: Any) -> Iterator[dict[str, Any]]:
    """JSON watch events, one per line, from a streaming urllib3 response."""
    buf = b""
    # amt=None: each chunk as it arrives (a watch never fills a fixed-size read).
    for chunk in resp.stream(amt=None, decode_content=False):
        buf += chunk
        while True:
            nl = buf.find(b"\n")
            if nl < 0:
                break
            line, buf = buf[:nl], buf[nl + 1:]
            if line.strip():
                yield json.loads(line)
    if buf.strip():
        yield json.loads(buf)


def _describe(exc: Exception) -> str:
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", None)
    return f"HTTP {status} {reason}" if status else f"{type(exc).__name__}: {exc}"


def load_api_client(kubeconfig: str | None) -> Any:
    """An ApiClient from a kubeconfig path, else in-cluster config, else ~/.kube/config;
    :class:`ConfigError` when none loads."""
    from kubernetes import client, config

    try:
        if kubeconfig:
            return config.new_client_from_config(config_file=kubeconfig)
        conf = client.Configuration()
        try:
            config.load_incluster_config(client_configuration=conf)
        except config.ConfigException:
            return config.new_client_from_config()
        return client.ApiClient(conf)
    except Exception as exc:  # missing, unreadable or malformed: the client raises many kinds
        where = kubeconfig or "(not in a cluster, so ~/.kube/config)"
        why = " ".join(str(exc).split())  # one line: YAML errors span several
        raise ConfigError(f"cannot load kubeconfig {where}: {why}") from None
