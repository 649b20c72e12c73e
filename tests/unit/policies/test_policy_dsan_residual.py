"""An untrained residual DSAN is FGD: same node and same GPU slot for every pod of an openb
slice under the FGD protocol (seeded node permutation, ties to the first node of it)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from dsan.features.target import TargetWorkload
from dsan.model.net import DSANNet, ModelConfig
from dsan.policies.base import Scorer
from dsan.policies.dsan import DSANScorer
from dsan.policies.fgd import FGDScorer
from dsan.sim import paths
from dsan.sim.openb import load_nodes, load_pods
from dsan.sim.scheduler import schedule_one
from tests.support.models import serving_model


def _slice(tmp: Path, src: Path, rows: int, seed: int) -> Path:
    """Header plus ``rows`` seeded random rows (the pod files are sorted by kind)."""
    lines = src.read_text().splitlines()
    keep = np.sort(np.random.default_rng(seed).choice(len(lines) - 1, rows, replace=False))
    out = tmp / src.name
    out.write_text("\n".join([lines[0], *(lines[1 + k] for k in keep)]) + "\n")
    return out


@pytest.mark.parametrize(
    "pods_file", ["openb_pod_list_gpushare100.csv", "openb_pod_list_default.csv"]
)
def test_zero_residual_dsan_places_every_pod_like_fgd(tmp_path: Path, pods_file: str) -> None:
    try:
        nodes_src, pods_src = paths.openb_csv(paths.DEFAULT_NODES), paths.openb_csv(pods_file)
    except paths.TracesNotFound:
        pytest.skip("openb traces not available")
    nodes = load_nodes(_slice(tmp_path, nodes_src, 40, 1))
    pods = load_pods(_slice(tmp_path, pods_src, 260, 2), nodes.gpu_models)
    rng = np.random.default_rng(7)
    perm = rng.permutation(len(nodes))
    snaps = [nodes.snapshot(perm), nodes.snapshot(perm)]
    specs = pods.pod_specs(snaps[0].gpu_models)
    target = TargetWorkload.from_pods(specs, snaps[0].gpu_models)
    torch.manual_seed(0)
    net = DSANNet(ModelConfig(hidden=8, head="residual"))
    scorers: list[Scorer] = [FGDScorer(target), DSANScorer(serving_model(net, target))]
    ties = np.arange(len(perm), dtype=np.int64)
    placed = shared = 0
    for i in rng.permutation(len(specs)):
        got = [
            schedule_one(specs[i], s, sc, rng, ties) for s, sc in zip(snaps, scorers, strict=True)
        ]
        assert got[0] == got[1], f"pod {specs[i].name}: FGD {got[0]} vs DSAN {got[1]}"
        placed += got[0] is not None
        shared += got[0] is not None and specs[i].is_sharing
    assert placed > 100 and shared > 0  # the slice really exercises sharing pods
    assert np.array_equal(snaps[0].gpu_free, snaps[1].gpu_free)
