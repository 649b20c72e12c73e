"""What a training episode is to the collector: the :class:`Env` protocol, the pending
:class:`Decision` and the nodes' inputs to the encoders (:class:`NodeInputs`). openb's node
inputs are fixed per episode (re-embedded with gradients); a scenario window's change with
telemetry (each step's embeddings are kept, the encoders frozen).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol, Self

import numpy as np
import numpy.typing as npt
import torch

from dsan.core.snapshot import ClusterSnapshot, PodSpec
from dsan.features import PlacementCache, TargetWorkload, node_block, telemetry_of
from dsan.model.graph import build_graph
from dsan.model.net import DSANNet

F32 = npt.NDArray[np.float32]


@dataclass(frozen=True)
class Decision:
    """A pod to place and its feasible candidate nodes (indices into ``snap``)."""

    pod: PodSpec
    snap: ClusterSnapshot
    cand: npt.NDArray[np.int64]


@dataclass
class NodeInputs:
    """Every node's inputs to the encoders: node block ``x``, telemetry and topology graph."""

    x: F32
    telemetry: F32
    edge_index: torch.Tensor
    edge_weight: torch.Tensor

    @classmethod
    def of(cls, snap: ClusterSnapshot) -> NodeInputs:
        nodes = np.arange(len(snap), dtype=np.int64)
        x = node_block(snap, nodes)
        tel = telemetry_of(snap, nodes)
        ei, ew = (torch.from_numpy(a) for a in build_graph(snap))
        return cls(x, tel, ei, ew)

    def embed(self, model: DSANNet) -> torch.Tensor:
        """The nodes' embeddings (n, 2, H), without gradients."""
        with torch.inference_mode():
            return model.embed_nodes(torch.from_numpy(self.x), torch.from_numpy(self.telemetry),
                                     self.edge_index, self.edge_weight)


class Env(Protocol):
    """An episode as the sequence of decisions a policy takes (the env plays the rest itself:
    single-candidate pods, a warm-up)."""

    #: The node inputs stay the same for the whole episode.
    fixed_nodes: ClassVar[bool]
    target: TargetWorkload
    cache: PlacementCache

    def decision(self) -> Decision | None:
        """The pending decision; None once the episode is over."""
        ...

    def nodes(self) -> NodeInputs:
        """Node inputs now: the same object while they are unchanged."""
        ...

    def node_cols(self) -> F32:
        """The candidates' node-block rows, ``nodes().x[cand]`` made current."""
        ...

    def label(
        self, scores: npt.NDArray[np.float64], rng: np.random.Generator
    ) -> tuple[int, npt.NDArray[np.bool_]]:
        """A teacher's choice given its ``scores`` and the candidates imitation should raise."""
        ...

    @classmethod
    def step_all(cls, envs: Sequence[Self], nodes: Sequence[int]) -> list[float]:
        """Place each of ``envs``' pending pod on its node, in lockstep; each one's reward of
        all until its next decision."""
        ...

    def summary(self) -> dict[str, float]:
        """The episode's outcome (allocation, or Table 1's metrics)."""
        ...
