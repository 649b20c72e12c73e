"""The openb stage's skip weights (``features``, ``weights`` for ``head.skip``, optional
``gpu_weights`` for ``head.gpu_skip``) written into a residual head (:func:`apply`), read
back out of one (:func:`linear_from_model`), and the scenario stage's start model.
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
#: (features, weights, gpu_weights): the arguments of :func:`apply` and ``LinearFGDScorer``.
SkipArgs = tuple[list[str], list[float], list[float] | None]


def apply(
    net: DSANNet,
    features: list[str] | tuple[str, ...],
    weights: list[float],
    gpu_weights: list[float] | None = None,
) -> DSANNet:
    """Write skip weights into ``net``'s residual head (skip bias zero, FGD prior scale 1).
    While the MLP's last layer stays zero, the model then ranks nodes as
    :class:`~dsan.train.linear.LinearFGDScorer` with the same arguments."""
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


def skip_args(result: dict[str, Any]) -> SkipArgs:
    """:func:`apply`'s arguments from a search result dict (``gpu_pods_only`` files: their
    weights are GPU pods' alone)."""
    w = [float(v) for v in result["weights"]]
    gw = result.get("gpu_weights")
    if result.get("gpu_pods_only", False):
        w, gw = [0.0] * len(w), w
    return list(result["features"]), w, None if gw is None else [float(v) for v in gw]


def load_openb_skip(path: str | Path = OPENB_SKIP) -> SkipArgs:
    return skip_args(json.loads(Path(path).read_text()))


def linear_from_model(model_dir: str | Path) -> SkipArgs:
    """The skip weights of a model whose residual head is FGD plus the skip layers (the MLP's
    last layer zero, prior scale 1), for ``LinearFGDScorer``; ``ValueError`` for any other."""
    net, _ = load(model_dir)
    head = net.head
    mlp_out = head.mlp[2]
    assert isinstance(mlp_out, torch.nn.Linear)
    scale = float(torch.nn.functional.softplus(head.prior_scale.detach()))
    if not head.residual or mlp_out.weight.abs().max() > 0 or mlp_out.bias.abs().max() > 0:
        raise ValueError(f"{model_dir}: not a residual head with a zero MLP output")
    if abs(scale - 1.0) > 1e-5 or abs(float(head.skip.bias.detach())) > 0:
        raise ValueError(f"{model_dir}: prior scale {scale} != 1 or non-zero skip bias")
    w = head.skip.weight.detach().double().numpy()[0]
    g = head.gpu_skip.weight.detach().double().numpy()[0]
    idx = np.flatnonzero((w != 0) | (g != 0))
    gw = [float(g[i]) for i in idx] if g.any() else None
    return [FEATURE_NAMES[i] for i in idx], [float(w[i]) for i in idx], gw


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
