"""The serving runtimes against the torch model training uses: the numpy runtime (the
sidecar's default, no torch) and the TorchScript one give DSANNet's logits, and a serving
artifact that cannot be served is refused with a message naming the file and the fault."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from dsan.core.snapshot import ClusterSnapshot, PodSpec
from dsan.features import featurize, node_block, telemetry_of
from dsan.model import artifact
from dsan.model.artifact import BadModel, SchemaMismatch, load_serving
from dsan.model.export import save
from dsan.model.graph import Graph, build_graph
from dsan.model.net import DSANNet, ModelConfig
from dsan.model.runtime import NumpyRuntime, Runtime, TorchScriptRuntime, load_runtime
from tests.support.headworld import PODS, random_residual, random_snapshot
from tests.support.models import numpy_runtime


def torch_logits(model: DSANNet, pod: PodSpec, snap: ClusterSnapshot,
                 nodes: np.ndarray) -> np.ndarray:
    """DSANNet.forward over the whole snapshot: the definition."""
    every = np.arange(len(snap), dtype=np.int64)
    x = featurize(pod, snap, nodes)
    ei, ew = build_graph(snap)
    with torch.inference_mode():
        logit, _ = model(torch.from_numpy(x), torch.from_numpy(node_block(snap, every)),
                         torch.from_numpy(telemetry_of(snap, every)), torch.from_numpy(ei),
                         torch.from_numpy(ew), torch.from_numpy(nodes),
                         torch.ones(len(nodes), dtype=torch.bool))
    return logit.double().numpy()


def runtime_logits(rt: Runtime, pod: PodSpec, snap: ClusterSnapshot,
                   nodes: np.ndarray) -> np.ndarray:
    every = np.arange(len(snap), dtype=np.int64)
    cols = node_block(snap, every)
    rt.set_streams(rt.temporal(telemetry_of(snap, every)), rt.spatial(cols, Graph.of(snap)))
    x = featurize(pod, snap, nodes)
    return rt.logits(x, nodes)


@pytest.mark.parametrize("head", ["mlp", "residual"])
@pytest.mark.parametrize("seed", [0, 1])
def test_the_numpy_runtime_gives_the_torch_models_logits(head: str, seed: int) -> None:
    if head == "residual":
        model = random_residual()
    else:
        torch.manual_seed(seed)
        model = DSANNet(ModelConfig(hidden=16))
    rt = numpy_runtime(model)
    snap = random_snapshot(60, seed)
    nodes = np.arange(0, 60, 3, dtype=np.int64)
    for pod in PODS:
        want = torch_logits(model, pod, snap, nodes)
        got = runtime_logits(rt, pod, snap, nodes)
        # float32 throughout, products summed in another order: a few ulps
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_the_torchscript_runtime_and_the_shipped_artifact_agree(tmp_path: Path) -> None:
    model = random_residual()
    save(model, tmp_path / "m", "test-1")
    ts, manifest = load_runtime(tmp_path / "m", "torchscript")
    npy, _ = load_runtime(tmp_path / "m", "numpy")
    assert isinstance(ts, TorchScriptRuntime) and isinstance(npy, NumpyRuntime)
    assert manifest["version"] == "test-1"
    snap = random_snapshot(40, 2)
    nodes = np.arange(40, dtype=np.int64)
    for pod in PODS:
        want = torch_logits(model, pod, snap, nodes)
        np.testing.assert_allclose(runtime_logits(ts, pod, snap, nodes), want, rtol=1e-6,
                                   atol=1e-5)
        np.testing.assert_allclose(runtime_logits(npy, pod, snap, nodes), want, rtol=1e-5,
                                   atol=1e-4)


def test_the_lstm_of_a_row_does_not_depend_on_the_other_rows() -> None:
    rt = numpy_runtime(random_residual())
    tel = np.random.default_rng(0).random((30, 6, 5)).astype(np.float32)
    full = rt.temporal(tel)
    np.testing.assert_allclose(rt.temporal(tel[[3, 17]]), full[[3, 17]], rtol=1e-6, atol=1e-7)


def test_an_unknown_runtime_is_refused() -> None:
    with pytest.raises(ValueError, match="numpy, torchscript"):
        load_runtime(artifact.DEFAULT_DIR, "onnx")


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    save(random_residual(), tmp_path / "m", "test-1", exports=False)
    return tmp_path / "m"


def _rewrite(model_dir: Path, **changes: np.ndarray) -> None:
    path = model_dir / artifact.SERVING
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays.update(changes)
    np.savez(path, **arrays)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_weights_are_refused_naming_the_parameter(model_dir: Path, bad: float) -> None:
    w = np.ones((1, 128), dtype=np.float32)
    w[0, 5] = bad
    _rewrite(model_dir, **{"head.skip.weight": w})
    with pytest.raises(BadModel, match=r"head\.skip\.weight holds NaN or infinite values"):
        load_serving(model_dir)


def test_a_misshapen_or_missing_parameter_is_refused(model_dir: Path) -> None:
    _rewrite(model_dir, **{"head.proj.weight": np.ones((3, 3), dtype=np.float32)})
    with pytest.raises(BadModel, match=r"head\.proj\.weight has shape \(3, 3\)"):
        load_serving(model_dir)
    path = model_dir / artifact.SERVING
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files if k != "fusion.key.weight"}
    np.savez(path, **arrays)  # type: ignore[arg-type]
    with pytest.raises(BadModel, match=r"fusion\.key\.weight is missing"):
        load_serving(model_dir)


def test_an_empty_truncated_or_absent_artifact_says_why(model_dir: Path) -> None:
    path = model_dir / artifact.SERVING
    data = path.read_bytes()
    path.write_bytes(b"")
    with pytest.raises(BadModel, match="is empty"):
        load_serving(model_dir)
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(BadModel, match=r"not a numpy \.npz archive"):
        load_serving(model_dir)
    path.unlink()
    with pytest.raises(BadModel, match=r"model\.npz missing"):
        load_serving(model_dir)


def test_a_manifest_of_another_schema_or_garbage_is_refused(model_dir: Path) -> None:
    manifest = model_dir / artifact.MANIFEST
    data = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**data, "feature_schema": "other"}))
    with pytest.raises(SchemaMismatch, match="retrain"):
        load_serving(model_dir)
    manifest.write_text("{not json")
    with pytest.raises(BadModel, match="not a JSON manifest"):
        load_serving(model_dir)
    manifest.write_text(json.dumps({**data, "model": {"hidden": 2}}))
    with pytest.raises(BadModel, match="hidden must be within"):
        load_serving(model_dir)


@pytest.mark.parametrize("change", [None, {"hidden": 16.0}, {"channels": 4}],
                         ids=["no model config", "float hidden", "other channels"])
def test_a_manifest_model_config_that_cannot_serve_is_refused(
        model_dir: Path, change: dict[str, float] | None) -> None:
    # Without its "model" config the manifest used to load as the defaults (the mlp head, not
    # the residual one the weights were trained for: every score wrong, no error); a float
    # width crashed the runtime with a TypeError; weights of another channel count loaded and
    # failed every request (the featurizer has len(TELEMETRY_CHANNELS) channels).
    if change is not None and "channels" in change:
        _rewrite(model_dir, **{"temporal.lstm.weight_ih_l0": np.ones((64, 4), np.float32)})
    manifest = model_dir / artifact.MANIFEST
    data = json.loads(manifest.read_text())
    assert data["model"]["hidden"] == 16
    if change is None:
        del data["model"]
    else:
        data["model"].update(change)
    manifest.write_text(json.dumps(data))
    with pytest.raises(BadModel, match="bad model config"):
        load_runtime(model_dir)


def test_export_refuses_to_write_non_finite_weights(tmp_path: Path) -> None:
    model = random_residual()
    with torch.no_grad():
        model.head.proj.weight[0, 0] = float("nan")
    with pytest.raises(BadModel, match=r"head\.proj\.weight"):
        save(model, tmp_path / "m", "bad", exports=False)
