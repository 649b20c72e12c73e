"""A trained DSAN's directory: file names, manifest, model config and the serving artifact.

A model directory holds::

    manifest.json   {"version", "feature_schema", "model": ModelConfig, "training", "eval"}
    model.npz       the weights as numpy arrays: what the sidecar serves (no torch)
    weights.pt      the state dict (training resumes from it)
    model.ts        TorchScript (``dsan serve --runtime torchscript``)
    model.pt2       torch.export, TorchScript's successor

Numpy only (the serving install has no torch; :mod:`dsan.model.export` writes). Every loader
refuses a model trained on another feature schema (:class:`SchemaMismatch`): fed columns in
another order, it would score garbage without any error.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from dsan.core.snapshot import TELEMETRY_CHANNELS
from dsan.features import FEATURE_NAMES, N_FEATURES, N_NODE_FEATURES, schema_hash

MANIFEST = "manifest.json"
SERVING = "model.npz"
WEIGHTS = "weights.pt"
TORCHSCRIPT = "model.ts"
EXPORTED = "model.pt2"
#: The model shipped in the package (``make demo`` and the sidecar's default).
DEFAULT_DIR = Path(__file__).with_name("default")

HEADS = ("mlp", "residual")
#: The residual head's prior: FGD's own integer score, a derived feature.
PRIOR_FEATURE = "fgd_score_int"
#: The column the residual head's GPU-pod skip reads (1 for CPU-only pods).
CPU_ONLY_FEATURE = "pod_is_cpu_only"
#: Parameters added after models were shipped; absent ones keep their (zero) initialisation.
OPTIONAL_KEYS = frozenset({"head.gpu_skip.weight"})


class SchemaMismatch(RuntimeError):
    """The model was trained on another feature schema than the running featurizer's."""


class BadModel(ValueError):
    """A model directory whose files cannot be served; the message names the file and why."""


