"""Experience collection: play episodes with a model (sampled or greedy) or a teacher
heuristic, and keep what PPO and imitation need, as flat arrays.

Per decision the hot path is: featurize the feasible nodes (numpy, vectorised), index the
episode's cached node embeddings, run the small head. Node embeddings are computed once per
episode: telemetry and topology do not change inside an openb episode.

Two ways to play, same decisions and bookkeeping (:class:`_Player`):

* :func:`run_episode`: one episode, one head call per decision (the original path; also the
  teacher and imitation path);
* :func:`collect`: K episodes in lockstep (CleanRL-style vectorised environments): each step
  scores every live episode's candidate rows in ONE head call (``segment`` names the
  episode) and samples per segment in numpy, so torch's per-call overhead is paid once per
  step instead of once per decision.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from dsan.features import (
    N_FEATURES,
    PlacementCache,
    featurize,
    featurize_batch,
    node_block,
    telemetry_of,
)
from dsan.model.graph import build_graph
from dsan.model.net import DSANNet
from dsan.policies.base import Scorer
from dsan.train.env import Bound, Episode, bind_many, refresh_bound

_LISTS = ("x", "cand", "teacher")


@dataclass
class Rollout:
    """Decisions of one episode. ``x`` is (sum m_i, 128); ``offsets`` (k+1,) delimit steps."""

    node_x: npt.NDArray[np.float32]
    telemetry: npt.NDArray[np.float32]
    edge_index: torch.Tensor
    edge_weight: torch.Tensor
    x: list[npt.NDArray[np.float32]] = field(default_factory=list)
    cand: list[npt.NDArray[np.int64]] = field(default_factory=list)
    action: list[int] = field(default_factory=list)
    teacher: list[npt.NDArray[np.bool_]] = field(default_factory=list)
    logp: list[float] = field(default_factory=list)
    value: list[float] = field(default_factory=list)
    reward: list[float] = field(default_factory=list)
    alloc_pct: float = 0.0
    failed: int = 0
    pods: int = 0

    def __len__(self) -> int:
        return len(self.action)

    def flat(self) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Stacked features, candidate node ids and per-step offsets."""
        sizes = np.array([len(c) for c in self.cand], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        return np.concatenate(self.x), np.concatenate(self.cand), offsets

    # Pickled (RPC, multiprocessing) as a few flat arrays instead of thousands of small ones,
    # and without the node-block columns of ``x`` when they are the episode's ``node_x`` rows
    # (always, for rollouts played here): 44% fewer bytes to ship. Unpickling rebuilds the
    # same float32 values and restores the per-step lists as views into those buffers.
    def __getstate__(self) -> dict[str, Any]:
        st = dict(self.__dict__)
        sizes = np.array([len(c) for c in self.cand], dtype=np.int64)
        st["_sizes"] = sizes
        for k in _LISTS:
            vals = st[k]
            st[k] = np.concatenate(vals) if vals and len(vals) == len(sizes) else None
        for k in ("action", "logp", "value", "reward"):
            st[k] = np.asarray(st[k], dtype=np.int64 if k == "action" else np.float64)
        st["_x_node_cols"] = 0
        x, cand, d = st["x"], st["cand"], self.node_x.shape[1]
        if x is not None and cand is not None and np.array_equal(x[:, :d], self.node_x[cand]):
            st["x"], st["_x_node_cols"] = np.ascontiguousarray(x[:, d:]), d
        return st

    def __setstate__(self, st: dict[str, Any]) -> None:
        cuts = np.cumsum(st.pop("_sizes"))[:-1]
        if st.pop("_x_node_cols", 0):
            st["x"] = np.concatenate([st["node_x"][st["cand"]], st["x"]], axis=1)
        for k in _LISTS:
            st[k] = [] if st[k] is None else np.split(st[k], cuts)
        for k in ("action", "logp", "value", "reward"):
            st[k] = st[k].tolist()
        self.__dict__.update(st)


class RowStore:
    """Float32 feature rows that rollouts keep, in chunks reused from one collection to the
    next (:meth:`reset`), so a long-lived worker writes them into memory it already touched.

    Why: a worker keeps every decision's rows (~57 x 128 float32 each, ~275 MB for 16
    episodes of 96 nodes). Allocated afresh each round, they are faulted in page by page, and
    on this VM a first touch costs ~20 us: 35-48k minor faults and 0.8-0.9 s of system time
    in a ~6 s round of an RPC worker (measured). Chunks that outlive the round are paid once.
    """

    def __init__(self, cols: int = N_FEATURES, chunk_rows: int = 1 << 17) -> None:
        self.cols, self.chunk_rows = cols, chunk_rows
        self.chunks: list[npt.NDArray[np.float32]] = []
        self._chunk = self._at = 0

    def reset(self) -> None:
        """Reuse the storage from the start: rows handed out before are overwritten by the next
        :meth:`put`, so only call this once no rollout that holds them is in use."""
        self._chunk = self._at = 0

    def put(self, x: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """A copy of ``x`` (n, cols) in the store; a view that stays valid until :meth:`reset`."""
        n = len(x)
        while self._chunk < len(self.chunks) and self._at + n > len(self.chunks[self._chunk]):
            self._chunk, self._at = self._chunk + 1, 0
        if self._chunk == len(self.chunks):
            self.chunks.append(np.empty((max(n, self.chunk_rows), self.cols), dtype=np.float32))
        out = self.chunks[self._chunk][self._at : self._at + n]
        out[...] = x
        self._at += n
        return out


class _Player:
    """One episode being played: observation (features of the next decision) and the reward
    bookkeeping once an action is chosen. Pods that failed between two decisions are charged
    to the earlier one (the first decision takes those before it)."""

    def __init__(self, ep: Episode, model: DSANNet | None, keep: bool, need_x: bool) -> None:
        self.ep, self.keep, self.need_x = ep, keep, need_x
        nodes = np.arange(len(ep.snap), dtype=np.int64)
        self.node_x = node_block(ep.snap, nodes)
        tel = telemetry_of(ep.snap, nodes)
        ei, ew = (torch.from_numpy(a) for a in build_graph(ep.snap))
        self.ro = Rollout(self.node_x, tel, ei, ew)
        self.emb = torch.zeros(0)
        if model is not None:
            with torch.inference_mode():
                self.emb = model.embed_nodes(
                    torch.from_numpy(self.node_x), torch.from_numpy(tel), ei, ew
                )
        self.cache = PlacementCache(ep.target)
        self.pending_sla = 0.0
        self.pod: Any = None
        self.cand = np.zeros(0, dtype=np.int64)
        self.x: npt.NDArray[np.float32] | None = None

    def advance(self, features: bool = True) -> bool:
        """Move to the next decision (features in ``self.x`` unless ``features`` is False: the
        caller featurizes); False once the episode ended."""
        ep, ro = self.ep, self.ro
        nxt = ep.next_decision()
        if nxt is None:
            if ro.reward:
                ro.reward[-1] += ep.weights.sla * self.pending_sla
            ro.alloc_pct, ro.failed, ro.pods = ep.alloc_pct, ep.failed, len(ep.order)
            return False
        self.pod, self.cand, sla = nxt
        # The episode's tracker holds every node's current fragmentation: the cache's
        # "before" of each what-if, already computed.
        self.cache.adopt_fragmentation(ep.frag.frag)
        if ro.reward:
            ro.reward[-1] += ep.weights.sla * sla
        else:
            self.pending_sla += sla
        self.x = (
            featurize(
                self.pod,
                ep.snap,
                self.cand,
                ep.target,
                node_cols=self.node_x[self.cand],
                cache=self.cache,
            )[0]
            if self.need_x and features
            else None
        )
        return True

    def commit(
        self,
        a: int,
        logp: float,
        value: float,
        best: npt.NDArray[np.bool_],
        bound: Bound | None = None,
    ) -> None:
        """Record action ``a``; ``bound``: it was already bound (:meth:`Episode.bind`) and the
        node's fragmentation refreshed, else it is placed here."""
        ep, ro = self.ep, self.ro
        parts = ep.place(self.pod, int(self.cand[a])) if bound is None else ep.settle(bound)
        r = ep.reward(parts, 0.0) + (ep.weights.sla * self.pending_sla if not ro.reward else 0.0)
        self.pending_sla = 0.0
        if self.keep:
            assert self.x is not None
            ro.x.append(self.x)
            ro.cand.append(self.cand)
            ro.teacher.append(best)
        ro.action.append(a)
        ro.logp.append(logp)
        ro.value.append(value)
        ro.reward.append(r)


def run_episode(
    ep: Episode,
    model: DSANNet | None = None,
    mode: str = "sample",
    teacher: Scorer | None = None,
    rng: np.random.Generator | None = None,
    keep: bool = True,
) -> Rollout:
    """Play ``ep`` to the end. ``mode``: ``sample`` or ``greedy`` (model acts) or ``teacher``
    (``teacher`` acts; its best-scored nodes are recorded as imitation targets)."""
    if mode not in ("sample", "greedy", "teacher"):
        raise ValueError(f"unknown rollout mode {mode!r}")
    p = _Player(ep, model if mode != "teacher" else None, keep, keep or mode != "teacher")
    while p.advance():
        cand, x = p.cand, p.x
        logp = value = 0.0
        best = np.zeros(len(cand), dtype=bool)
        if mode == "teacher":
            assert teacher is not None
            s = np.asarray(teacher.score(p.pod, ep.snap, cand), dtype=np.float64)
            best = s >= s.max()
            # Ties go to the lowest node name, as in the FGD simulator (and `dsan sim openb`):
            # a fixed order consolidates, a random one spreads pods and fragments more.
            ties = np.flatnonzero(best)
            a = int(ties[np.argmin(np.asarray(ep.snap.names, dtype=object)[cand[ties]])])
            best = np.zeros(len(cand), dtype=bool)  # imitate the exact choice, tie-break too
            best[a] = True
        else:
            assert model is not None and x is not None
            with torch.inference_mode():
                logits, v = model.score(
                    torch.from_numpy(x),
                    p.emb.index_select(0, torch.from_numpy(cand)),
                    torch.ones(len(cand), dtype=torch.bool),
                    torch.zeros(len(cand), dtype=torch.long),
                    1,
                )
            lp = torch.log_softmax(logits, 0)
            if mode == "greedy":
                a = int(torch.argmax(logits))
            else:
                a = int(torch.multinomial(lp.exp(), 1, generator=None))
            logp, value = float(lp[a]), float(v[0])
        p.commit(a, logp, value, best)
    return p.ro


def segment_choice(
    logits: npt.NDArray[np.float32],
    offsets: npt.NDArray[np.int64],
    mode: str,
    rng: np.random.Generator,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """Per segment ``offsets[i]:offsets[i+1]`` of ``logits``: the chosen row (index within the
    segment) and its log-probability. ``greedy`` takes the first maximum (as ``torch.argmax``);
    ``sample`` draws from the segment's softmax by inverting its CDF with one uniform each."""
    lg = logits.astype(np.float64)
    starts, sizes = offsets[:-1], np.diff(offsets)
    seg = np.repeat(np.arange(len(sizes)), sizes)
    z = lg - np.maximum.reduceat(lg, starts)[seg]
    e = np.exp(z)
    tot = np.add.reduceat(e, starts)
    logp = z - np.log(tot)[seg]
    if mode == "greedy":
        rows = np.arange(len(lg))
        pick = np.minimum.reduceat(np.where(z == 0.0, rows, len(lg)), starts)
    else:
        cs = np.cumsum(e)
        base = cs[starts] - e[starts]
        target = base + rng.random(len(sizes)) * tot
        pick = np.clip(np.searchsorted(cs, target, side="right"), starts, offsets[1:] - 1)
    return (pick - starts).astype(np.int64), logp[pick]


def collect(
    eps: Sequence[Episode],
    model: DSANNet,
    mode: str = "sample",
    rng: np.random.Generator | None = None,
    keep: bool = True,
    store: RowStore | None = None,
) -> list[Rollout]:
    """Play ``eps`` to the end in lockstep with ``model`` (``sample`` or ``greedy``): one
    batched head call per step over all live episodes. Rollouts come back in ``eps`` order,
    with the same contents :func:`run_episode` records; with ``store``, their feature rows
    are views into it (see :class:`RowStore`)."""
    if mode not in ("sample", "greedy"):
        raise ValueError(f"collect plays the model; unknown mode {mode!r}")
    rng = rng or np.random.default_rng(0)
    players = [_Player(ep, model, keep, True) for ep in eps]
    # All episodes' node embeddings in one table: a step gathers its rows with one index.
    base = np.concatenate([[0], np.cumsum([len(p.ep.snap) for p in players])]).astype(np.int64)
    emb = torch.cat([p.emb for p in players]) if players else torch.zeros(0)
    live = [i for i, p in enumerate(players) if p.advance(features=False)]
    while live:
        ps = [players[i] for i in live]
        sizes = np.array([len(p.cand) for p in ps], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        rows = np.concatenate([p.cand + base[i] for i, p in zip(live, ps, strict=True)])
        x = _features(ps)
        if keep:
            if store is not None:
                x = store.put(x)
            for p, xs in zip(ps, np.split(x, offsets[1:-1]), strict=True):
                p.x = xs
        seg = np.repeat(np.arange(len(ps), dtype=np.int64), sizes)
        with torch.inference_mode():
            logits, v = model.score(
                torch.from_numpy(x),
                emb.index_select(0, torch.from_numpy(rows)),
                torch.ones(len(rows), dtype=torch.bool),
                torch.from_numpy(seg),
                len(ps),
            )
        acts, logps = segment_choice(logits.numpy(), offsets, mode, rng)
        values = v.numpy()
        nothing = np.zeros(0, dtype=bool)
        chosen = [int(p.cand[a]) for p, a in zip(ps, acts.tolist(), strict=True)]
        bound = bind_many([p.ep for p in ps], [p.pod for p in ps], chosen)
        refresh_bound([p.ep for p in ps], chosen)
        for j, p in enumerate(ps):
            p.commit(
                int(acts[j]),
                float(logps[j]),
                float(values[j]),
                np.zeros(sizes[j], dtype=bool) if keep else nothing,
                bound[j],
            )
        live = [i for i, p in zip(live, ps, strict=True) if p.advance(features=False)]
    return [p.ro for p in players]


def _features(ps: list[_Player]) -> npt.NDArray[np.float32]:
    """All live episodes' decisions featurized in one batch (per target workload: episodes
    of one pod file share it), rows in ``ps`` order."""
    groups: dict[int, list[int]] = {}
    for j, p in enumerate(ps):
        groups.setdefault(id(p.ep.target), []).append(j)
    parts: list[npt.NDArray[np.float32]] = [np.zeros((0, 0), np.float32)] * len(ps)
    for js in groups.values():
        g = [ps[j] for j in js]
        x = featurize_batch(
            [p.pod for p in g],
            [p.ep.snap for p in g],
            [p.cand for p in g],
            g[0].ep.target,
            [p.node_x[p.cand] for p in g],
            [p.cache for p in g],
        )
        if len(groups) == 1:
            return x
        cuts = np.cumsum([len(p.cand) for p in g])[:-1]
        for j, xs in zip(js, np.split(x, cuts), strict=True):
            parts[j] = xs
    return np.concatenate(parts)
