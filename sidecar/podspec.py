"""Kubernetes Pod -> :class:`dsan.core.snapshot.PodSpec`: the one place that reads a pod's requests.

The extender passes the Pod JSON, the gRPC service the requests its client computed the same
way (DSANScore: component-helpers' PodRequests); the cache charges bound pods with the same
conversion. The effective request follows kube-scheduler: the sum over containers and
sidecars, at least the largest init container, plus the pod overhead.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import fields
from decimal import Decimal
from typing import Any

import orjson

from dsan.api.quantity import QuantityError
from dsan.api.quantity import parse_quantity as parse_quantity_api
from dsan.api.types import (
    ANNOTATION_ELASTIC,
    ANNOTATION_GPU_MILLI,
    ANNOTATION_GPU_MODELS,
    ANNOTATION_TASK_TYPE,
    RESOURCE_GPU,
    RESOURCE_GPU_MILLI,
    TASK_TYPES,
    parse_elastic,
    parse_gpu_milli,
    parse_gpu_models,
    parse_task_type,
)
from dsan.core.snapshot import PodSpec

#: Model index that matches no node: a pod asking only for unknown GPU models fits nowhere.
NO_MODEL = -2
_MIB = Decimal(1024 * 1024)
#: Pod.spec.priority is an int32 in the Kubernetes API.
_INT32 = (-(2**31), 2**31 - 1)
#: Extended resources are whole numbers in Kubernetes (its validation refuses "0.5").
_WHOLE = (RESOURCE_GPU, RESOURCE_GPU_MILLI)


class PodError(ValueError):
    """A pod whose scheduling-relevant fields cannot be read; the message names the field."""


def parse_quantity(value: Any, where: str) -> Decimal:
    """A non-negative Kubernetes quantity; PodError naming ``where`` otherwise."""
    try:
        out = parse_quantity_api(value, where)
    except QuantityError as exc:
        raise PodError(str(exc)) from None
    if out < 0:
        raise PodError(f"{where}: {value!r} is negative")
    return out


def _container_requests(c: Any, where: str) -> dict[str, Decimal]:
    if not isinstance(c, Mapping):
        raise PodError(f"{where}: expected an object")
    res = c.get("resources") or {}
    if not isinstance(res, Mapping):
        raise PodError(f"{where}.resources: expected an object")
    req, lim = res.get("requests") or {}, res.get("limits") or {}
    if not isinstance(req, Mapping):
        raise PodError(f"{where}.resources.requests: expected an object")
    if not isinstance(lim, Mapping):
        raise PodError(f"{where}.resources.limits: expected an object")
    # The API server defaults each request it is not given to its limit.
    return {str(k): parse_quantity(v, f"{where}.resources.requests[{_short(k)}]")
            for k, v in {**lim, **req}.items()}


def _merge(into: dict[str, Decimal], more: Mapping[str, Decimal],
           combine: Callable[[Decimal, Decimal], Decimal] = operator.add) -> dict[str, Decimal]:
    for k, v in more.items():
        into[k] = combine(into.get(k, Decimal(0)), v)
    return into


def _containers(spec: Mapping[str, Any], part: str) -> list[tuple[Any, dict[str, Decimal]]]:
    containers = spec.get(part) or []
    if not isinstance(containers, list):
        raise PodError(f"Pod.spec.{part}: expected a list")
    return [(c, _container_requests(c, f"Pod.spec.{part}[{i}]")) for i, c in enumerate(containers)]


def pod_requests(pod: Mapping[str, Any]) -> dict[str, Decimal]:
    """Effective request per resource name, the way kube-scheduler computes it."""
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        raise PodError("Pod.spec: missing or not an object")
    # As component-helpers' PodRequests: containers add up; a restartable init container (a
    # sidecar) runs beside them and adds too; the other init containers run one at a time,
    # each beside the sidecars started before it: the pod needs at least the largest of those.
    total: dict[str, Decimal] = {}
    for _, req in _containers(spec, "containers"):
        _merge(total, req)
    sidecars: dict[str, Decimal] = {}
    init: dict[str, Decimal] = {}
    for c, req in _containers(spec, "initContainers"):
        if c.get("restartPolicy") == "Always":
            _merge(total, req)
            _merge(init, _merge(sidecars, req), max)
        else:
            _merge(init, _merge(dict(sidecars), req), max)
    _merge(total, init, max)
    overhead = spec.get("overhead") or {}
    if not isinstance(overhead, Mapping):
        raise PodError("Pod.spec.overhead: expected an object")
    return _merge(total, {str(k): parse_quantity(v, f"Pod.spec.overhead[{_short(k)}]")
                          for k, v in overhead.items()})


def pod_name(meta: Mapping[str, Any]) -> str:
    """namespace/name of a pod's metadata."""
    return f"{meta.get('namespace', 'default')}/{meta.get('name', '')}"


