"""The openb stage's searched skip weights as a model: written into a residual head, read
back from one, the result shipped with the package, and the model the scenario stage starts
from (:func:`openb_stage`).

:func:`dsan.train.search.greedy` finds tie-break weights of FGD's integer score; the weights
travel as a result dict (``openb_skip.json``: features, weights, whether GPU pods only, the
GPU-pod and sharing-pod rows). :func:`apply` writes them into a
:class:`~dsan.model.net.DSANNet`'s residual head, :func:`linear_from_model` and
:func:`share_from_model` read them back out of a saved model, so that
:class:`dsan.train.linear.LinearFGDScorer` ranks as the model does without the featurizer.
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

__all__ = ["OPENB_SKIP", "SkipArgs", "apply", "linear_from_model", "load_openb_skip",
           "openb_stage", "share_args", "share_from_model", "skip_args"]


def apply(
    net: DSANNet,
    features: list[str] | tuple[str, ...],
    weights: list[float],
    gpu_only: bool = False,
    gpu_weights: list[float] | None = None,
) -> DSANNet:
    """Write searched skip weights into ``net``'s residual head: ``weights`` into
    ``head.skip`` (every pod) and ``gpu_weights`` into ``head.gpu_skip`` (added for GPU pods);
    with ``gpu_only``, ``weights`` go into ``head.gpu_skip`` instead. Skip bias zero, FGD
    prior scale = 1 logit per integer point. The model then ranks nodes as
    :class:`LinearFGDScorer` with the same arguments (up to float32 rounding), as long as
    the MLP's last layer stays zero."""
    if not net.head.residual:
        raise ValueError("apply() needs a residual head (ModelConfig(head='residual'))")
    if gpu_only and gpu_weights is not None and any(gpu_weights):
        raise ValueError("gpu_only puts weights into gpu_skip: no separate gpu_weights")

    def row(values: list[float] | None) -> torch.Tensor:
        w = torch.zeros_like(net.head.skip.weight)
        for name, v in zip(features, values or [0.0] * len(features), strict=True):
            w[0, FEATURE_NAMES.index(name)] = float(v)
        return w

    skip, gpu = (row(None), row(weights)) if gpu_only else (row(weights), row(gpu_weights))
    with torch.no_grad():
        net.head.skip.weight.copy_(skip)
        net.head.gpu_skip.weight.copy_(gpu)
        net.head.skip.bias.zero_()
        net.head.prior_scale.fill_(float(np.log(np.expm1(1.0))))  # softplus^-1(1)
    return net


SkipArgs = tuple[list[str], list[float], bool, list[float] | None]


def skip_args(result: dict[str, Any]) -> SkipArgs:
    """``apply``'s (features, weights, gpu_only, gpu_weights) from a search result dict."""
    gw = result.get("gpu_weights")
    return (
        list(result["features"]),
        [float(v) for v in result["weights"]],
        bool(result.get("gpu_pods_only", False)),
        None if gw is None else [float(v) for v in gw],
    )


#: The searched tie-break weights shipped with the package (a ``--greedy`` run's result.json):
#: the openb stage of the final model, ``apply(net, *load_openb_skip())``.
OPENB_SKIP = Path(__file__).with_name("openb_skip.json")


def share_args(result: dict[str, Any]) -> list[float] | None:
    """What GPU-sharing pods add on top of the GPU-pod weights (``head.share_skip``), in
    ``skip_args``' feature order; ``None`` when the result has none."""
    sw = result.get("share_weights")
    return None if sw is None else [float(v) for v in sw]


def load_openb_skip(path: str | Path = OPENB_SKIP) -> SkipArgs:
    """(features, weights, gpu_only, gpu_weights) of the shipped openb search result:
    ``apply``'s arguments."""
    return skip_args(json.loads(Path(path).read_text()))


def linear_from_model(model_dir: str | Path) -> SkipArgs:
    """(features, weights, gpu_only, gpu_weights) of a model whose residual head is FGD plus
    the two skip layers (the MLP's last layer zero, prior scale 1):
    ``LinearFGDScorer(*args, target=...)`` ranks as the model does, ~5x faster. Raises
    ``ValueError`` for any other model."""
    from dsan.model.export import load

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
    names = [FEATURE_NAMES[i] for i in idx]
    if not w.any() and g.any():  # GPU pods only: the legacy gpu_only form
        return names, [float(g[i]) for i in idx], True, None
    gw = [float(g[i]) for i in idx] if g.any() else None
    return names, [float(w[i]) for i in idx], False, gw


def share_from_model(model_dir: str | Path) -> list[float] | None:
    """What GPU-sharing pods add (``head.share_skip``), in :func:`linear_from_model`'s feature
    order; ``None`` for a model without that row or with it at zero."""
    from dsan.model.export import load

    net, _ = load(model_dir)
    share = getattr(net.head, "share_skip", None)
    if share is None or not share.weight.detach().abs().max() > 0:
        return None
    names = linear_from_model(model_dir)[0]
    u = share.weight.detach().double().numpy()[0]
    missing = [FEATURE_NAMES[i] for i in np.flatnonzero(u) if FEATURE_NAMES[i] not in names]
    if missing:
        raise ValueError(f"{model_dir}: share_skip weights {missing} outside skip and gpu_skip")
    return [float(u[FEATURE_NAMES.index(n)]) for n in names]


def openb_stage(init_model: str, seed: int, openb_skip: str) -> tuple[DSANNet, dict[str, Any]]:
    """The model the scenario stage starts from, and the manifest describing it: the model at
    ``init_model``, or a fresh residual DSAN (ranks as FGD) when empty, with the skip weights
    of the ``openb_skip`` file written in when one is named."""
    if init_model:
        model, manifest = load(init_model)
    else:  # exactly what `dsan train --head residual --iterations 0 --seed S` starts from
        model = DSANNet(ModelConfig(hidden=32, head="residual"))
        manifest = {"version": f"residual-seed{seed}", "training": {"head": "residual"}}
    if openb_skip:
        # (features, weights, gpu_only, gpu_weights): old files without gpu_weights still load
        features, weights, gpu_only, gpu_weights = load_openb_skip(openb_skip)
        apply(model, features, weights, gpu_only, gpu_weights)
        manifest["training"] = {
            **manifest.get("training", {}),
            "openb_skip": openb_skip,
            "skip_weights": dict(zip(features, weights, strict=True)),
            "gpu_skip_weights": dict(zip(features, gpu_weights or [], strict=False)),
            "gpu_pods_only": gpu_only,
        }
    return model, manifest
