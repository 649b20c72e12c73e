"""The numpy mirror of DSAN's head past the first layer, for :mod:`dsan.model.headcache`.

A mirror holds the module's weights as numpy float32 arrays and, per node, what the current
embeddings give the head: the streams' key difference (the :class:`~dsan.model.rowcache.
FirstLayer` every class's rows are computed with), the request columns' share of the
attention score, and the streams' values through the MLP's z half. Given a class's cached
rows and a candidate set's extremes, :meth:`HeadMirror.set_logits` computes the head on
the rows asked for in one call of :func:`dsan.model.headscan.head_logits` (C, or its numpy
twin), and above :data:`C_HEAD_MAX` rows :meth:`HeadMirror.logits` runs the 9 request
columns, the attention over the two streams, ReLU and the 3H -> 2H -> 1 MLP in numpy, with
two exact shortcuts: no attention when the MLP ignores z, and no MLP for rows whose ReLU
layer no request can open. It keeps no per-request state: which rows to score, and under which
extremes, is the head cache's business. Weights are read from the module at every full
embedding refresh (``ServingModel`` refreshes when a parameter is written), so a retrained
model of the same architecture just works. No torch on the request path.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import torch
from torch import nn

from dsan.features import _LOG1P_HOUR, _minmax_rows, age_columns
from dsan.features import _RANK_HIGHER_IS_BETTER as _HIB
from dsan.model import headscan
from dsan.model.net import DSANNet
from dsan.model.rowcache import ClassRows, FirstLayer
from dsan.rowfeatures import REQUEST_COLUMNS
from dsan.snapshot import ClusterSnapshot

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

__all__ = ["C_HEAD_MAX", "HeadMirror"]

#: Up to this many rows :meth:`HeadMirror.set_logits` computes in one call of
#: :func:`dsan.model.headscan.head_logits` (its C twin when built); above,
#: numpy's BLAS products are as fast or faster (session 12, 2-core machine, per call: 1 row
#: 3 vs 19 us, 50 rows 22 vs 57, 300 rows 114 vs 131, 500 rows 205 vs 206, 1,000 rows 395
#: vs 344).
C_HEAD_MAX = 512


class HeadMirror:
    """A model's head past the first layer in numpy, over the current node embeddings."""

    def __init__(self, model: DSANNet) -> None:
        self.model = model
        #: Rows sent through the head (observability and tests).
        self.rows_scored = 0
        self.load_weights()
        self.layer = self._first_layer(np.zeros((0, self.h), dtype=np.float32))

    def load_weights(self) -> None:
        """Read the module's weights (again): at start and at every full refresh."""
        m = self.model

        def lin(mod: nn.Module) -> tuple[F32, F32 | None]:
            assert isinstance(mod, nn.Linear)
            b = None if mod.bias is None else mod.bias.detach().float().numpy().copy()
            return mod.weight.detach().float().numpy().copy(), b

        h = m.hidden
        self.h = h
        wq, bq = lin(m.fusion.query)
        wp, bp = lin(m.head.proj)
        ws, bs = lin(m.head.skip)
        wg, _ = lin(m.head.gpu_skip)
        scale = nn.functional.softplus(m.head.prior_scale.detach().float()) * 100.0
        self._parts = dict(
            h=h, w_first=np.concatenate([wq, wp], axis=0), b_query=_b(bq, h),
            bias=np.concatenate([_b(bp, 2 * h), _b(bs, 1)]).astype(np.float32),
            w_skip=ws[0].astype(np.float64), w_gpu=wg[0].astype(np.float64),
            residual=bool(m.head.residual), prior=(int(m.head.prior_col), float(scale)),
            cpu_only=int(m.head.cpu_only_col))
        w1, b1 = lin(m.head.mlp[0])
        w2, b2 = lin(m.head.mlp[2])
        self._w1g, self._w1z = w1[:, : 2 * h].T.copy(), w1[:, 2 * h :].T.copy()
        self._b1 = _b(b1, 2 * h)
        self._w2, self._b2 = w2[0].copy(), float(_b(b2, 1)[0])
        self._wq_req = wq[:, REQUEST_COLUMNS].T.copy()  # (9, H): class-independent
        # Per node, from the embeddings: the request columns' share (9,) of the difference of
        # the two streams' attention scores (all a 2-way softmax needs), and value(stream)
        # through the MLP's z half: u1 = U_1 + b1, ud = U_0 - U_1, so W1z z + b1 = u1 +
        # alpha_0 ud (alpha_1 = 1 - alpha_0). No per-request H-wide attention work.
        self._gq = np.zeros((0, len(REQUEST_COLUMNS)), dtype=np.float32)
        # A head whose MLP ignores z (its weights there are zero) skips the attention.
        self._uses_z = bool(np.any(self._w1z))
        self._parts["uses_z"] = self._uses_z
        # Without z, a row whose ReLU layer is zero scores relu(b1) . w2 (+ its linear terms).
        self._dead_out = np.maximum(self._b1, 0.0) @ self._w2
        self._u1 = np.zeros((0, 2 * h), dtype=np.float32)
        self._ud = np.zeros((0, 2 * h), dtype=np.float32)

    def _first_layer(self, key_diff: F32) -> FirstLayer:
        return FirstLayer(key_diff=key_diff, **self._parts)

    def set_embeddings(self, emb: torch.Tensor) -> None:
        """New node embeddings (N, 2, H): the streams' keys and values, with the weights last
        read (:meth:`load_weights` first when they may have changed)."""
        with torch.inference_mode():
            key = self.model.fusion.key(emb).float().numpy()
            val = self.model.fusion.value(emb).float().numpy()
        key = key / np.float32(self.h**0.5)
        kd = np.ascontiguousarray(key[:, 1] - key[:, 0])  # (n, H)
        self.layer = self._first_layer(kd)
        self._gq = np.ascontiguousarray(kd @ self._wq_req.T)  # (n, 9)
        u = val @ self._w1z  # (n, 2, 2H)
        self._u1 = np.ascontiguousarray(u[:, 1] + self._b1)
        self._ud = np.ascontiguousarray(u[:, 0] - u[:, 1])

    def logits(self, c: ClassRows, snap: ClusterSnapshot, nodes: I64, q: F64, lo: F64,
               hi: F64, age: F64) -> F64:
        """The head on ``nodes`` with their quantities ``q`` (7, m) and telemetry ages
        ``age`` (m,), under the candidate set's extremes ``lo`` (5, 1) and ``hi`` (7, 1)."""
        h = self.h
        self.rows_scored += len(nodes)
        m, h2 = len(nodes), 2 * h
        if headscan.compiled:  # the request columns and dead rows in one C pass
            capped = np.where(age == age, np.minimum(age, 1e9), 0.0)  # as age_columns
            xr, dead = headscan.request_rows(q, lo, hi, _HIB, np.log1p(capped) / _LOG1P_HOUR,
                                             age, snap.telemetry is not None, c.present,
                                             c.dead, nodes)
            live = np.flatnonzero(~dead)
        else:
            xr = np.empty((m, len(REQUEST_COLUMNS)), dtype=np.float32)
            ranks = _minmax_rows(q[:5], lo, hi[:5], _HIB)  # the five min-max columns at once
            xr[:, :4] = ranks[:4].T
            xr[:, 4] = q[5] >= hi[5]
            xr[:, 5] = q[6] >= hi[6] - 1e-9
            xr[:, 6] = ranks[4]
            xr[:, 7:] = age_columns(snap, nodes)
            if xr.min() >= 0.0 and xr.max() <= 1.0:  # else (NaN, skewed clock) none is dead
                live = np.flatnonzero(~c.dead[nodes] | (xr[:, -1] != c.present[nodes]))
            else:
                live = np.arange(m)
        lin = c.pre[:, h2].take(nodes) + xr @ c.req_lin
        sub = nodes if live.size == m else nodes[live]
        g = c.pre[sub, :h2] if live.size == m else c.pre[sub][:, :h2]
        g += (xr if live.size == m else xr[live]) @ c.req_w[:, :h2]
        np.maximum(g, 0.0, out=g)
        if self._uses_z:
            d = c.att[nodes] + np.einsum("mr,mr->m", xr, self._gq[nodes])
            # softmax over two streams: alpha_0 = sigmoid(s_0 - s_1), clipped against overflow
            a0 = 1.0 / (1.0 + np.exp(np.clip(d, -80.0, 80.0)))
            hid = self._u1[nodes]
            hid += a0[:, None] * self._ud[nodes]
            if live.size:
                hid[live] += g @ self._w1g
            np.maximum(hid, 0.0, out=hid)
            out = hid @ self._w2
        else:  # z unused: a dead row's hidden layer is relu(b1), the same for every row
            out = np.full(m, self._dead_out, dtype=np.float32)
            if live.size:
                hl = g @ self._w1g
                hl += self._b1
                np.maximum(hl, 0.0, out=hl)
                out[live] = hl @ self._w2
        out += lin
        out += self._b2
        return out.astype(np.float64)

    def set_logits(self, c: ClassRows, snap: ClusterSnapshot, nodes: I64, todo: I64,
                   lo: F64, hi: F64, e_logit: F64, e_at: I64, e_age: F64, out: F64) -> None:
        """The head on the candidates ``nodes[todo]`` under their set's extremes ``lo`` /
        ``hi``, written where the head cache keeps a set's logits: each logit at its row
        of ``e_logit`` with the class row's tick in ``e_at`` and the telemetry age it was
        computed at in ``e_age``, and ``out[todo]`` read back. Up to :data:`C_HEAD_MAX`
        rows in one call of :func:`dsan.model.headscan.head_logits` (request columns, MLP,
        linear term, stores; its numpy twin without the C build); more through
        :meth:`logits`, whose BLAS products win there."""
        ages = snap.telemetry_age_s
        if len(todo) <= C_HEAD_MAX:
            self.rows_scored += len(todo)
            z = (c.att, self._gq, self._u1, self._ud) if self._uses_z else None
            headscan.head_logits(nodes, todo, c.quant, lo, hi, _HIB, ages, _LOG1P_HOUR,
                                 snap.telemetry is not None, c.present, c.dead, c.req_w, c.pre,
                                 self._w1g, self._b1, self._w2, float(self._dead_out),
                                 self._b2, c.at, e_logit, e_at, e_age, out, z)
            return
        sub = nodes if len(todo) == len(nodes) else nodes[todo]
        age = np.full(len(sub), np.inf) if ages is None else ages[sub]
        e_logit[sub] = self.logits(c, snap, sub, c.quant.take(sub, axis=1), lo, hi, age)
        e_at[sub], e_age[sub] = c.at[sub], age
        out[todo] = e_logit[sub]  # read back: a node listed twice reads what was kept


def _b(b: F32 | None, k: int) -> F32:
    return np.zeros(k, dtype=np.float32) if b is None else b