def pod_key(pod: Mapping[str, Any]) -> str:
    """The pod's identity across events: its UID, else namespace/name."""
    meta = pod.get("metadata") or {}
    uid = meta.get("uid")
    return str(uid) if uid else pod_name(meta)


def podspec_from_pod(pod: Any, gpu_models: Mapping[str, int]) -> PodSpec:
    """Convert a Pod (JSON dict) into the scheduler's view; PodError names a bad field."""
    if not isinstance(pod, Mapping):
        raise PodError(f"Pod: expected an object, got {type(pod).__name__}")
    meta = pod.get("metadata")
    meta = {} if meta is None else meta
    if not isinstance(meta, Mapping):
        raise PodError("Pod.metadata: expected an object")
    annotations = meta.get("annotations")
    annotations = {} if annotations is None else annotations
    if not isinstance(annotations, Mapping):
        raise PodError("Pod.metadata.annotations: expected an object")
    spec = pod.get("spec") or {}
    priority = spec.get("priority", 0) if isinstance(spec, Mapping) else 0
    return podspec_from_parts(name=pod_name(meta), requests=pod_requests(pod),
                              annotations=annotations, priority=priority, gpu_models=gpu_models)


#: PodSpec fields after the name, in constructor order.
_SPEC_REST = tuple(f.name for f in fields(PodSpec))[1:]
assert next(f.name for f in fields(PodSpec)) == "name"
#: Distinct pod shapes PodSpecMemo keeps (all dropped when full).
_MEMO_MAX = 4096


class PodSpecMemo:
    """PodSpecs parsed once per pod *shape* (every input of the parse but the name):
    kube-scheduler sends a workload's replicas one after another, and parsing is a large
    part of a request. Only pods that parsed are kept, so a bad pod gets its own error."""

    def __init__(self) -> None:
        #: (the GPU models the specs were parsed with, shape -> the spec's fields but the
        #: name), replaced as one: a request thread still parsing with older models stores
        #: into a table nobody reads any more.
        self._state: tuple[object, dict[object, tuple[Any, ...]]] = (None, {})

    def get(self, pod: Any, gpu_models: Mapping[str, int]) -> PodSpec:
        """``podspec_from_pod(pod, gpu_models)``, memoised."""
        key = _shape(pod)
        if key is None:
            return podspec_from_pod(pod, gpu_models)
        return self.lookup(key, pod_name(pod.get("metadata") or {}), gpu_models,
                           lambda: podspec_from_pod(pod, gpu_models))

    def lookup(self, key: object, name: str, gpu_models: Mapping[str, int],
               parse: Callable[[], PodSpec]) -> PodSpec:
        """The spec of shape ``key`` named ``name``; ``parse()`` on a miss. ``gpu_models`` is
        replaced, never mutated, when a model appears: the memo then starts over."""
        models, specs = self._state
        if gpu_models is not models:
            specs = {}
            self._state = (gpu_models, specs)
        rest = specs.get(key)
        if rest is None:
            spec = parse()
            if len(specs) >= _MEMO_MAX:
                specs.clear()
            specs[key] = tuple(getattr(spec, f) for f in _SPEC_REST)
            return spec
        # The constructor with every field: dataclasses.replace is slower, field by field.
        return PodSpec(name, *rest)


