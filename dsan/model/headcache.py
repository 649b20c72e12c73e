"""DSAN's head, split so a pod class's per-node work is done once: exact, per request O(m).

Every place the model reads the (m, 128) features is linear first: ``fusion.query(x)``,
``head.proj(x)``, ``head.skip(x)``, ``head.gpu_skip(x) * (1 - pod_is_cpu_only)`` and the
residual prior ``x[:, fgd_score_int] * 100 * softplus(prior_scale)``. Of the 128 columns only
:data:`REQUEST_COLUMNS` depend on the candidate set (min-max ranks, "ties with the winner"
flags) or the clock (telemetry age); the rest are a function of the pod's class (every pod
field :func:`dsan.features.featurize` reads) and the node's state. So each first-layer output
is ``W[:, abs] x_abs + b`` (cached per class and node) ``+ W[:, req] x_req`` (9 columns,
per request). The cache keeps, per class, those pre-activations and the float64 quantities
the relative columns are computed from (the same expressions as ``featurize``, so ties
stay ties), and recomputes a node's row only after its allocation changed (CPU, memory,
GPUs, pod count: :class:`RowTracker`) or the node embeddings were refreshed (:meth:`clear`).
The rest of the head (attention over the two cached streams, ReLU, the 3H -> 2H -> 1 MLP)
runs per request in numpy float32 on the gathered rows, with two exact shortcuts: no
attention when the MLP ignores z, and no MLP for rows whose ReLU layer no request can open.
Weights are read from the module at every embedding refresh (``ServingModel`` refreshes when
a parameter is written), so a retrained model of the same architecture just works.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch
from torch import nn

from dsan.features import _RANK_HIGHER_IS_BETTER as _HIB
from dsan.features import (
    CPU_SCALE,
    FEATURE_NAMES,
    GPU_SCALE,
    MEM_SCALE,
    PlacementCache,
    _minmax_rows,
    age_columns,
    featurize,
)
from dsan.model.net import DSANNet
from dsan.snapshot import ClusterSnapshot, PodSpec, _rows_differ

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

#: Columns computed per request, in this order: the 7 candidate-relative ones, then the 2 age
#: columns (``tel_present`` moves with the age: infinite age means absent).
REQUEST_COLUMNS = [
    FEATURE_NAMES.index(c)
    for c in (
        "rel_frag_delta",
        "rel_bestfit",
        "rel_least_allocated",
        "rel_dotprod",
        "is_best_fgd",
        "is_best_bestfit",
        "rel_placement_cost",
        "tel_age",
        "tel_present",
    )
]
#: Pod classes kept at once (each ~ n x (3H + 8) numbers); the oldest is dropped beyond.
MAX_CLASSES = 32


def class_key(pod: PodSpec) -> Hashable:
    """Every pod field :func:`dsan.features.featurize` reads (not the name)."""
    return (pod.cpu_milli, pod.mem_mib, pod.num_gpu, pod.gpu_milli, pod.gpu_models,
            pod.priority, pod.task_type, pod.gang_size, pod.image)


class RowTracker:
    """Which nodes' allocation state (everything ``featurize`` reads that a placement changes)
    changed since a cached row was computed: one vectorised compare per request."""

    def __init__(self, snap: ClusterSnapshot) -> None:
        self.cpu_used = snap.cpu_used.copy()
        self.mem_used = snap.mem_used.copy()
        self.gpu_free = snap.gpu_free.copy()
        self.pod_count = None if snap.pod_count is None else snap.pod_count.copy()
        self.epoch = np.zeros(len(snap), dtype=np.int64)
        self.tick = 1

    def sync(self, snap: ClusterSnapshot) -> None:
        diff = (snap.cpu_used != self.cpu_used) | (snap.mem_used != self.mem_used)
        diff |= _rows_differ(snap.gpu_free, self.gpu_free)
        if self.pod_count is not None and snap.pod_count is not None:
            diff |= snap.pod_count != self.pod_count
        elif (self.pod_count is None) != (snap.pod_count is None):
            diff[:] = True  # pod counts appeared or vanished: every row's column moved
            self.pod_count = None if snap.pod_count is None else snap.pod_count.copy()
        changed = np.flatnonzero(diff)
        if changed.size:
            self.tick += 1
            self.epoch[changed] = self.tick
            self.cpu_used[changed] = snap.cpu_used[changed]
            self.mem_used[changed] = snap.mem_used[changed]
            self.gpu_free[changed] = snap.gpu_free[changed]
            if self.pod_count is not None and snap.pod_count is not None:
                self.pod_count[changed] = snap.pod_count[changed]


@dataclass(slots=True)
class _Class:
    pre: F32  # (n, 2H + 1): proj and linear logit terms of the absolute columns, biases in
    att: F32  # (n,): (key_1 - key_0) . query(x_abs) / sqrt(H), query bias in
    quant: F64  # (7, n): delta, bestfit, least, dot, cost, fgd_int, bestfit (as featurize)
    at: I64  # (n,) tracker tick each row was computed at; -1 never
    w_abs: F32  # (F, 3H + 1): first-layer weights (query, proj, linear), request cols zeroed
    req_w: F32  # (9, 2H + 1): weights of the request columns in ``pre``
    #: (n,) the ReLU layer is zero whatever the relative and age columns (each in [0, 1])
    #: are, given ``present`` (tel_present when the row was computed)
    dead: npt.NDArray[np.bool_]
    present: F32  # (n,)


class HeadCache:
    """Per-pod-class first-layer cache plus a numpy mirror of the rest of the head."""

    def __init__(self, model: DSANNet, max_classes: int = MAX_CLASSES) -> None:
        self.model = model
        self.max_classes = max_classes
        self._classes: dict[Hashable, _Class] = {}
        self._tracker: RowTracker | None = None
        #: Rows featurized into the cache, and requests served (observability and tests).
        self.rows_computed = 0
        self._load_weights()

    def _load_weights(self) -> None:
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
        self._w_first = np.concatenate([wq, wp], axis=0)  # (3H, F)
        self._b_query = _b(bq, h)
        self._w_skip = ws[0].astype(np.float64)
        self._bias = np.concatenate([_b(bp, 2 * h), _b(bs, 1)]).astype(np.float32)
        self._w_gpu = wg[0].astype(np.float64)
        self._residual = bool(m.head.residual)
        scale = nn.functional.softplus(m.head.prior_scale.detach().float()) * 100.0
        self._prior = (int(m.head.prior_col), float(scale))
        self._cpu_only = int(m.head.cpu_only_col)
        w1, b1 = lin(m.head.mlp[0])
        w2, b2 = lin(m.head.mlp[2])
        self._w1g, self._w1z = w1[:, : 2 * h].T.copy(), w1[:, 2 * h :].T.copy()
        self._b1 = _b(b1, 2 * h)
        self._w2, self._b2 = w2[0].copy(), float(_b(b2, 1)[0])
        self._wq_req = wq[:, REQUEST_COLUMNS].T.copy()  # (9, H): class-independent
        self._key = np.zeros((0, 2, h), dtype=np.float32)
        # Per node, from the embeddings: the request columns' share (9,) of the difference of
        # the two streams' attention scores (all a 2-way softmax needs), and value(stream)
        # through the MLP's z half: u1 = U_1 + b1, ud = U_0 - U_1, so W1z z + b1 = u1 +
        # alpha_0 ud (alpha_1 = 1 - alpha_0). No per-request H-wide attention work.
        self._gq = np.zeros((0, len(REQUEST_COLUMNS)), dtype=np.float32)
        # A head whose MLP ignores z (its weights there are zero) skips the attention.
        self._uses_z = bool(np.any(self._w1z))
        self._u1 = np.zeros((0, 2 * h), dtype=np.float32)
        self._ud = np.zeros((0, 2 * h), dtype=np.float32)

    def set_embeddings(self, emb: torch.Tensor) -> None:
        """New node embeddings (N, 2, H): the streams' keys and values, and every class's rows
        (their node columns and telemetry moved with them) are recomputed from now on; the
        weights are read again (the model may have been trained or reloaded in place)."""
        self._load_weights()
        with torch.inference_mode():
            key = self.model.fusion.key(emb).float().numpy()
            val = self.model.fusion.value(emb).float().numpy()
        self._key = key / np.float32(self.h**0.5)
        kd = self._key[:, 1] - self._key[:, 0]  # (n, H)
        self._gq = np.ascontiguousarray(kd @ self._wq_req.T)  # (n, 9)
        u = val @ self._w1z  # (n, 2, 2H)
        self._u1 = np.ascontiguousarray(u[:, 1] + self._b1)
        self._ud = np.ascontiguousarray(u[:, 0] - u[:, 1])
        self.clear()

    def clear(self) -> None:
        self._classes.clear()
        self._tracker = None

    def _linear(self, x_pod: F32) -> F32:
        """(3H + 1, F) weights of one class: query, proj, and the summed linear logit terms."""
        w = self._w_skip.copy()
        if self._residual:
            w = w + (1.0 - float(x_pod[self._cpu_only])) * self._w_gpu
            w[self._prior[0]] += self._prior[1]
        return np.concatenate([self._w_first, w[None, :].astype(np.float32)], axis=0).astype(
            np.float32
        )

    def logits(
        self,
        pod: PodSpec,
        snap: ClusterSnapshot,
        nodes: I64,
        node_cols: F32,
        placements: PlacementCache,
    ) -> F64:
        """The model's logits of ``pod`` on feasible ``nodes``; ``node_cols`` is the current
        :func:`dsan.features.node_block` of all nodes, ``placements`` the what-if cache."""
        n = len(snap)
        t = self._tracker
        if t is None or len(t.epoch) != n:
            t = self._tracker = RowTracker(snap)
            self._classes.clear()
        else:
            t.sync(snap)
        key = class_key(pod)
        c = self._classes.get(key)
        if c is None:
            if len(self._classes) >= self.max_classes:
                del self._classes[next(iter(self._classes))]
            c = _Class(np.zeros((n, 2 * self.h + 1), dtype=np.float32),
                       np.zeros(n, dtype=np.float32), np.zeros((7, n)),
                       np.full(n, -1, dtype=np.int64), np.zeros(0, dtype=np.float32),
                       np.zeros(0, dtype=np.float32), np.zeros(n, dtype=np.bool_),
                       np.zeros(n, dtype=np.float32))
            self._classes[key] = c
        stale = nodes[c.at[nodes] < t.epoch[nodes]]
        if stale.size:
            self._compute(c, pod, snap, np.unique(stale), node_cols, placements)
        return self._head(c, snap, nodes)

    def _compute(
        self, c: _Class, pod: PodSpec, snap: ClusterSnapshot, rows: I64, node_cols: F32,
        placements: PlacementCache,
    ) -> None:
        x, _ = featurize(pod, snap, rows, placements.workload, node_cols=node_cols[rows],
                         cache=placements)
        if c.w_abs.size == 0:  # first rows of the class: its weights (pod columns known now)
            w = self._linear(x[0])
            c.req_w = np.ascontiguousarray(w[self.h :, REQUEST_COLUMNS].T)
            w[:, REQUEST_COLUMNS] = 0.0  # their values in x are over ``rows`` only: unused
            c.w_abs = np.ascontiguousarray(w.T)
        pre = x @ c.w_abs
        q = pre[:, : self.h] + self._b_query
        c.att[rows] = np.einsum("mh,mh->m", q, self._key[rows, 1] - self._key[rows, 0])
        c.pre[rows] = pre[:, self.h :] + self._bias
        # Largest pre-activation any request can give (relative and age columns lie in
        # [0, 1]; tel_present, a gate in trained models, as now); a small margin keeps float
        # rounding on the exact side.
        h2 = 2 * self.h
        c.present[rows] = age_columns(snap, rows)[:, 1]
        top = c.pre[rows, :h2] + np.maximum(c.req_w[:-1, :h2], 0.0).sum(0)
        top += c.present[rows, None] * c.req_w[-1, :h2]
        c.dead[rows] = top.max(axis=1) <= -1e-5
        c.quant[:, rows] = _quantities(pod, snap, rows, placements).T
        assert self._tracker is not None
        c.at[rows] = self._tracker.tick
        self.rows_computed += len(rows)

    def _head(self, c: _Class, snap: ClusterSnapshot, nodes: I64) -> F64:
        h = self.h
        q = c.quant.take(nodes, axis=1)  # (7, m), C order: fast row reductions
        lo = q[:5].min(axis=1, keepdims=True)
        hi = q.max(axis=1, keepdims=True)
        xr = np.empty((len(nodes), len(REQUEST_COLUMNS)), dtype=np.float32)
        xr[:, :4] = _minmax_rows(q[:4], lo[:4], hi[:4], _HIB[:4]).T
        xr[:, 4] = q[5] >= hi[5]
        xr[:, 5] = q[6] >= hi[6] - 1e-9
        xr[:, 6] = _minmax_rows(q[4:5], lo[4:5], hi[4:5], _HIB[4:])[0]
        xr[:, 7:] = age_columns(snap, nodes)
        m, h2 = len(nodes), 2 * h
        lin = c.pre[nodes, h2] + xr @ c.req_w[:, h2]
        if xr.min() >= 0.0 and xr.max() <= 1.0:  # else (NaN, skewed clock) no row is dead
            live = np.flatnonzero(~c.dead[nodes] | (xr[:, -1] != c.present[nodes]))
        else:
            live = np.arange(m)
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
            out = np.full(m, np.maximum(self._b1, 0.0) @ self._w2, dtype=np.float32)
            if live.size:
                hl = g @ self._w1g
                hl += self._b1
                np.maximum(hl, 0.0, out=hl)
                out[live] = hl @ self._w2
        out += lin
        out += self._b2
        return out.astype(np.float64)


def _b(b: F32 | None, k: int) -> F32:
    return np.zeros(k, dtype=np.float32) if b is None else b


def _quantities(pod: PodSpec, snap: ClusterSnapshot, rows: I64, placements: PlacementCache) -> F64:
    """(m, 7) float64 quantities behind the relative columns, the same expressions (and so
    the same bits) as :func:`dsan.features.featurize_batch`."""
    k = pod.num_gpu if pod.gpu_milli > 0 else 0
    req = np.array([pod.cpu_milli, pod.mem_mib, float(k * pod.gpu_milli)], dtype=np.float64)
    req = req[:, None]
    m = len(rows)
    caps = np.empty((3, m))
    caps[0], caps[1] = snap.cpu_cap[rows], snap.mem_cap[rows]
    caps[2] = snap.gpu_count[rows] * 1000.0
    pos = caps > 0
    now = np.empty((3, m))
    np.subtract(caps[0], snap.cpu_used[rows], out=now[0])
    np.subtract(caps[1], snap.mem_used[rows], out=now[1])
    now[2] = snap.gpu_free[rows].astype(np.int64).sum(1).astype(np.float64)
    after = now - req
    fa = np.divide(after, caps, out=np.zeros((3, m)), where=pos)
    of_node = np.divide(req, caps, out=np.zeros((3, m)), where=pos)
    rq = req / np.array([CPU_SCALE, MEM_SCALE, GPU_SCALE])[:, None]
    out = np.empty((m, 7))
    pl = placements.get(pod, snap, rows)
    delta = pl.frag_after - pl.frag_before
    fgd = 1 / (1 + np.exp(np.clip(delta / 1000, -50, 50)))
    bestfit = 1 - (0.5 * (after[0] / CPU_SCALE) + 0.5 * (after[2] / GPU_SCALE))
    price = 1.0 if snap.hourly_cost is None else snap.hourly_cost[rows]
    out[:, 0] = delta
    out[:, 1] = bestfit
    out[:, 2] = 0.5 * (fa[0] + fa[1])
    out[:, 3] = rq[0] * (1 - fa[0]) + rq[1] * (1 - fa[1]) + rq[2] * (1 - fa[2])
    out[:, 4] = price * np.maximum(of_node[0], of_node[2])
    out[:, 5] = np.floor(fgd * 100) / 100
    out[:, 6] = bestfit
    return out
