"""DSAN's forward pass for serving, split as serving needs it: :meth:`~Runtime.temporal` (LSTM,
(n, T, C) -> (n, H)), :meth:`~Runtime.spatial` (two GraphConv layers over the mean adjacency,
(N, D) -> (N, H)), :meth:`~Runtime.set_streams` and :meth:`~Runtime.logits` (fusion and
head, (m, F) -> (m,)); the maths of :class:`dsan.model.net.DSANNet`.

:class:`NumpyRuntime` serves ``model.npz`` with numpy alone; :class:`TorchScriptRuntime` runs
``model.ts`` (torch imported only then). Same logits up to float32 rounding.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from dsan.core.snapshot import F64, I64
from dsan.model.artifact import (
    DEFAULT_DIR,
    TORCHSCRIPT,
    ModelConfig,
    config_of,
    load_serving,
    read_manifest,
)
from dsan.model.graph import F32, Graph

RUNTIMES = ("numpy", "torchscript")


class Runtime(Protocol):
    """What DSAN's serving path needs from a model runtime."""

    cfg: ModelConfig

    def temporal(self, telemetry: F32) -> F32:
        """(n, T, C) telemetry -> (n, H) last LSTM hidden state."""

    def spatial(self, node_x: F32, graph: Graph) -> F32:
        """(N, D) node features over the whole graph -> (N, H)."""

    def set_streams(self, temporal: F32, spatial: F32) -> None:
        """Keep every node's two streams (N, H) each for :meth:`logits`."""

    def logits(self, x: F32, nodes: I64) -> F64:
        """Features (m, F) of candidate ``nodes`` (m,) -> logits (m,)."""

    def streams(self, nodes: I64) -> F32:
        """The kept streams of ``nodes``, (m, 2, H)."""

    def head(self, x: F32, streams: F32) -> F64:
        """:meth:`logits` with the streams (m, 2, H) given (explanations vary them)."""


def _sigmoid(x: F32) -> F32:
    # tanh form: no overflow warning for large negative inputs
    out: F32 = 0.5 * (1.0 + np.tanh(0.5 * x))
    return out


class NumpyRuntime:
    """DSANNet's serving maths on float32 numpy arrays (the torch state dict's names)."""

    def __init__(self, params: dict[str, F32], cfg: ModelConfig) -> None:
        self.cfg = cfg
        p = params
        h = cfg.hidden
        self.h = h
        self._w_ih = p["temporal.lstm.weight_ih_l0"].T.copy()
        self._w_hh = p["temporal.lstm.weight_hh_l0"].T.copy()
        self._b_lstm = p["temporal.lstm.bias_ih_l0"] + p["temporal.lstm.bias_hh_l0"]
        self._conv = [(p[f"spatial.{c}.lin_rel.weight"].T.copy(), p[f"spatial.{c}.lin_rel.bias"],
                       p[f"spatial.{c}.lin_root.weight"].T.copy()) for c in ("conv1", "conv2")]
        self._w_key = p["fusion.key.weight"].T.copy()
        self._w_value = p["fusion.value.weight"].T.copy()
        self._b_value = p["fusion.value.bias"]
        # Every linear map of the features, side by side: query (H), proj (2H), skip, gpu skip.
        self._w_first = np.concatenate([p["fusion.query.weight"], p["head.proj.weight"],
                                        p["head.skip.weight"], p["head.gpu_skip.weight"]]).T.copy()
        self._b_first = np.concatenate([p["fusion.query.bias"], p["head.proj.bias"],
                                        p["head.skip.bias"], np.zeros(1, np.float32)])
        w0 = p["head.mlp.0.weight"]
        self._w_g, self._w_z = w0[:, : 2 * h].T.copy(), w0[:, 2 * h:].T.copy()
        self._b_0 = p["head.mlp.0.bias"]
        self._w_2 = p["head.mlp.2.weight"][0].copy()
        self._b_2 = np.float32(p["head.mlp.2.bias"][0])
        self._residual = cfg.head == "residual"
        a = float(p["head.prior_scale"])
        # softplus, as torch computes it (linear above 20)
        self._prior = np.float32((a if a > 20 else math.log1p(math.exp(a))) * 100.0)
        self._prior_col, self._cpu_col = cfg.prior_col, cfg.cpu_only_col
        self._scale = np.float32(1.0 / math.sqrt(h))
        self._streams = np.zeros((0, 2, h), dtype=np.float32)
        self._keys = np.zeros((0, 2, h), dtype=np.float32)
        self._values = np.zeros((0, 2, h), dtype=np.float32)

    def temporal(self, telemetry: F32) -> F32:
        n, t, _ = telemetry.shape
        h = self.h
        gates_x = telemetry.reshape(n * t, -1) @ self._w_ih
        gates_x = gates_x.reshape(n, t, 4 * h)
        gates_x += self._b_lstm
        hid = np.zeros((n, h), dtype=np.float32)
        cell = np.zeros((n, h), dtype=np.float32)
        for k in range(t):  # T steps (16 in the sidecar), each vectorised over the nodes
            g = gates_x[:, k] + hid @ self._w_hh
            i, f = _sigmoid(g[:, :h]), _sigmoid(g[:, h: 2 * h])
            c_new, o = np.tanh(g[:, 2 * h: 3 * h]), _sigmoid(g[:, 3 * h:])
            cell = f * cell + i * c_new
            hid = o * np.tanh(cell)
        return hid

    def spatial(self, node_x: F32, graph: Graph) -> F32:
        (r1, b1, o1), (r2, b2, o2) = self._conv
        adj = graph.adjacency
        # A (x W) = (A x) W: aggregating after the projection moves H columns instead of D
        h1: F32 = np.maximum(adj @ (node_x @ r1) + b1 + node_x @ o1, np.float32(0.0))
        out: F32 = adj @ (h1 @ r2) + b2 + h1 @ o2
        return out

    def set_streams(self, temporal: F32, spatial: F32) -> None:
        self._streams = np.stack([temporal, spatial], axis=1)  # (N, 2, H)
        # the streams' keys and values are pod-independent: once per refresh, not per pod
        self._keys = self._streams @ self._w_key
        self._values = self._streams @ self._w_value + self._b_value

    def streams(self, nodes: I64) -> F32:
        return self._streams[nodes]

    def logits(self, x: F32, nodes: I64) -> F64:
        return self._head(x, self._keys[nodes], self._values[nodes])

    def head(self, x: F32, streams: F32) -> F64:
        return self._head(x, streams @ self._w_key, streams @ self._w_value + self._b_value)

    def _head(self, x: F32, keys: F32, values: F32) -> F64:
        h = self.h
        first = x @ self._w_first
        first += self._b_first
        q = first[:, :h]
        att = np.einsum("mh,mkh->mk", q, keys) * self._scale  # (m, 2)
        # softmax over the two streams: elementwise max and sum of the two columns (numpy's
        # reductions along an axis of 2 cost ~10x more per row; the same two operations)
        att -= np.maximum(att[:, 0], att[:, 1])[:, None]
        np.exp(att, out=att)
        att /= (att[:, 0] + att[:, 1])[:, None]
        z = np.einsum("mk,mkh->mh", att, values)
        g = np.maximum(first[:, h: 3 * h], 0.0)
        hidden = g @ self._w_g
        hidden += z @ self._w_z
        hidden += self._b_0
        np.maximum(hidden, 0.0, out=hidden)
        out: F32 = hidden @ self._w_2 + self._b_2 + first[:, 3 * h]
        if self._residual:
            out += self._prior * x[:, self._prior_col]
            out += first[:, 3 * h + 1] * (1.0 - x[:, self._cpu_col])
        return out.astype(np.float64)


