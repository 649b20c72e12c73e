"""DSAN's actions beyond node choice: a cost-aware :class:`CostReclaimer` and a
:class:`LearnedController` (elastic grants, a GPU-node quota for CPU pods, ageing of waiting
training pods), set by a handful of numbers (:class:`ActionParams`) learned by policy search
(:mod:`dsan.train.actions_search`) and shipped as ``actions.json`` beside the model.

The reclaimer reads only :class:`~dsan.policies.reclaim.Victim` fields, so the simulator and
the sidecar's preempt verb run the same choice. It never evicts a latency-sensitive pod and
never a pod of the preemptor's priority or higher, whatever the weights.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from dsan.api.types import LATENCY_SENSITIVE_INDICES, TASK_TYPES
from dsan.core.snapshot import I64, ClusterSnapshot, PodSpec
from dsan.policies.base import Controller, StaticController
from dsan.policies.reclaim import (
    Candidate,
    DefaultReclaimer,
    Reclaimer,
    admissible,
    latency_sensitive,
)

__all__ = ["ACTIONS", "ActionParams", "CostReclaimer", "LearnedController", "load_actions",
           "save_actions"]

#: The file beside the model (``dsan/model/default/``) holding the learned parameters.
ACTIONS = "actions.json"
_TRAIN = TASK_TYPES.index("train")


@dataclass(frozen=True)
class ActionParams:
    """Reclaimer weights (a candidate's cost; the cheapest is evicted) and controller
    settings. The defaults: cost = the number of victims, every elastic pod granted, no
    quota, no ageing."""

    #: Per GPU-hour of work the victims lose (``gpus * lost_s``).
    w_gpu_h: float = 0.0
    #: Per core-hour lost (``cores * lost_s``).
    w_core_h: float = 0.0
    #: Per victim.
    w_count: float = 1.0
    #: Per victim whose job stops rather than shrinks (not ``elastic``).
    w_stop: float = 0.0
    #: Share of an elastic training job's extra workers granted (0: it stays at its gang).
    train_growth: float = 1.0
    #: Share of a Spark job's executors above its minimum granted.
    batch_growth: float = 1.0
    #: A GPU node takes a CPU-only, non-web pod only if it keeps this share of its cores and
    #: memory free per idle GPU (1: a whole GPU's proportional share).
    gpu_reserve: float = 0.0
    #: A pod that is not latency-sensitive takes a node hosting a latency-sensitive pod only
    #: if the node's requested CPU after it stays within this share of its cores (1: no
    #: limit): load past the contention threshold slows the node's replicas, and the batch
    #: backlog (core executors as well as elastic ones) would fill every node to the brim.
    ls_headroom: float = 1.0
    #: A training pod pending longer than this is tried first within its priority and
    #: reserves the GPUs for the pass (GPU pods ranked below it wait). inf: never.
    age_s: float = math.inf

    #: Search bounds of each field, in field order (``age_s`` searched as log10 seconds).
    BOUNDS = ((0.0, 4.0), (0.0, 4.0), (0.0, 2.0), (0.0, 2.0), (0.0, 1.0), (0.0, 1.0),
              (0.0, 1.0), (0.5, 1.0), (1.5, 4.5))

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if not isinstance(v, (int, float)) or math.isnan(v) or v < 0:
                raise ValueError(f"ActionParams.{f.name} must be a number >= 0, got {v!r}")
        for name in ("train_growth", "batch_growth", "gpu_reserve", "ls_headroom"):
            if getattr(self, name) > 1:
                raise ValueError(f"ActionParams.{name} must be within 0..1")

    def vector(self) -> np.ndarray:
        v = [float(getattr(self, f.name)) for f in fields(self)]
        v[-1] = math.log10(max(v[-1], 1.0)) if math.isfinite(v[-1]) else self.BOUNDS[-1][1]
        return np.array(v)

    @classmethod
    def from_vector(cls, x: Sequence[float]) -> ActionParams:
        """Clipped to :attr:`BOUNDS`; ``age_s`` at the upper bound means never."""
        lo, hi = np.array(cls.BOUNDS).T
        v = np.clip(np.asarray(x, dtype=np.float64), lo, hi)
        names = [f.name for f in fields(cls)]
        kw: dict[str, float] = {n: float(a) for n, a in zip(names[:-1], v[:-1], strict=True)}
        kw["age_s"] = math.inf if v[-1] >= hi[-1] else float(10.0 ** v[-1])
        return cls(**kw)


class CostReclaimer:
    """The admissible candidate without latency-sensitive victims whose victims cost least:
    ``sum(w_gpu_h * gpus * lost_h + w_core_h * cores * lost_h + w_count + w_stop * stops)``;
    ties go to the first."""

    name = "dsan"

    def __init__(self, p: ActionParams) -> None:
        self.p = p

    def cost(self, c: Candidate) -> float:
        p = self.p
        return sum(p.w_gpu_h * v.gpus * v.lost_s / 3600.0 + p.w_core_h * v.cores * v.lost_s
                   / 3600.0 + p.w_count + (0.0 if v.elastic else p.w_stop) for v in c.victims)

    def choose(self, priority: int, candidates: Sequence[Candidate]) -> int | None:
        best: tuple[float, int] | None = None
        for i, c in enumerate(candidates):
            if not admissible(priority, c) or any(latency_sensitive(v) for v in c.victims):
                continue
            key = (self.cost(c), i)
            if best is None or key < best:
                best = key
        return None if best is None else best[1]


class LearnedController:
    """Grants a share of elastic growth per class, keeps room for GPU work on GPU nodes and
    CPU headroom on the nodes of latency-sensitive pods, and ages waiting training pods
    (:class:`ActionParams`)."""

    name = "dsan"

    def __init__(self, p: ActionParams) -> None:
        self.p = p

    def grant(self, task_type: str, minimum: int, maximum: int) -> int:
        share = {"train": self.p.train_growth, "batch": self.p.batch_growth}.get(task_type, 1.0)
        return minimum + round(share * (maximum - minimum))

    def allowed(self, pod: PodSpec, snap: ClusterSnapshot, nodes: I64) -> I64:
        if pod.task_type in LATENCY_SENSITIVE_INDICES or nodes.size == 0:
            return nodes
        h = self.p.ls_headroom
        if h < 1 and snap.ls_pods is not None:
            hot = snap.cpu_used[nodes] + pod.cpu_milli > h * snap.cpu_cap[nodes]
            nodes = nodes[~(hot & (snap.ls_pods[nodes] > 0))]
        r = self.p.gpu_reserve
        if r <= 0 or pod.num_gpu > 0 or nodes.size == 0:
            return nodes
        gpus = snap.gpu_count[nodes]
        idle = (snap.gpu_free[nodes] >= 1000).sum(axis=1)
        share = r * idle / np.maximum(gpus, 1)
        cpu_left = snap.cpu_cap[nodes] - snap.cpu_used[nodes] - pod.cpu_milli
        mem_left = snap.mem_cap[nodes] - snap.mem_used[nodes] - pod.mem_mib
        ok = (gpus == 0) | ((cpu_left >= share * snap.cpu_cap[nodes])
                            & (mem_left >= share * snap.mem_cap[nodes]))
        return nodes[ok]

    def rank(self, pod: PodSpec, waited_s: float) -> float:
        """``priority + 0.5 (1 - age_s / waited_s)`` for a training pod past ``age_s``:
        grows with the wait, so the longest-waiting aged pod reserves against the others."""
        if pod.task_type != _TRAIN or not waited_s > self.p.age_s:
            return float(pod.priority)
        return pod.priority + 0.5 * (1.0 - self.p.age_s / waited_s)


def save_actions(model_dir: str | Path, p: ActionParams, manifest: dict[str, Any]) -> Path:
    path = Path(model_dir) / ACTIONS
    params = {k: (None if isinstance(v, float) and math.isinf(v) else v)
              for k, v in asdict(p).items()}
    path.write_text(json.dumps({"params": params, "manifest": manifest}, indent=2) + "\n")
    return path


def load_actions(model_dir: str | Path) -> tuple[Reclaimer, Controller, dict[str, Any]]:
    """The learned reclaimer and controller of ``model_dir``; a model without
    ``actions.json`` acts as Kubernetes beyond node choice. A bad file is a clear error."""
    path = Path(model_dir) / ACTIONS
    if not path.is_file():
        return DefaultReclaimer(), StaticController(), {}
    try:
        data = json.loads(path.read_text())
        raw = dict(data["params"])
        if raw.get("age_s") is None:
            raw["age_s"] = math.inf
        known = {f.name for f in fields(ActionParams)}
        if set(raw) != known:
            raise ValueError(f"want the keys {sorted(known)}, got {sorted(raw)}")
        p = ActionParams(**raw)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    return CostReclaimer(p), LearnedController(p), dict(data.get("manifest", {}))