@dataclass(frozen=True)
class ModelConfig:
    hidden: int = 32
    features: int = N_FEATURES
    node_features: int = N_NODE_FEATURES
    channels: int = len(TELEMETRY_CHANNELS)
    #: "mlp" or "residual" (FGD score x learned scale + zero-init residual)
    head: str = "mlp"

    def __post_init__(self) -> None:
        # a float width (32.0 in a hand-edited manifest) passes the shape checks and then
        # fails as a slice index at the first request
        if not isinstance(self.hidden, int) or isinstance(self.hidden, bool):
            raise ValueError(f"ModelConfig.hidden must be an integer, got {self.hidden!r}")
        if not 4 <= self.hidden <= 512:
            raise ValueError(f"ModelConfig.hidden must be within 4..512, got {self.hidden}")
        if self.features != N_FEATURES or self.node_features != N_NODE_FEATURES:
            raise ValueError("ModelConfig feature widths must match dsan.features")
        if self.channels != len(TELEMETRY_CHANNELS):
            raise ValueError(f"ModelConfig.channels must be {len(TELEMETRY_CHANNELS)} (the "
                             f"telemetry channels dsan.features reads), got {self.channels}")
        if self.head not in HEADS:
            raise ValueError(f"ModelConfig.head must be one of {', '.join(HEADS)}, "
                             f"got {self.head!r}")

    @property
    def prior_col(self) -> int:
        return FEATURE_NAMES.index(PRIOR_FEATURE)

    @property
    def cpu_only_col(self) -> int:
        return FEATURE_NAMES.index(CPU_ONLY_FEATURE)

    def to_dict(self) -> dict[str, int | str]:
        return asdict(self)

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Every serving parameter's shape, by the torch state dict's names."""
        h, f, d, c = self.hidden, self.features, self.node_features, self.channels
        return {
            "temporal.lstm.weight_ih_l0": (4 * h, c), "temporal.lstm.weight_hh_l0": (4 * h, h),
            "temporal.lstm.bias_ih_l0": (4 * h,), "temporal.lstm.bias_hh_l0": (4 * h,),
            "spatial.conv1.lin_rel.weight": (h, d), "spatial.conv1.lin_rel.bias": (h,),
            "spatial.conv1.lin_root.weight": (h, d),
            "spatial.conv2.lin_rel.weight": (h, h), "spatial.conv2.lin_rel.bias": (h,),
            "spatial.conv2.lin_root.weight": (h, h),
            "fusion.query.weight": (h, f), "fusion.query.bias": (h,),
            "fusion.key.weight": (h, h),
            "fusion.value.weight": (h, h), "fusion.value.bias": (h,),
            "head.prior_scale": (), "head.skip.weight": (1, f), "head.skip.bias": (1,),
            "head.gpu_skip.weight": (1, f),
            "head.proj.weight": (2 * h, f), "head.proj.bias": (2 * h,),
            "head.mlp.0.weight": (2 * h, 3 * h), "head.mlp.0.bias": (2 * h,),
            "head.mlp.2.weight": (1, 2 * h), "head.mlp.2.bias": (1,),
        }


def read_manifest(model_dir: str | Path) -> dict[str, Any]:
    """The manifest of ``model_dir``, checked against the running feature schema."""
    path = Path(model_dir) / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"no DSAN model at {model_dir}: {MANIFEST} missing")
    try:
        manifest: dict[str, Any] = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadModel(f"{path}: not a JSON manifest ({exc})") from None
    if not isinstance(manifest, dict):
        raise BadModel(f"{path}: the manifest is not a JSON object")
    got, want = manifest.get("feature_schema"), schema_hash()
    if got != want:
        raise SchemaMismatch(f"model at {model_dir} was trained on feature schema {got!r}, but "
                             f"this featurizer has {want!r} (dsan/features/schema.py changed): "
                             "retrain with `dsan train` or use a matching release")
    return manifest


def config_of(manifest: Mapping[str, Any], where: str | Path) -> ModelConfig:
    # No defaults for a missing config: they are the mlp head, and weights trained with the
    # residual head would then be served without its prior, every score wrong without an error.
    if not isinstance(manifest.get("model"), Mapping):
        raise BadModel(f"{where}: bad model config in {MANIFEST}: \"model\" must be an "
                       f"object, got {manifest.get('model')!r}")
    try:
        return ModelConfig(**manifest["model"])
    except (TypeError, ValueError) as exc:
        raise BadModel(f"{where}: bad model config in {MANIFEST}: {exc}") from None


def check_arrays(arrays: Mapping[str, npt.NDArray[Any]], cfg: ModelConfig,
                 where: str | Path) -> dict[str, npt.NDArray[np.float32]]:
    """The serving parameters of ``arrays`` as float32, after checking that every one is
    there (but :data:`OPTIONAL_KEYS`, which start at zero), has its shape and is finite."""
    out: dict[str, npt.NDArray[np.float32]] = {}
    for name, shape in cfg.shapes().items():
        a = arrays.get(name)
        if a is None:
            if name not in OPTIONAL_KEYS:
                raise BadModel(f"{where}: parameter {name} is missing")
            a = np.zeros(shape, dtype=np.float32)
        a = np.asarray(a)
        if a.shape != shape:
            raise BadModel(f"{where}: parameter {name} has shape {a.shape}, want {shape}")
        if not np.issubdtype(a.dtype, np.floating):
            raise BadModel(f"{where}: parameter {name} has dtype {a.dtype}, want a float")
        if not np.isfinite(a).all():
            raise BadModel(f"{where}: parameter {name} holds NaN or infinite values "
                           f"({int((~np.isfinite(a)).sum())} of {a.size})")
        out[name] = np.array(a, dtype=np.float32, order="C")
    return out


def load_serving(model_dir: str | Path = DEFAULT_DIR
                 ) -> tuple[dict[str, npt.NDArray[np.float32]], ModelConfig, dict[str, Any]]:
    """(checked parameters, config, manifest) of ``model_dir``'s serving artifact."""
    manifest = read_manifest(model_dir)
    cfg = config_of(manifest, model_dir)
    path = Path(model_dir) / SERVING
    if not path.is_file():
        raise BadModel(f"{path} missing: export the model again (`dsan train export`) to "
                       "write the serving artifact")
    if path.stat().st_size == 0:
        raise BadModel(f"{path} is empty (0 bytes): the export was cut short")
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise BadModel(f"{path}: not a numpy .npz archive ({exc})") from None
    return check_arrays(arrays, cfg, path), cfg, manifest
