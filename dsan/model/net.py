"""DSANNet: the Dual-Stream Attention Network, split for serving: ``embed_nodes`` (LSTM + GNN,
pod-independent, cached by servers) and ``score`` (the per-pod head over the candidates).
``forward`` chains both for one pod: it is what TorchScript and torch.export ship.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from dsan.model.artifact import ModelConfig
from dsan.model.layers import PodAttentionFusion, ScoreHead, SpatialEncoder, TemporalEncoder


class DSANNet(nn.Module):
    r"""Scores candidate nodes for a pod; returns masked logits (M,) and a value (B,).

    .. math:: \ell = \mathrm{Head}(f,\ \mathrm{Fuse}(f, [\mathrm{LSTM}(s), \mathrm{GNN}(x, A)]))
    """

    def __init__(self, cfg: ModelConfig | None = None) -> None:
        super().__init__()
        self.cfg = cfg or ModelConfig()
        h = self.cfg.hidden
        self.hidden = h
        self.temporal = TemporalEncoder(self.cfg.channels, h)
        self.spatial = SpatialEncoder(self.cfg.node_features, h)
        self.fusion = PodAttentionFusion(self.cfg.features, h)
        residual = self.cfg.head == "residual"
        self.head = ScoreHead(self.cfg.features, h, residual, self.cfg.prior_col,
                              self.cfg.cpu_only_col)

    @torch.jit.export
    def embed_nodes(
        self, node_x: Tensor, telemetry: Tensor, edge_index: Tensor, edge_weight: Tensor
    ) -> Tensor:
        """(N, D), (N, T, C), (2, E), (E,) -> (N, 2, H) temporal and spatial embeddings."""
        ht = self.temporal(telemetry)
        hs = self.spatial(node_x, edge_index, edge_weight)
        return torch.stack([ht, hs], dim=1)

    @torch.jit.export
    def score(
        self, x: Tensor, streams: Tensor, mask: Tensor, segment: Tensor, n_segments: int
    ) -> tuple[Tensor, Tensor]:
        """(M, F) features, (M, 2, H) candidate embeddings, (M,) mask -> logits (M,), value (B,)."""
        z, _ = self.fusion(x, streams)
        return self.head(x, z, mask, segment, n_segments)

    def forward(self, x: Tensor, node_x: Tensor, telemetry: Tensor, edge_index: Tensor,
                edge_weight: Tensor, candidates: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """One pod: features (M, F) of nodes ``candidates`` (M,) -> logits (M,), value (1,)."""
        emb = self.embed_nodes(node_x, telemetry, edge_index, edge_weight)
        segment = torch.zeros_like(candidates)
        return self.score(x, emb.index_select(0, candidates), mask, segment, 1)
