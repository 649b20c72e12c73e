"""DSAN's head, split so a pod class's per-node work is done once: exact, and per request
O(candidates) only when the candidate set's extremes moved.

The first layer's absolute-column terms live per pod class and node in
:mod:`dsan.model.rowcache`. Per request, the 9 :data:`REQUEST_COLUMNS` are added: the 7
candidate-relative ones are min-max ranks and "ties with the winner" flags, so a node's value
depends only on its own cached quantities and the candidate set's per-column minimum and
maximum (``lo``, ``hi``); the 2 age columns only on the node's telemetry age. A node's logit
is therefore a function of (its class row, its age, ``lo``, ``hi``): :class:`SetLogits` keeps,
per class and ``(lo, hi)``, every node's logit and what it was computed from, and a request
recomputes only the nodes whose row or age moved since (usually the one or two nodes the
previous assumption changed). kube-scheduler sends rotations and subsets of the same feasible
nodes, whose extremes rarely move: a new ``(lo, hi)`` (or a clock tick that moves every age)
costs one pass over the candidates, as before.

The rest of the head (attention over the two cached streams, ReLU, the 3H -> 2H -> 1 MLP)
runs in numpy float32 on the rows it needs, with two exact shortcuts: no attention when the
MLP ignores z, and no MLP for rows whose ReLU layer no request can open. Weights are read
from the module at every embedding refresh (``ServingModel`` refreshes when a parameter is
written), so a retrained model of the same architecture just works. No torch on the request
path.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch
from torch import nn

from dsan.features import _LOG1P_HOUR, PlacementCache, _minmax_rows, age_columns
from dsan.features import _RANK_HIGHER_IS_BETTER as _HIB
from dsan.model import headscan
from dsan.model.net import DSANNet
from dsan.model.rowcache import ClassRows, FirstLayer, Hint, RowTracker, class_key
from dsan.rowfeatures import REQUEST_COLUMNS
from dsan.snapshot import ClusterSnapshot, PodSpec

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

__all__ = ["MAX_CLASSES", "MAX_SETS", "REQUEST_COLUMNS", "HeadCache", "SetLogits", "class_key"]

#: Pod classes kept at once (each ~ n x (3H + 8) numbers); the oldest is dropped beyond.
MAX_CLASSES = 32
#: Up to this many rows go through the few-row head (:meth:`HeadCache._head_few`).
FEW_ROWS = 4
#: Candidate-set extremes kept per class (each 3 x n numbers); the oldest is dropped beyond.
MAX_SETS = 4


@dataclass(slots=True)
class SetLogits:
    """Logits of one class's nodes under one ``(lo, hi)``, and what each was computed from."""

    logit: F64  # (n,)
    at: I64  # (n,) the class row's tick (ClassRows.at) used; -2 never
    age: F64  # (n,) the telemetry age used (NaN never equals: recomputed every time)

    @classmethod
    def empty(cls, n: int) -> SetLogits:
        return cls(np.zeros(n), np.full(n, -2, dtype=np.int64), np.full(n, np.nan))


