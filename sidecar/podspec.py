"""Kubernetes Pod -> :class:`dsan.core.snapshot.PodSpec`: the one place that reads a pod's requests.

Both APIs end here: the extender hands us the whole Pod JSON (capitalised outer keys, but the
Pod itself is ordinary camelCase JSON), the gRPC service hands us the requests already summed
by the client. The cache uses the same conversion to charge bound pods to their nodes, so a
pod costs the same in scoring and in bookkeeping.

A pod's effective request follows kube-scheduler: the sum over containers, at least the
largest init container, plus the pod overhead.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import fields
from decimal import Decimal, InvalidOperation
from typing import Any

import orjson

from dsan.api.types import (
    ANNOTATION_GPU_MILLI,
    ANNOTATION_GPU_MODELS,
    ANNOTATION_TASK_TYPE,
    RESOURCE_GPU,
    RESOURCE_GPU_MILLI,
    TASK_TYPES,
    parse_gpu_milli,
    parse_gpu_models,
    parse_task_type,
)
from dsan.core.snapshot import PodSpec

#: Model index that matches no node: a pod asking only for unknown GPU models fits nowhere.
NO_MODEL = -2
_MIB = Decimal(1024 * 1024)
_SUFFIX = {
    "Ki": Decimal(1024), "Mi": Decimal(1024**2), "Gi": Decimal(1024**3),
    "Ti": Decimal(1024**4), "Pi": Decimal(1024**5), "Ei": Decimal(1024**6),
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12),
    "P": Decimal(10**15), "E": Decimal(10**18),
}


class PodError(ValueError):
    """A pod whose scheduling-relevant fields cannot be read; the message names the field."""


def parse_quantity(value: Any, where: str) -> Decimal:
    """A Kubernetes quantity ("500m", "2Gi", "1e3", 4) as a Decimal; PodError if malformed."""
    if isinstance(value, str):
        # Pods repeat a handful of quantity strings: parse each once.
        got = _parse_str(value)
        if isinstance(got, Decimal):
            return got
        raise PodError(f"{where}: {got}")
    return _parse(value, where)


@functools.lru_cache(maxsize=4096)
def _parse_str(value: str) -> Decimal | str:
    """The Decimal, or the error message (exceptions are not cached by lru_cache)."""
    try:
        return _parse(value, "")
    except PodError as exc:
        return str(exc).removeprefix(": ")


def _parse(value: Any, where: str) -> Decimal:
    if isinstance(value, bool):
        raise PodError(f"{where}: {value!r} is not a quantity")
    if isinstance(value, int | float):
        return Decimal(str(value))
    if not isinstance(value, str) or not value:
        raise PodError(f"{where}: {value!r} is not a quantity")
    s = value.strip()
    for suffix in ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"):
        if s.endswith(suffix):
            number, mult = s[:-2], _SUFFIX[suffix]
            break
    else:
        if s[-1:] in ("n", "u", "m", "k", "M", "G", "T", "P", "E"):
            number, mult = s[:-1], _SUFFIX[s[-1]]
        else:
            number, mult = s, _SUFFIX[""]
    try:
        out = Decimal(number) * mult
    except InvalidOperation as exc:
        raise PodError(f"{where}: {value!r} is not a quantity") from exc
    if not out.is_finite() or out < 0:
        raise PodError(f"{where}: {value!r} must be a finite, non-negative quantity")
    return out


def _container_requests(c: Any, where: str) -> dict[str, Decimal]:
    if not isinstance(c, Mapping):
        raise PodError(f"{where}: expected an object")
    res = c.get("resources") or {}
    if not isinstance(res, Mapping):
        raise PodError(f"{where}.resources: expected an object")
    req = res.get("requests")
    if req is None:
        req = res.get("limits") or {}  # Kubernetes defaults requests to limits
    if not isinstance(req, Mapping):
        raise PodError(f"{where}.resources.requests: expected an object")
    return {str(k): parse_quantity(v, f"{where}.resources.requests[{k}]") for k, v in req.items()}


def pod_requests(pod: Mapping[str, Any]) -> dict[str, Decimal]:
    """Effective request per resource name, the way kube-scheduler computes it."""
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        raise PodError("Pod.spec: missing or not an object")
    total: dict[str, Decimal] = {}
    containers = spec.get("containers") or []
    if not isinstance(containers, list):
        raise PodError("Pod.spec.containers: expected a list")
    for i, c in enumerate(containers):
        for k, v in _container_requests(c, f"Pod.spec.containers[{i}]").items():
            total[k] = total.get(k, Decimal(0)) + v
    inits = spec.get("initContainers") or []
    if not isinstance(inits, list):
        raise PodError("Pod.spec.initContainers: expected a list")
    for i, c in enumerate(inits):
        for k, v in _container_requests(c, f"Pod.spec.initContainers[{i}]").items():
            total[k] = max(total.get(k, Decimal(0)), v)
    overhead = spec.get("overhead") or {}
    if isinstance(overhead, Mapping):
        for k, v in overhead.items():
            total[str(k)] = total.get(str(k), Decimal(0)) + parse_quantity(v, f"overhead[{k}]")
    return total


def pod_key(pod: Mapping[str, Any]) -> str:
    """The pod's identity across events: its UID, else namespace/name."""
    meta = pod.get("metadata") or {}
    uid = meta.get("uid")
    if uid:
        return str(uid)
    return f"{meta.get('namespace', 'default')}/{meta.get('name', '')}"


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
    return podspec_from_parts(
        name=f"{meta.get('namespace', 'default')}/{meta.get('name', '')}",
        requests=pod_requests(pod),
        annotations=annotations,
        priority=priority,
        gpu_models=gpu_models,
    )