def _shape(pod: Any) -> bytes | None:
    """The inputs of :func:`podspec_from_pod` but the name, as JSON (so value types count:
    ``true`` is not ``1``); None for a pod not shaped like one (parsed, and refused, in
    full). Not the whole spec: per-pod fields would make every pod a new shape."""
    try:
        meta, spec = pod.get("metadata"), pod.get("spec")
        if not isinstance(spec, dict) or not (meta is None or isinstance(meta, dict)):
            return None  # what the parse refuses, or reads as a default: parse it in full
        meta = meta or {}
        return orjson.dumps((
            meta.get("annotations"), spec.get("priority", 0),
            [c.get("resources") for c in spec.get("containers") or ()],
            [(c.get("resources"), c.get("restartPolicy"))
             for c in spec.get("initContainers") or ()],
            spec.get("overhead")))
    except (AttributeError, TypeError, orjson.JSONEncodeError):
        return None


def podspec_from_parts(name: str, requests: Mapping[str, Any], annotations: Mapping[str, Any],
                       priority: Any, gpu_models: Mapping[str, int]) -> PodSpec:
    """Requests (quantities or Decimals) + annotations -> PodSpec. ``nvidia.com/gpu: N``
    alone means N whole GPUs; a ``dsan.io/gpu-milli`` share (resource or annotation, 1..999)
    makes a one-GPU sharing pod, as in openb."""
    req = {
        str(k): v if isinstance(v, Decimal) else parse_quantity(v, f"requests[{_short(k)}]")
        for k, v in requests.items()
    }
    if priority is None:
        priority = 0  # unset (a JSON null): Kubernetes' default priority
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise PodError(f"Pod.spec.priority: expected an integer, got {_show(priority)}")
    if not _INT32[0] <= priority <= _INT32[1]:
        raise PodError(f"Pod.spec.priority: {priority} is outside int32, as Kubernetes "
                       "refuses it")
    for res in _WHOLE:
        if res in req and req[res] != req[res].to_integral_value():
            raise PodError(f"requests[{res}]: {req[res]} is not a whole number (an extended "
                           "resource)")
    num_gpu = int(req.get(RESOURCE_GPU, Decimal(0)))
    milli: int | None = None
    share = _annotation(annotations, ANNOTATION_GPU_MILLI)
    if RESOURCE_GPU_MILLI in req:
        milli = parse_gpu_milli(str(int(req[RESOURCE_GPU_MILLI])))
        if milli is None:
            raise PodError(f"requests[{RESOURCE_GPU_MILLI}]: must be within 1..1000")
    elif share is not None:
        milli = parse_gpu_milli(share)
        if milli is None:
            raise PodError(f"annotations[{ANNOTATION_GPU_MILLI}]: must be within 1..1000")
    if milli is not None and milli < 1000:
        num_gpu, gpu_milli = 1, milli
    else:
        gpu_milli = 1000 if num_gpu > 0 else 0
    models: tuple[int, ...] = ()
    wanted = parse_gpu_models(_annotation(annotations, ANNOTATION_GPU_MODELS))
    if wanted:
        models = tuple(sorted({gpu_models.get(m, NO_MODEL) for m in wanted}))
    task = parse_task_type(_annotation(annotations, ANNOTATION_TASK_TYPE))
    cpu_milli = float(req.get("cpu", Decimal(0)) * 1000)
    mem_mib = float(req.get("memory", Decimal(0)) / _MIB)
    if not (math.isfinite(cpu_milli) and math.isfinite(mem_mib)) or num_gpu > 1 << 20:
        raise PodError(f"requests: {name} asks for more than any node can have")
    return PodSpec(name=name, cpu_milli=cpu_milli, mem_mib=mem_mib, num_gpu=num_gpu,
                   gpu_milli=gpu_milli, gpu_models=models, priority=priority,
                   task_type=TASK_TYPES.index(task),
                   elastic=parse_elastic(_annotation(annotations, ANNOTATION_ELASTIC)))


def _annotation(annotations: Mapping[str, Any], key: str) -> str | None:
    """One of our annotations: a string (Kubernetes annotations are strings) or absent."""
    v = annotations.get(key)
    if v is None or isinstance(v, str):
        return v
    raise PodError(f"annotations[{key}]: expected a string, got {_show(v)}")


def _short(key: Any) -> str:
    """A map key (or a repr) as it appears in an error message, cut short."""
    text = str(key)
    return text if len(text) <= 64 else text[:61] + "..."


def _show(value: Any) -> str:
    """A value as it appears in an error message, cut short (a huge int has no cheap repr)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    if isinstance(value, dict | list):
        return f"a JSON {type(value).__name__}"
    return _short(repr(value))

