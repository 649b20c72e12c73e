"""The openb stage's skip weights (``features``, ``weights`` for ``head.skip``, optional
``gpu_weights`` for ``head.gpu_skip``) written into a residual head (:func:`apply`), and the
scenario stage's start model (:func:`openb_stage`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dsan.features import FEATURE_NAMES
from dsan.model.export import load
from dsan.model.net import DSANNet, ModelConfig

#: The searched tie-break weights shipped with the package: the final model's openb stage.
OPENB_SKIP = Path(__file__).with_name("openb_skip.json")


def apply(
    net: DSANNet,
    features: list[str] | tuple[str, ...],
    weights: list[float],
    gpu_weights: list[float] | None = None,
) -> DSANNet:
    """Write skip weights into ``net``'s residual head (skip bias zero, FGD prior scale 1).
    While the MLP's last layer stays zero, the logit is then FGD's integer score plus the
    weighted features (GPU pods: ``weights + gpu_weights``)."""
    if not net.head.residual:
        raise ValueError("apply() needs a residual head (ModelConfig(head='residual'))")

    def row(values: list[float] | None) -> torch.Tensor:
        w = torch.zeros_like(net.head.skip.weight)
        for name, v in zip(features, values or [0.0] * len(features), strict=True):
            w[0, FEATURE_NAMES.index(name)] = float(v)
        return w

    with torch.no_grad():
        net.head.skip.weight.copy_(row(weights))
        net.head.gpu_skip.weight.copy_(row(gpu_weights))
        net.head.skip.bias.zero_()
        net.head.prior_scale.fill_(float(np.log(np.expm1(1.0))))  # softplus^-1(1)
    return net


def load_openb_skip(
    path: str | Path = OPENB_SKIP,
) -> tuple[list[str], list[float], list[float] | None]:
    """:func:`apply`'s arguments (features, weights, gpu_weights) from a tie-break file such as
    ``openb_skip.json``."""
    result = json.loads(Path(path).read_text())
    gw = result.get("gpu_weights")
    return (list(result["features"]), [float(v) for v in result["weights"]],
            None if gw is None else [float(v) for v in gw])


def openb_stage(init_model: str, seed: int, openb_skip: str) -> tuple[DSANNet, dict[str, Any]]:
    """The scenario stage's start model and its manifest: the model at ``init_model`` (or a
    fresh residual DSAN, which ranks as FGD), with ``openb_skip``'s weights written in."""
    if init_model:
        model, manifest = load(init_model)
    else:
        model = DSANNet(ModelConfig(hidden=32, head="residual"))
        manifest = {"version": f"residual-seed{seed}", "training": {"head": "residual"}}
    if openb_skip:
        features, weights, gpu_weights = load_openb_skip(openb_skip)
        apply(model, features, weights, gpu_weights)
        manifest["training"] = {
            **manifest.get("training", {}),
            "openb_skip": openb_skip,
            "skip_weights": dict(zip(features, weights, strict=True)),
            "gpu_skip_weights": dict(zip(features, gpu_weights or [], strict=False)),
        }
    return model, manifest
