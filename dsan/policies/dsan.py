"""The ``dsan`` scorer: the trained Dual-Stream Attention Network behind the Scorer protocol.

``make()`` loads the model shipped in ``dsan/model/default/`` (or ``model_dir`` /
``$DSAN_MODEL_DIR``) through the numpy runtime (``runtime="torchscript"`` runs the exported
TorchScript instead); loading refuses a model trained on another feature schema and weights
that are missing, misshapen or not finite. GPUs inside the chosen node are picked like FGD
(least fragmentation after, best fit on ties), because DSAN's features describe the node
after exactly that choice.

The node is chosen at a resolution of :data:`LOGIT_STEP` (:func:`quantize_logits`), so nodes
the model scores equal up to float32 noise tie and go to the caller's tie-break (FGD's node
order in the openb simulator, the lowest node name in the sidecar).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import numpy.typing as npt

from dsan.core.snapshot import ClusterSnapshot, PodSpec
from dsan.features import TargetWorkload, fgd_select_gpus, schema_hash
from dsan.model.artifact import DEFAULT_DIR
from dsan.model.serving import ServingModel
from dsan.policies.base import BaseScorer

__all__ = ["LOGIT_STEP", "DSANScorer", "make", "quantize_logits"]

#: The resolution DSAN chooses at: logits within half a step of the best tie with it. On
#: openb the shipped head is FGD's integer score plus linear tie-breaks whose smallest
#: intended step is 0.0005 (``gpu_max_free`` -0.5 per 1/1000 of a GPU); the float32 model
#: scores rows with identical weighted features up to a few ulps apart (one ulp is 3.8e-6 at
#: a logit of 50, 7.6e-6 at 100), which would break exact FGD + skip ties by row-dependent
#: noise instead of the caller's node order (docs/results/dsan_openb.md). Half a step, 5e-5,
#: sits well above that noise and 10x below the smallest tie-break.
LOGIT_STEP = 1e-4


def quantize_logits(logits: npt.ArrayLike, step: float = LOGIT_STEP) -> npt.NDArray[np.float64]:
    """``logits`` with every finite one within ``step / 2`` of the best set to the best.

    The choice is that of a grid of ``step`` anchored at the best logit; every other logit is
    left as the model gave it (explanations and the sidecar's scores of the other nodes read
    them). Anchored at the best, not at 0: rounding to a fixed grid splits two tied logits
    whenever their exact value sits on a rounding boundary. Order is kept; non-finite
    entries are left as they are.
    """
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


class DSANScorer(BaseScorer):
    name = "dsan"
    reads_telemetry = True

    def __init__(self, serving: ServingModel) -> None:
        self.serving = serving
        self.workload = serving.workload
        self._version = f"{serving.manifest.get('version', 'untrained')}+{schema_hash()}"

    @property
    def version(self) -> str:
        """The model's version and the feature schema's hash (the policy-info metric)."""
        return self._version

    def score(
        self, pod: PodSpec, snap: ClusterSnapshot, nodes: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.float64]:
        """The model's logits, those within half a :data:`LOGIT_STEP` of the best set to it."""
        return quantize_logits(self.serving.logits(pod, snap, nodes))

    def prepare(self, pod: PodSpec, snap: ClusterSnapshot) -> None:
        self.serving.prepare(pod, snap)

    def select_gpus(self, pod: PodSpec, snap: ClusterSnapshot, node: int) -> tuple[int, ...]:
        return fgd_select_gpus(pod, snap, node, self.workload)


def make(
    model_dir: str | Path | None = None,
    target_workload: TargetWorkload | None = None,
    seed: int = 0,
    embed_refresh_s: float = 0.0,
    runtime: str = "numpy",
) -> DSANScorer:
    """The registry's factory: ``model_dir``, else ``$DSAN_MODEL_DIR``, else the shipped model.
    ``seed`` is unused: DSAN scores deterministically. ``embed_refresh_s``: see
    :attr:`ServingModel.min_refresh_s` (0, the simulator's, refreshes on every change)."""
    del seed
    chosen = model_dir or os.environ.get("DSAN_MODEL_DIR") or DEFAULT_DIR
    return DSANScorer(ServingModel.from_dir(chosen, runtime, target_workload,
                                            min_refresh_s=embed_refresh_s))
