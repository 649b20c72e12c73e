"""The ``dsan`` scorer: the trained Dual-Stream Attention Network behind the Scorer protocol.

GPUs inside the chosen node are FGD's choice (:func:`~dsan.features.fgd_select_gpus`). The
node is chosen at a resolution of :data:`LOGIT_STEP`, so nodes the model scores equal up to
float32 noise tie and go to the caller's tie-break.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import numpy.typing as npt

from dsan.core.snapshot import F64, I64, ClusterSnapshot, PodSpec
from dsan.features import TargetWorkload, fgd_select_gpus, schema_hash
from dsan.model.artifact import DEFAULT_DIR
from dsan.model.serving import ServingModel
from dsan.policies.base import Scorer
from dsan.policies.dsan_actions import load_actions

__all__ = ["LOGIT_STEP", "DSANScorer", "make", "quantize_logits"]

#: The resolution DSAN chooses at: logits within half a step of the best tie with it. Half a
#: step sits well above float32 noise between rows with equal weighted features and 10x below
#: the shipped head's smallest intended tie-break (docs/results/dsan_openb.md).
LOGIT_STEP = 1e-4


def quantize_logits(logits: npt.ArrayLike, step: float = LOGIT_STEP) -> npt.NDArray[np.float64]:
    """``logits`` with every finite one within ``step / 2`` of the best set to the best; the
    others are left as they are. Anchored at the best, not at 0: a fixed grid splits two tied
    logits whenever their value sits on a rounding boundary."""
    s = np.array(logits, dtype=np.float64)
    if s.size == 0:
        return s
    half = step / 2
    best = s.max()
    if np.isfinite(best):  # the usual case (a NaN makes the max NaN; -inf never comes near)
        s[s >= best - half] = best
        return s
    finite = np.isfinite(s)
    if finite.any():
        best = s[finite].max()
        s[finite & (s >= best - half)] = best
    return s


class DSANScorer(Scorer):
    name = "dsan"
    reads_telemetry = True

    def __init__(self, serving: ServingModel, model_dir: str | Path | None = None) -> None:
        self.serving = serving
        if model_dir is not None:  # the learned actions beyond node choice, if shipped
            self.reclaimer, self.controller, self.actions = load_actions(model_dir)
        self._version = f"{serving.manifest.get('version', 'untrained')}+{schema_hash()}"

    @property
    def version(self) -> str:
        """The model's version and the feature schema's hash (the policy-info metric)."""
        return self._version

    def score(self, pod: PodSpec, snap: ClusterSnapshot, nodes: I64) -> F64:
        """The model's logits, those within half a :data:`LOGIT_STEP` of the best set to it."""
        return quantize_logits(self.serving.logits(pod, snap, nodes))

    def prepare(self, pod: PodSpec, snap: ClusterSnapshot) -> None:
        self.serving.prepare(pod, snap)

    def select_gpus(self, pod: PodSpec, snap: ClusterSnapshot, node: int) -> tuple[int, ...]:
        return fgd_select_gpus(pod, snap, node, self.serving.workload)


def make(model_dir: str | Path | None = None, target_workload: TargetWorkload | None = None,
         seed: int = 0, embed_refresh_s: float = 0.0, runtime: str = "numpy") -> DSANScorer:
    """The registry's factory: ``model_dir``, else ``$DSAN_MODEL_DIR``, else the shipped model
    (``seed`` is unused; ``embed_refresh_s``: :attr:`ServingModel.min_refresh_s`)."""
    del seed
    chosen = model_dir or os.environ.get("DSAN_MODEL_DIR") or DEFAULT_DIR
    return DSANScorer(ServingModel.from_dir(chosen, runtime, target_workload,
                                            min_refresh_s=embed_refresh_s), chosen)