#: PodSpec fields after the name, in constructor order (PodSpecMemo rebuilds specs from them).
_SPEC_REST = tuple(f.name for f in fields(PodSpec))[1:]
assert next(f.name for f in fields(PodSpec)) == "name"
#: Distinct pod shapes PodSpecMemo keeps (all dropped when full).
_MEMO_MAX = 4096


class PodSpecMemo:
    """:func:`podspec_from_pod` parsed once per pod *shape*: kube-scheduler sends the replicas
    of a workload one after another, and parsing (container walk, quantities as Decimals) is
    ~8-20 us of an extender request. The shape is every input of the parse but the name, as
    JSON bytes, so value types count (``true`` is not ``1``, ``"4"`` not ``4``): the
    annotations, the priority, each container's and init container's ``resources`` and the
    overhead. Only pods that parsed are kept, so a bad pod always gets its own error. Not
    the whole spec: per-pod fields (volumes named per pod, the host name) would make every
    pod a new shape."""

    def __init__(self) -> None:
        self._specs: dict[bytes, tuple[Any, ...]] = {}
        self._models: object = None

    def get(self, pod: Any, gpu_models: Mapping[str, int]) -> PodSpec:
        """``podspec_from_pod(pod, gpu_models)``; ``gpu_models`` is replaced, never mutated,
        when a model appears (the memo then starts over)."""
        if gpu_models is not self._models:
            self._specs.clear()
            self._models = gpu_models
        key = _shape(pod)
        rest = self._specs.get(key) if key is not None else None
        if rest is None:
            spec = podspec_from_pod(pod, gpu_models)
            if key is not None:
                if len(self._specs) >= _MEMO_MAX:
                    self._specs.clear()
                self._specs[key] = tuple(getattr(spec, f) for f in _SPEC_REST)
            return spec
        meta = pod.get("metadata") or {}
        return PodSpec(f"{meta.get('namespace', 'default')}/{meta.get('name', '')}", *rest)


def _shape(pod: Any) -> bytes | None:
    """The inputs of :func:`podspec_from_pod` but the name, as JSON; None for a pod not
    shaped like one (it is parsed, and refused, in full)."""
    try:
        meta, spec = pod.get("metadata"), pod.get("spec")
        if not isinstance(spec, dict) or not (meta is None or isinstance(meta, dict)):
            return None  # what the parse refuses, or reads as a default: parse it in full
        meta = meta or {}
        return orjson.dumps((
            meta.get("annotations"), spec.get("priority", 0),
            [c.get("resources") for c in spec.get("containers") or ()],
            [c.get("resources") for c in spec.get("initContainers") or ()],
            spec.get("overhead")))
    except (AttributeError, TypeError, orjson.JSONEncodeError):
        return None


def podspec_from_parts(
    name: str,
    requests: Mapping[str, Any],
    annotations: Mapping[str, Any],
    priority: Any,
    gpu_models: Mapping[str, int],
) -> PodSpec:
    """Requests (quantities or Decimals) + annotations -> PodSpec.

    GPU semantics: ``nvidia.com/gpu: N`` alone means N whole GPUs. A share in thousandths
    (the ``dsan.io/gpu-milli`` resource or annotation, 1..999) makes a GPU-sharing pod with
    one GPU, as in openb. ``gpu_models`` maps GPU model names to snapshot indices.
    """
    req = {
        str(k): v if isinstance(v, Decimal) else parse_quantity(v, f"requests[{k}]")
        for k, v in requests.items()
    }
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise PodError(f"Pod.spec.priority: expected an integer, got {priority!r}")
    num_gpu = int(req.get(RESOURCE_GPU, Decimal(0)))
    milli: int | None = None
    if RESOURCE_GPU_MILLI in req:
        milli = parse_gpu_milli(str(int(req[RESOURCE_GPU_MILLI])))
        if milli is None:
            raise PodError(f"requests[{RESOURCE_GPU_MILLI}]: must be within 1..1000")
    elif ANNOTATION_GPU_MILLI in annotations:
        milli = parse_gpu_milli(str(annotations[ANNOTATION_GPU_MILLI]))
        if milli is None:
            raise PodError(f"annotations[{ANNOTATION_GPU_MILLI}]: must be within 1..1000")
    if milli is not None and milli < 1000:
        num_gpu, gpu_milli = 1, milli
    else:
        gpu_milli = 1000 if num_gpu > 0 else 0
    models: tuple[int, ...] = ()
    wanted = parse_gpu_models(_str_or_none(annotations.get(ANNOTATION_GPU_MODELS)))
    if wanted:
        models = tuple(sorted({gpu_models.get(m, NO_MODEL) for m in wanted}))
    task = parse_task_type(_str_or_none(annotations.get(ANNOTATION_TASK_TYPE)))
    cpu_milli = float(req.get("cpu", Decimal(0)) * 1000)
    mem_mib = float(req.get("memory", Decimal(0)) / _MIB)
    if not (math.isfinite(cpu_milli) and math.isfinite(mem_mib)) or num_gpu > 1 << 20:
        raise PodError(f"requests: {name} asks for more than any node can have")
    return PodSpec(
        name=name,
        cpu_milli=cpu_milli,
        mem_mib=mem_mib,
        num_gpu=num_gpu,
        gpu_milli=gpu_milli,
        gpu_models=models,
        priority=priority,
        task_type=TASK_TYPES.index(task),
    )


def _str_or_none(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def model_index(names: Sequence[str]) -> dict[str, int]:
    return {m: i for i, m in enumerate(names)}
