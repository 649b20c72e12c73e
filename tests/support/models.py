"""Serving objects of a torch DSAN's current weights, as :func:`dsan.model.export.save` would
ship them; a later update of the model is not seen."""

from __future__ import annotations

from typing import Any

from dsan.features.target import TargetWorkload
from dsan.model.export import serving_arrays
from dsan.model.net import DSANNet
from dsan.model.runtime import NumpyRuntime
from dsan.model.serving import ServingModel


def numpy_runtime(model: DSANNet) -> NumpyRuntime:
    """The numpy runtime of ``model``'s current weights (what ``model.npz`` would serve)."""
    return NumpyRuntime(serving_arrays(model), model.cfg)


def serving_model(model: DSANNet, workload: TargetWorkload | None = None,
                  **kwargs: Any) -> ServingModel:
    """A :class:`~dsan.model.serving.ServingModel` of ``model``'s current weights."""
    return ServingModel(numpy_runtime(model), workload, **kwargs)