class HeadCache:
    """Per-pod-class first-layer cache plus a numpy mirror of the rest of the head."""

    def __init__(self, model: DSANNet, max_classes: int = MAX_CLASSES,
                 max_sets: int = MAX_SETS) -> None:
        self.model = model
        self.max_classes = max_classes
        self.max_sets = max_sets
        self._classes: dict[Hashable, ClassRows] = {}
        self._tracker: RowTracker | None = None
        #: Snapshots passed in bump their version on every in-place write
        #: (:class:`~dsan.model.rowcache.RowTracker`); set by ``trust_snapshot_versions``.
        self.trust_versions = False
        #: The caller's record of the rows written to a snapshot between two versions
        #: (:meth:`note_changes`), read by the next row sync.
        self._hint: Hint | None = None
        #: Rows featurized into the cache, and rows sent through the head (observability
        #: and tests).
        self.rows_computed = 0
        self.rows_scored = 0
        self._load_weights()
        self._layer = self._first_layer(np.zeros((0, self.h), dtype=np.float32))

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

    def set_embeddings(self, emb: torch.Tensor, moved: I64 | None = None) -> None:
        """New node embeddings (N, 2, H): the streams' keys and values.

        ``moved=None`` (new weights, a new node set, a full refresh): the weights are read
        again and every class's rows are recomputed from now on. Otherwise the weights are
        the same and only the nodes ``moved`` have new absolute feature columns (their
        telemetry changed; every node's embedding still moved, through the GNN): each class
        keeps its first-layer rows and only re-derives their attention term from its stored
        query (O(nH) per class, no featurizing), drops its cached logits, and recomputes
        the ``moved`` rows at its next request, as after an allocation change."""
        if moved is None:
            self._load_weights()
        with torch.inference_mode():
            key = self.model.fusion.key(emb).float().numpy()
            val = self.model.fusion.value(emb).float().numpy()
        key = key / np.float32(self.h**0.5)
        kd = np.ascontiguousarray(key[:, 1] - key[:, 0])  # (n, H)
        self._layer = self._first_layer(kd)
        self._gq = np.ascontiguousarray(kd @ self._wq_req.T)  # (n, 9)
        u = val @ self._w1z  # (n, 2, 2H)
        self._u1 = np.ascontiguousarray(u[:, 1] + self._b1)
        self._ud = np.ascontiguousarray(u[:, 0] - u[:, 1])
        t = self._tracker
        if moved is None or t is None or len(t.epoch) != len(kd):
            self.clear()
            return
        for c in self._classes.values():
            c.rederive(self._layer)
        t.touch(moved)

    def trust_snapshot_versions(self) -> None:
        """From now on every snapshot passed in bumps ``version`` on each in-place write (the
        sidecar's cache promises it): an unchanged (snapshot, version) skips the row diff."""
        self.trust_versions = True
        if self._tracker is not None:
            self._tracker.trust_version = True

    def note_changes(self, since: int, version: int, rows: Sequence[int]) -> None:
        """The caller's record (with :meth:`trust_snapshot_versions`) that the snapshot the
        next call passes went from version ``since`` to ``version`` by writes to ``rows``
        alone: the row sync then compares only those rows. A record that does not span
        exactly from the last sync to that snapshot's version is ignored."""
        self._hint = (since, version, rows)

    def clear(self) -> None:
        self._classes.clear()
        self._tracker = None

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
        c, _ = self._update(pod, snap, nodes, node_cols, placements)
        return self._set_logits(c, snap, nodes)

    def _update(self, pod: PodSpec, snap: ClusterSnapshot, nodes: I64, node_cols: F32,
                placements: PlacementCache) -> tuple[ClassRows, I64 | None]:
        """Sync the row tracker; ``pod``'s class with the rows of ``nodes`` whose node
        changed recomputed (returned, None if none)."""
        n = len(snap)
        t = self._tracker
        if t is None or len(t.epoch) != n:
            t = self._tracker = RowTracker(snap, self.trust_versions)
            self._classes.clear()
        else:
            t.sync(snap, self._hint)
        self._hint = None
        key = class_key(pod)
        c = self._classes.get(key)
        if c is None:
            if len(self._classes) >= self.max_classes:
                del self._classes[next(iter(self._classes))]
            c = self._classes[key] = ClassRows.empty(n, self.h)
        stale = headscan.stale(nodes, c.at, t.epoch)
        rows = None
        if stale.size:
            # np.unique's sort machinery costs ~5 us; a settle's one or two rows need none
            rows = (np.array(sorted(set(stale.tolist())), dtype=np.int64)
                    if stale.size <= FEW_ROWS else np.unique(stale))
            c.update(self._layer, pod, snap, rows, node_cols, placements, t.tick)
            self.rows_computed += len(rows)
        c.last = nodes
        return c, rows

    def prefetch(self, pod: PodSpec, snap: ClusterSnapshot, node_cols: F32,
                 placements: PlacementCache) -> bool:
        """Bring ``pod``'s class up to date with ``snap`` by serving its last candidates
        again (rows the assumption changed, their logits under the last extremes): work the
        next request of the class then finds done. False if the class has no last request."""
        c = self._classes.get(class_key(pod))
        t = self._tracker
        # Classes live only while the node count does (logits() starts over when it
        # changes), so an unchanged count means every row of c.last is in range.
        if c is None or c.last is None or t is None or len(t.epoch) != len(snap):
            return False
        nodes = c.last
        c, rows = self._update(pod, snap, nodes, node_cols, placements)
        if rows is not None:  # else no row changed: the class is as its last request left it
            self._set_rows(c, snap, nodes, rows)
        return True

    def _set_rows(self, c: ClassRows, snap: ClusterSnapshot, nodes: I64, rows: I64) -> None:
        """:meth:`_set_logits` for a prefetch that just recomputed ``rows`` (of ``nodes``):
        when the candidates' extremes are ones the class holds logits for (usually: the
        assumption moved no extreme), only ``rows`` go through the head, and nothing else
        is gathered over the candidates (the next request checks every node anyway, and a
        logit is exact under its extremes whoever asks); new extremes take the full pass."""
        lo, hi = headscan.extremes(c.quant, nodes)
        e = c.sets.get((lo.tobytes(), hi.tobytes(), snap.telemetry is None))
        if not isinstance(e, SetLogits):
            self._set_logits(c, snap, nodes)
            return
        ages = snap.telemetry_age_s
        age = np.full(len(rows), np.inf) if ages is None else ages[rows]
        at = c.at[rows]
        todo = np.flatnonzero((e.at[rows] != at) | (e.age[rows] != age))
        if todo.size:
            sub, sub_age = rows[todo], age[todo]
            e.logit[sub] = self._head(c, snap, sub, c.quant[:, sub], lo, hi, sub_age)
            e.at[sub], e.age[sub] = at[todo], sub_age

    def _set_logits(self, c: ClassRows, snap: ClusterSnapshot, nodes: I64) -> F64:
        """Logits from the class's :class:`SetLogits` of the candidates' extremes; only the
        nodes whose row or age moved since go through the head. The passes over the
        candidates (extremes, what to recompute, the gather) are :mod:`dsan.model.headscan`'s."""
        lo, hi = headscan.extremes(c.quant, nodes)
        ages = snap.telemetry_age_s
        key = (lo.tobytes(), hi.tobytes(), snap.telemetry is None)
        e = c.sets.get(key)
        if not isinstance(e, SetLogits):
            if len(c.sets) >= self.max_sets:
                del c.sets[next(iter(c.sets))]
            e = c.sets[key] = SetLogits.empty(len(snap))
        todo, out = headscan.lookup(nodes, c.at, e.at, e.age, ages, e.logit)
        if todo.size == len(nodes):
            q = c.quant.take(nodes, axis=1)
            age = np.full(len(nodes), np.inf) if ages is None else ages[nodes]
            e.logit[nodes] = self._head(c, snap, nodes, q, lo, hi, age)
            e.at[nodes], e.age[nodes] = c.at[nodes], age
            out = e.logit[nodes]  # read back: a node listed twice reads what was kept
        elif todo.size:
            sub = nodes[todo]
            sub_age = np.full(len(sub), np.inf) if ages is None else ages[sub]
            e.logit[sub] = self._head(c, snap, sub, c.quant[:, sub], lo, hi, sub_age)
            e.at[sub], e.age[sub] = c.at[sub], sub_age
            out[todo] = e.logit[sub]
        return out

    def _head(self, c: ClassRows, snap: ClusterSnapshot, nodes: I64, q: F64, lo: F64,
              hi: F64, age: F64) -> F64:
        """The head on ``nodes`` with their quantities ``q`` (7, m) and telemetry ages
        ``age`` (m,), under the candidate set's extremes ``lo`` (5, 1) and ``hi`` (7, 1)."""
        h = self.h
        self.rows_scored += len(nodes)
        if len(nodes) <= FEW_ROWS:
            return self._head_few(c, snap, nodes, q, lo, hi, age)
        xr = np.empty((len(nodes), len(REQUEST_COLUMNS)), dtype=np.float32)
        ranks = _minmax_rows(q[:5], lo, hi[:5], _HIB)  # the five min-max columns at once
        xr[:, :4] = ranks[:4].T
        xr[:, 4] = q[5] >= hi[5]
        xr[:, 5] = q[6] >= hi[6] - 1e-9
        xr[:, 6] = ranks[4]
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
            out = np.full(m, self._dead_out, dtype=np.float32)
            if live.size:
                hl = g @ self._w1g
                hl += self._b1
                np.maximum(hl, 0.0, out=hl)
                out[live] = hl @ self._w2
        out += lin
        out += self._b2
        return out.astype(np.float64)

    def _head_few(self, c: ClassRows, snap: ClusterSnapshot, nodes: I64, q: F64, lo: F64,
                  hi: F64, age: F64) -> F64:
        """:meth:`_head` on up to :data:`FEW_ROWS` rows (a settle's changed rows, usually
        one), in ~20 numpy calls instead of ~50: numpy's per-call cost, not arithmetic, is
        the price of a few rows. The 9 request columns are the same float64 expressions
        (``_minmax_rows``; ``age_columns`` with the same ``np.log1p``) on Python floats or
        in C (:func:`dsan.model.headscan.request_rows_py` and its twin), so ``xr`` holds
        the same float32 values; the 2H + 1 first-layer outputs come from one
        matmul; a dead row (see :class:`~dsan.model.rowcache.ClassRows`) gets the same
        ``relu(b1) . w2`` as in :meth:`_head`. Only the matmul blocking may differ from the
        many-row path, in float32 rounding (pinned by the head cache tests)."""
        h2 = 2 * self.h
        m = len(nodes)
        capped = [(a if a < 1e9 else 1e9) if a == a else 0.0 for a in age.tolist()]
        tel_age = np.log1p(capped) / _LOG1P_HOUR  # numpy's log1p, as age_columns
        # The request columns and the dead rows, as _head decides them (headscan).
        xr, dead = headscan.request_rows(q, lo, hi, _HIB, tel_age, age,
                                         snap.telemetry is not None, c.present, c.dead, nodes)
        t_all = xr @ c.req_w  # (m, 2H + 1): the relative columns' share of every output
        t_all += c.pre[nodes]
        g = t_all[:, :h2]
        np.maximum(g, 0.0, out=g)
        live = [k for k in range(m) if not dead[k]]
        if self._uses_z:
            d = c.att[nodes] + np.einsum("mr,mr->m", xr, self._gq[nodes])
            a0 = 1.0 / (1.0 + np.exp(np.clip(d, -80.0, 80.0)))
            hid = self._u1[nodes]
            hid += a0[:, None] * self._ud[nodes]
            if len(live) == m:
                hid += g @ self._w1g
            elif live:
                hid[live] += g[live] @ self._w1g
            np.maximum(hid, 0.0, out=hid)
            out = hid @ self._w2
        else:
            hl = g @ self._w1g
            hl += self._b1
            np.maximum(hl, 0.0, out=hl)
            out = hl @ self._w2
            if len(live) < m:
                out[[k for k in range(m) if dead[k]]] = self._dead_out
        out += t_all[:, h2]
        out += self._b2
        return out.astype(np.float64)


def _b(b: F32 | None, k: int) -> F32:
    return np.zeros(k, dtype=np.float32) if b is None else b
