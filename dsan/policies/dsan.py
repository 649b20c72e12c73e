"""The ``dsan`` scorer: the trained Dual-Stream Attention Network behind the Scorer protocol.

``make()`` loads the model shipped in ``dsan/model/default/`` (or ``model_dir`` /
``$DSAN_MODEL_DIR``); loading
refuses a model trained on another feature schema. GPUs inside the chosen node are picked
like FGD (least fragmentation after, best fit on ties), because DSAN's features describe
the node after exactly that choice.

The node is chosen at a resolution of :data:`LOGIT_STEP` (:func:`quantize_logits`, both in
:mod:`dsan.policies.logitscale`), so nodes the model scores equal up to float32 noise tie and
go to the caller's tie-break (FGD's node order in the openb simulator). The sidecar asks for
its 0..100 scores and winner in one call (:meth:`DSANScorer.score_scaled`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from dsan.features import TargetWorkload, default_workload, fgd_select_gpus, schema_hash
from dsan.model import heldreply
from dsan.model.export import DEFAULT_DIR
from dsan.model.serving import ServingModel
from dsan.policies.logitscale import LOGIT_STEP, quantize_logits, scale
from dsan.snapshot import ClusterSnapshot, PodSpec

__all__ = ["LOGIT_STEP", "DSANScorer", "make", "quantize_logits"]


class DSANScorer:
    name = "dsan"
    #: DSAN reads telemetry: the sidecar scores nodes with stale telemetry by its fallback.
    uses_telemetry = True

    def __init__(self, serving: ServingModel, workload: TargetWorkload | None = None) -> None:
        self.serving = serving
        self.workload = workload or default_workload()
        self.serving.workload = self.workload
        # The sidecar's policy-info metric shows it: which model and feature schema score.
        self.version = f"{serving.manifest.get('version', 'untrained')}+{schema_hash()}"

    def score(
        self, pod: PodSpec, snap: ClusterSnapshot, nodes: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.float64]:
        """The model's logits, those within half a :data:`LOGIT_STEP` of the best set to it
        (:func:`quantize_logits`): the simulator's argmax and the sidecar's normalised 0..100
        scores (and so its winner) both read these."""
        return quantize_logits(self.serving.logits(pod, snap, nodes))

    def score_scaled(self, pod: PodSpec, snap: ClusterSnapshot, nodes: npt.NDArray[np.int64],
                     max_score: int) -> tuple[npt.NDArray[np.int64], int]:
        """``normalize(self.score(pod, snap, nodes), max_score)`` and the position of its
        first maximum, in one pass (:func:`dsan.policies.logitscale.scale`): the sidecar's
        reply when every candidate is scored by this model."""
        return scale(self.serving.logits(pod, snap, nodes), max_score)

    def score_held(self, pod: PodSpec, snap: ClusterSnapshot, rows: npt.NDArray[np.int64],
                   ok: npt.NDArray[np.bool_], max_score: int
                   ) -> tuple[npt.NDArray[np.int64], int, int] | None:
        """The sidecar's reply from the logits ``pod``'s class holds
        (:mod:`dsan.model.heldreply`): candidates at ``rows`` (-1 unknown), feasibility
        ``ok`` over every node; (scores, first feasible maximum, feasible count), exactly
        :meth:`score_scaled` over the feasible candidates put back at their positions, or
        None when the held logits do not apply (the caller then takes that path)."""
        h = self.serving.held(pod, snap)
        return None if h is None else heldreply.reply(h, rows, ok, max_score)

    def after_assume(self, pod: PodSpec, snap: ClusterSnapshot, node: int,
                     feasible: npt.NDArray[np.bool_] | None = None) -> None:
        """The sidecar calls this after the reply left, once ``pod`` is charged to ``node``:
        the class's changed rows are recomputed now instead of on its next request.
        ``feasible``: the sidecar's feasibility of every node for ``pod`` on ``snap`` (its
        feasibility cache, :func:`dsan.filtering.feasible`'s mask exactly), or None."""
        del node  # every row that changed is found by the head cache's tracker
        self.serving.prefetch(pod, snap, feasible)

    def trust_snapshot_versions(self) -> None:
        """The caller (the sidecar's scoring engine) bumps ``ClusterSnapshot.version`` on every
        in-place write to the snapshots it passes: unchanged ones skip the serving caches'
        row diff (:meth:`ServingModel.trust_snapshot_versions`)."""
        self.serving.trust_snapshot_versions()

    def fix_weights(self) -> None:
        """The caller (the sidecar's scoring engine) never writes the model's weights:
        :meth:`ServingModel.fix_weights`."""
        self.serving.fix_weights()

    def note_changes(self, since: int, version: int, rows: Sequence[int]) -> None:
        """The caller's row-change log: the next snapshot passed went from version ``since``
        to ``version`` by writes to ``rows`` alone (:meth:`ServingModel.note_changes`)."""
        self.serving.note_changes(since, version, rows)

    def select_gpus(self, pod: PodSpec, snap: ClusterSnapshot, node: int) -> tuple[int, ...]:
        return fgd_select_gpus(pod, snap, node, self.workload)


def make(
    model_dir: str | Path | None = None,
    target_workload: TargetWorkload | None = None,
    seed: int = 0,
    embed_refresh_s: float = 0.0,
) -> DSANScorer:
    """The registry's factory: ``model_dir``, else ``$DSAN_MODEL_DIR``, else the shipped model.
    ``seed`` is unused: DSAN scores deterministically. ``embed_refresh_s``: see
    :meth:`ServingModel.refresh` (0, the simulator's, refreshes on every change)."""
    del seed
    chosen = model_dir or os.environ.get("DSAN_MODEL_DIR") or DEFAULT_DIR
    return DSANScorer(ServingModel.from_dir(chosen, min_refresh_s=embed_refresh_s),
                      target_workload)
