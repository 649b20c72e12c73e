"""The ``dsan`` scorer: the trained Dual-Stream Attention Network behind the Scorer protocol.

``make()`` loads the model shipped in ``dsan/model/default/`` (or ``model_dir`` /
``$DSAN_MODEL_DIR``); loading
refuses a model trained on another feature schema. GPUs inside the chosen node are picked
like FGD (least fragmentation after, best fit on ties), because DSAN's features describe
the node after exactly that choice.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from dsan.features import TargetWorkload, default_workload, fgd_select_gpus, schema_hash
from dsan.model.export import DEFAULT_DIR
from dsan.model.serving import ServingModel
from dsan.snapshot import ClusterSnapshot, PodSpec


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
        return self.serving.logits(pod, snap, nodes)

    def after_assume(self, pod: PodSpec, snap: ClusterSnapshot, node: int) -> None:
        """The sidecar calls this after the reply left, once ``pod`` is charged to ``node``:
        the class's changed rows are recomputed now instead of on its next request."""
        del node  # every row that changed is found by the head cache's tracker
        self.serving.prefetch(pod, snap)

    def trust_snapshot_versions(self) -> None:
        """The caller (the sidecar's scoring engine) bumps ``ClusterSnapshot.version`` on every
        in-place write to the snapshots it passes: unchanged ones skip the serving caches'
        row diff (:meth:`ServingModel.trust_snapshot_versions`)."""
        self.serving.trust_snapshot_versions()

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
) -> DSANScorer:
    """The registry's factory: ``model_dir``, else ``$DSAN_MODEL_DIR``, else the shipped model.
    ``seed`` is unused: DSAN scores deterministically."""
    del seed
    chosen = model_dir or os.environ.get("DSAN_MODEL_DIR") or DEFAULT_DIR
    return DSANScorer(ServingModel.from_dir(chosen), target_workload)
