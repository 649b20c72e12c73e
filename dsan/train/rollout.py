"""What a played episode leaves for the updates: the :class:`Rollout` of either stage and
the :class:`RowStore` its feature rows may live in."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from dsan.features import N_FEATURES
from dsan.train.env import NodeInputs

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]


@dataclass
class Rollout:
    """The recorded steps of one episode, one list entry per step: the candidates' features
    ``x`` (m, 128) and node ids ``cand``, the ``action`` (an index into them), the teacher's
    imitation targets, the policy's ``logp`` and ``value``, and the ``reward``. With fixed
    node inputs (openb) ``nodes`` is kept once and re-embedded with gradients; otherwise each
    step's candidate embeddings ``emb`` (m, 2, H). The per-row lists stay empty when the
    collector keeps no features.
    """

    nodes: NodeInputs | None = None
    x: list[npt.NDArray[np.float32]] = field(default_factory=list)
    cand: list[npt.NDArray[np.int64]] = field(default_factory=list)
    emb: list[npt.NDArray[np.float32]] = field(default_factory=list)
    action: list[int] = field(default_factory=list)
    teacher: list[npt.NDArray[np.bool_]] = field(default_factory=list)
    logp: list[float] = field(default_factory=list)
    value: list[float] = field(default_factory=list)
    reward: list[float] = field(default_factory=list)
    #: Reward of every step, recorded or not (what an evaluation compares).
    total: float = 0.0
    #: The episode's outcome, :meth:`dsan.train.env.Env.summary`.
    summary: dict[str, float] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.action)

    def add(
        self,
        reward: float,
        action: int,
        logp: float,
        value: float,
        rows: tuple[F32, I64, F32 | None, npt.NDArray[np.bool_]] | None = None,
    ) -> None:
        """Record a step; ``rows``: its candidates' (x, cand, emb or None, teacher) if kept."""
        self.total += reward
        if rows is not None:
            x, cand, emb, teacher = rows
            self.x.append(x)
            self.cand.append(cand)
            if emb is not None:
                self.emb.append(emb)
            self.teacher.append(teacher)
        self.action.append(action)
        self.logp.append(logp)
        self.value.append(value)
        self.reward.append(reward)

    def fold(self, reward: float) -> None:
        """A step not recorded: its reward goes to the last recorded step and the total."""
        self.total += reward
        if self.reward:
            self.reward[-1] += reward


class RowStore:
    """Float32 feature rows that rollouts keep, in chunks reused from one collection to the
    next (:meth:`reset`): a worker's rows (hundreds of MB) allocated afresh each round would
    be page-faulted in again, a large share of its system time (docs/results/training.md).
    """

    def __init__(self, cols: int = N_FEATURES, chunk_rows: int = 1 << 17) -> None:
        self.cols, self.chunk_rows = cols, chunk_rows
        self.chunks: list[npt.NDArray[np.float32]] = []
        self._chunk = self._at = 0

    def reset(self) -> None:
        """Reuse the storage from the start: only once no rollout holding its rows is in use."""
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
