"""What a training episode is to the collector: the :class:`Env` protocol, the pending
:class:`Decision` and the nodes' inputs to the encoders (:class:`NodeInputs`).

Both training stages play episodes through this one interface, so how episodes are
stepped, how rollouts are recorded (:mod:`dsan.train.collector`) and how updates read them
(:mod:`dsan.train.updates`) is written once:

* :class:`dsan.train.openb.OpenbEnv`: the FGD protocol on a shrunk openb cluster; pods never
  leave and nodes have no telemetry, so the node inputs are fixed for the whole episode
  (``fixed_nodes``): a rollout keeps them once and PPO re-embeds them with gradients;
* :class:`dsan.train.window.WindowEnv`: a window of a seed-scenario run, whose telemetry
  changes every 10 s; its node inputs change inside the episode, so a rollout keeps each
  step's candidate embeddings instead (the encoders are frozen in that stage).
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
    """Every node's inputs to the node encoders (LSTM + GNN): the node block ``x`` (n, 56),
    telemetry (n, T, C) and the topology graph."""

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
            return model.embed_nodes(
                torch.from_numpy(self.x),
                torch.from_numpy(self.telemetry),
                self.edge_index,
                self.edge_weight,
            )


class Env(Protocol):
    """An episode as the sequence of decisions a policy takes.

    ``decision()`` is the pending decision (the env plays what the policy does not decide
    on its own: single-candidate pods, a warm-up); ``step(node)`` places its pod and returns
    the step's reward, everything that happened until the next decision."""

    #: The node inputs stay the same for the whole episode (see the module docstring).
    fixed_nodes: ClassVar[bool]
    target: TargetWorkload
    cache: PlacementCache

    def decision(self) -> Decision | None:
        """The pending decision; None once the episode is over."""
        ...

    def nodes(self) -> NodeInputs:
        """Node inputs as of the pending decision: the same object while they are unchanged."""
        ...

    def node_cols(self) -> F32:
        """The pending decision's candidates' node-block rows (``nodes().x[cand]``, with any
        column that changes between telemetry samples made current)."""
        ...

    def label(
        self, scores: npt.NDArray[np.float64], rng: np.random.Generator
    ) -> tuple[int, npt.NDArray[np.bool_]]:
        """A teacher's choice among the candidates given its ``scores``, and the candidates
        imitation should raise (the simulator being imitated decides how ties break)."""
        ...

    def step(self, node: int) -> float:
        """Place the pending pod on ``node``; the step's reward."""
        ...

    @classmethod
    def step_all(cls, envs: Sequence[Self], nodes: Sequence[int]) -> list[float]:
        """:meth:`step` of each of ``envs`` on its node, in lockstep (same rewards)."""
        ...

    def summary(self) -> dict[str, float]:
        """The episode's outcome (allocation, or the scenario's Table 1 metrics)."""
        ...
