"""Artifacts of a trained DSAN: weights, TorchScript, torch.export (.pt2) and a manifest.

A model directory holds ``weights.pt`` (state dict), ``model.ts`` (TorchScript, what the
sidecar loads), ``model.pt2`` (torch.export, TorchScript's successor) and ``manifest.json``::

    {"version": ..., "feature_schema": <dsan.features.schema_hash()>, "model": {...},
     "training": {...}, "eval": {...}}

Every loader checks the manifest's feature schema against the running featurizer and
refuses a mismatch with :class:`SchemaMismatch`: a model fed columns in another order
would score garbage without any error.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import torch
from torch.export import Dim, export

from dsan.features import N_FEATURES, N_NODE_FEATURES, schema_hash
from dsan.model.net import DSANNet, ModelConfig
from dsan.snapshot import TELEMETRY_CHANNELS

MANIFEST = "manifest.json"
WEIGHTS = "weights.pt"
TORCHSCRIPT = "model.ts"
EXPORTED = "model.pt2"
#: Parameters added after models were shipped; absent ones keep their (zero) initialisation.
OPTIONAL_KEYS = frozenset({"head.gpu_skip.weight"})
#: The model shipped in the package (``make demo`` and the sidecar default).
DEFAULT_DIR = Path(__file__).with_name("default")


class SchemaMismatch(RuntimeError):
    """The model was trained on another feature schema than the running featurizer's."""


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


def _dynamic_shapes() -> tuple[dict[int, Any], ...]:
    n, m, e = (
        Dim("nodes", min=2, max=1 << 20),
        Dim("cands", min=2, max=1 << 20),
        Dim("edges", min=1, max=1 << 26),
    )
    return ({0: m}, {0: n}, {0: n}, {1: e}, {0: e}, {0: m}, {0: m})


def save(
    model: DSANNet,
    out_dir: str | Path,
    version: str,
    training: dict[str, Any] | None = None,
    evaluation: dict[str, Any] | None = None,
    exports: bool = True,
) -> Path:
    """Write weights, manifest and (``exports``) the TorchScript and .pt2 artifacts."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model = model.eval()
    torch.save(model.state_dict(), out / WEIGHTS)
    if exports:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # TorchScript's deprecation notice: we ship both
            torch.jit.save(torch.jit.script(model), str(out / TORCHSCRIPT))
            torch.export.save(
                export(model, example_inputs(), dynamic_shapes=_dynamic_shapes()), out / EXPORTED
            )
    manifest = {
        "version": version,
        "feature_schema": schema_hash(),
        "model": model.cfg.to_dict(),
        "training": training or {},
        "eval": evaluation or {},
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return out


def read_manifest(model_dir: str | Path) -> dict[str, Any]:
    """The manifest of ``model_dir``, checked against the running feature schema."""
    path = Path(model_dir) / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"no DSAN model at {model_dir}: {MANIFEST} missing")
    manifest: dict[str, Any] = json.loads(path.read_text())
    got, want = manifest.get("feature_schema"), schema_hash()
    if got != want:
        raise SchemaMismatch(
            f"model at {model_dir} was trained on feature schema {got!r}, but this featurizer "
            f"has {want!r} (dsan/featureschema.py changed): retrain with `dsan train` or use a "
            "matching release"
        )
    return manifest


def load(model_dir: str | Path = DEFAULT_DIR) -> tuple[DSANNet, dict[str, Any]]:
    """Eager model and manifest; raises :class:`SchemaMismatch` on a schema change."""
    manifest = read_manifest(model_dir)
    model = DSANNet(ModelConfig(**manifest["model"]))
    state = torch.load(Path(model_dir) / WEIGHTS, map_location="cpu", weights_only=True)
    missing, unexpected = model.load_state_dict(state, strict=False)
    # Models saved before the GPU-pod skip existed load with it at its zero initialisation
    # (same logits as before); anything else missing or extra is an error.
    if unexpected or set(missing) - OPTIONAL_KEYS:
        raise RuntimeError(
            f"{model_dir}: weights do not match the model: missing {missing}, "
            f"unexpected {unexpected}"
        )
    return model.eval(), manifest


def load_torchscript(
    model_dir: str | Path = DEFAULT_DIR,
) -> tuple[torch.jit.ScriptModule, dict[str, Any]]:
    manifest = read_manifest(model_dir)
    return torch.jit.load(str(Path(model_dir) / TORCHSCRIPT), map_location="cpu"), manifest


def load_exported(model_dir: str | Path = DEFAULT_DIR) -> tuple[torch.nn.Module, dict[str, Any]]:
    manifest = read_manifest(model_dir)
    return torch.export.load(Path(model_dir) / EXPORTED).module(), manifest