class TorchScriptRuntime:
    """The exported ``model.ts`` behind the same interface (``--runtime torchscript``): the
    LSTM, PyG's GraphConv message passing and the head's ``score`` run in TorchScript."""

    def __init__(self, module: Any, cfg: ModelConfig) -> None:
        import torch

        self._torch = torch
        self.cfg = cfg
        self._m = module
        self._streams = torch.zeros(0, 2, cfg.hidden)

    def temporal(self, telemetry: F32) -> F32:
        t = self._torch
        with t.inference_mode():
            return self._m.temporal(t.from_numpy(np.ascontiguousarray(telemetry))).numpy()

    def spatial(self, node_x: F32, graph: Graph) -> F32:
        t = self._torch
        with t.inference_mode():
            return self._m.spatial(t.from_numpy(np.ascontiguousarray(node_x)),
                                   t.from_numpy(graph.edge_index),
                                   t.from_numpy(graph.edge_weight)).numpy()

    def set_streams(self, temporal: F32, spatial: F32) -> None:
        self._streams = self._torch.from_numpy(np.stack([temporal, spatial], axis=1))

    def streams(self, nodes: I64) -> F32:
        return self._streams[self._torch.from_numpy(nodes)].numpy()

    def logits(self, x: F32, nodes: I64) -> F64:
        return self._score(x, self._streams[self._torch.from_numpy(nodes)])

    def head(self, x: F32, streams: F32) -> F64:
        return self._score(x, self._torch.from_numpy(np.ascontiguousarray(streams)))

    def _score(self, x: F32, streams: Any) -> F64:
        t = self._torch
        m = len(x)
        with t.inference_mode():
            out, _ = self._m.score(t.from_numpy(np.ascontiguousarray(x)), streams,
                                   t.ones(m, dtype=t.bool), t.zeros(m, dtype=t.long), 1)
        return out.double().numpy()


def load_runtime(model_dir: str | Path = DEFAULT_DIR, runtime: str = "numpy"
                 ) -> tuple[Runtime, dict[str, Any]]:
    """The ``runtime`` ("numpy" or "torchscript") of ``model_dir`` and its manifest."""
    if runtime == "numpy":
        params, cfg, manifest = load_serving(model_dir)
        return NumpyRuntime(params, cfg), manifest
    if runtime == "torchscript":
        import torch

        manifest = read_manifest(model_dir)
        module = torch.jit.load(str(Path(model_dir) / TORCHSCRIPT), map_location="cpu")
        return TorchScriptRuntime(module.eval(), config_of(manifest, model_dir)), manifest
    raise ValueError(f"unknown DSAN runtime {runtime!r}; choose one of {', '.join(RUNTIMES)}")
