"""Writing a trained DSAN's directory (:mod:`dsan.model.artifact`'s layout) from torch, and
loading the torch model back."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.export import Dim, export

from dsan.core.snapshot import TELEMETRY_CHANNELS
from dsan.features import N_FEATURES, N_NODE_FEATURES, schema_hash
from dsan.model.artifact import (
    DEFAULT_DIR,
    EXPORTED,
    MANIFEST,
    OPTIONAL_KEYS,
    SERVING,
    TORCHSCRIPT,
    WEIGHTS,
    check_arrays,
    config_of,
    read_manifest,
)
from dsan.model.net import DSANNet


def example_inputs(n: int = 16, m: int = 8, e: int = 24, t: int = 6) -> tuple[torch.Tensor, ...]:
    """Inputs of :meth:`DSANNet.forward` for tracing and export."""
    g = torch.Generator().manual_seed(0)
    return (
        torch.rand(m, N_FEATURES, generator=g),
        torch.rand(n, N_NODE_FEATURES, generator=g),
        torch.rand(n, t, len(TELEMETRY_CHANNELS), generator=g),
        torch.randint(0, n, (2, e), generator=g),
        torch.rand(e, generator=g),
        torch.arange(m),
        torch.ones(m, dtype=torch.bool),
    )


def save(model: DSANNet, out_dir: str | Path, version: str, training: dict[str, Any] | None = None,
         evaluation: dict[str, Any] | None = None, exports: bool = True) -> Path:
    """Write weights, the serving artifact, the manifest and (``exports``) the TorchScript
    and .pt2 artifacts."""
    model = model.eval()
    arrays = serving_arrays(model)  # checked first: a non-finite weight writes nothing
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), out / WEIGHTS)
    np.savez(out / SERVING, **arrays)
    if exports:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # TorchScript's deprecation notice: we ship both
            torch.jit.save(torch.jit.script(model), str(out / TORCHSCRIPT))
            n, m = Dim("nodes", min=2, max=1 << 20), Dim("cands", min=2, max=1 << 20)
            e = Dim("edges", min=1, max=1 << 26)
            shapes = ({0: m}, {0: n}, {0: n}, {1: e}, {0: e}, {0: m}, {0: m})
            exported = export(model, example_inputs(), dynamic_shapes=shapes)
            torch.export.save(exported, out / EXPORTED)
    manifest = {
        "version": version,
        "feature_schema": schema_hash(),
        "model": model.cfg.to_dict(),
        "training": training or {},
        "eval": evaluation or {},
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return out


def serving_arrays(model: DSANNet) -> dict[str, Any]:
    """The model's serving parameters as checked float32 numpy arrays (``model.npz``)."""
    state = {k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}
    return check_arrays(state, model.cfg, "model")


def load(model_dir: str | Path = DEFAULT_DIR) -> tuple[DSANNet, dict[str, Any]]:
    """Eager model and manifest; raises ``SchemaMismatch`` on a schema change."""
    manifest = read_manifest(model_dir)
    model = DSANNet(config_of(manifest, model_dir))
    state = torch.load(Path(model_dir) / WEIGHTS, map_location="cpu", weights_only=True)
    missing, unexpected = model.load_state_dict(state, strict=False)
    # models saved before OPTIONAL_KEYS existed load them at their zero initialisation
    if unexpected or set(missing) - OPTIONAL_KEYS:
        raise RuntimeError(f"{model_dir}: weights do not match the model: missing {missing}, "
                           f"unexpected {unexpected}")
    return model.eval(), manifest


def load_torchscript(model_dir: str | Path = DEFAULT_DIR
                     ) -> tuple[torch.jit.ScriptModule, dict[str, Any]]:
    manifest = read_manifest(model_dir)
    return torch.jit.load(str(Path(model_dir) / TORCHSCRIPT), map_location="cpu"), manifest


def load_exported(model_dir: str | Path = DEFAULT_DIR) -> tuple[torch.nn.Module, dict[str, Any]]:
    manifest = read_manifest(model_dir)
    return torch.export.load(Path(model_dir) / EXPORTED).module(), manifest
