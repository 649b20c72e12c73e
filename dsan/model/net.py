"""DSANNet, the Dual-Stream Attention Network, and its layers (PyG-style: hyperparameters
stored, ``reset_parameters()``, annotated forward). Split for serving: ``embed_nodes`` (LSTM +
GNN, pod-independent, cached by servers) and ``score`` (the per-pod head over the candidates);
``forward`` chains both for one pod: it is what TorchScript and torch.export ship.

Shapes use N = nodes in the cluster, M = (pod, candidate) rows, B = pods in a batch,
T = telemetry samples, C = telemetry channels, D = node-feature columns, F = 128 features,
H = hidden width.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch_geometric.nn import GraphConv

from dsan.model.artifact import ModelConfig

#: Logit of an infeasible node: finite (so softmax and entropy stay NaN-free), never a winner.
MASKED = -1.0e9


class TemporalEncoder(nn.Module):
    r"""Temporal stream: an LSTM over each node's last T telemetry samples.

    .. math:: h^{t}_i = \mathrm{LSTM}(s_{i,1..T})_T

    Input (N, T, C), output (N, H): the last hidden state.
    """

    def __init__(self, channels: int, hidden: int) -> None:
        super().__init__()
        self.channels = channels
        self.hidden = hidden
        self.lstm = nn.LSTM(channels, hidden, batch_first=True)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.lstm.reset_parameters()

    def forward(self, telemetry: Tensor) -> Tensor:
        out, _ = self.lstm(telemetry)
        return out[:, -1, :]


class SpatialEncoder(nn.Module):
    r"""Spatial stream: two weighted GraphConv layers over the topology graph.

    .. math:: h^{s}_i = \mathrm{GraphConv}_2(\mathrm{ReLU}(\mathrm{GraphConv}_1(x_i, A)), A)

    with :math:`A` the latency-weighted edges; an edgeless graph degrades to a per-node MLP.
    Input node features (N, D), edges (2, E) and weights (E,); output (N, H).
    """

    def __init__(self, in_channels: int, hidden: int) -> None:
        super().__init__()
        self.in_channels = in_channels
        self.hidden = hidden
        self.conv1 = GraphConv(in_channels, hidden, aggr="mean")
        self.conv2 = GraphConv(hidden, hidden, aggr="mean")
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.conv1.reset_parameters()
        self.conv2.reset_parameters()

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor) -> Tensor:
        h = torch.relu(self.conv1(x, edge_index, edge_weight))
        return self.conv2(h, edge_index, edge_weight)


class PodAttentionFusion(nn.Module):
    r"""Fuses the two streams with attention conditioned on the (pod, node) features.

    .. math::
        q_m = W_q f_m,\quad \alpha_m = \mathrm{softmax}_k\Big(\tfrac{q_m^\top W_k h^{k}_{i(m)}}
        {\sqrt{H}}\Big),\quad z_m = \sum_{k\in\{t,s\}} \alpha_{m,k} W_v h^{k}_{i(m)}

    Inputs: features (M, F) and the candidate's stream embeddings (M, 2, H); output (M, H)
    and the attention weights (M, 2) (logged in explanations).
    """

    def __init__(self, features: int, hidden: int) -> None:
        super().__init__()
        self.features = features
        self.hidden = hidden
        self.query = nn.Linear(features, hidden)
        self.key = nn.Linear(hidden, hidden, bias=False)
        self.value = nn.Linear(hidden, hidden)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.query.reset_parameters()
        self.key.reset_parameters()
        self.value.reset_parameters()

    def forward(self, x: Tensor, streams: Tensor) -> tuple[Tensor, Tensor]:
        q = self.query(x).unsqueeze(1)  # (M, 1, H)
        att = (q * self.key(streams)).sum(-1) / (self.hidden**0.5)  # (M, 2)
        alpha = torch.softmax(att, dim=-1)
        z = (alpha.unsqueeze(-1) * self.value(streams)).sum(1)
        return z, alpha


class ScoreHead(nn.Module):
    r"""Per-(pod, node) logit and per-pod value.

    .. math::
        \ell_m = w^\top f_m + \mathrm{MLP}([\mathrm{ReLU}(W_f f_m), z_m]),\qquad
        V_b = \mathrm{MLP}_v([\mathrm{mean}_{m\in b} g_m, \max_{m\in b} g_m])

    The linear skip :math:`w^\top f_m` lets imitation reach a heuristic's ranking fast.
    ``residual`` adds :math:`\mathrm{softplus}(a)\,100\,f_{m,\mathrm{fgd\_score\_int}} +
    (1 - f_{m,\mathrm{pod\_is\_cpu\_only}})\,u^\top f_m` with :math:`w`, :math:`u` and the
    MLP's last layer zero at start, so an untrained head ranks exactly as FGD. Infeasible rows
    get :data:`MASKED`. ``segment`` (M,) names each row's pod, 0..B-1; output logits (M,),
    values (B,).
    """

    def __init__(self, features: int, hidden: int, residual: bool = False, prior_col: int = 0,
                 cpu_only_col: int = 0) -> None:
        super().__init__()
        self.features = features
        self.hidden = hidden
        self.residual = residual
        self.prior_col = prior_col
        self.cpu_only_col = cpu_only_col
        self.masked: float = MASKED
        # softplus(0.5413) = 0.99998: one FGD integer point ~ one logit at initialisation.
        self.prior_scale = nn.Parameter(torch.tensor(0.5413))
        self.skip = nn.Linear(features, 1)
        # residual only: skip weights for GPU pods alone (w.f cannot condition on pod type)
        self.gpu_skip = nn.Linear(features, 1, bias=False)
        self.proj = nn.Linear(features, 2 * hidden)
        self.mlp = nn.Sequential(
            nn.Linear(3 * hidden, 2 * hidden), nn.ReLU(), nn.Linear(2 * hidden, 1)
        )
        self.value = nn.Sequential(nn.Linear(4 * hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for mod in (self.skip, self.proj, self.mlp[0], self.mlp[2], self.value[0], self.value[2]):
            assert isinstance(mod, nn.Linear)
            mod.reset_parameters()
        with torch.no_grad():
            self.prior_scale.fill_(0.5413)
            self.gpu_skip.weight.zero_()  # always zero at start: old models load without it
            if self.residual:  # the residual starts at exactly zero: untrained = FGD
                for lin in (self.skip, self.mlp[2]):
                    assert isinstance(lin, nn.Linear)
                    lin.weight.zero_()
                    lin.bias.zero_()

    def forward(
        self, x: Tensor, z: Tensor, mask: Tensor, segment: Tensor, n_segments: int
    ) -> tuple[Tensor, Tensor]:
        g = torch.relu(self.proj(x))
        logits = self.skip(x).squeeze(-1) + self.mlp(torch.cat([g, z], dim=-1)).squeeze(-1)
        if self.residual:
            prior = x[:, self.prior_col] * 100.0
            logits = logits + nn.functional.softplus(self.prior_scale) * prior
            gpu_pod = 1.0 - x[:, self.cpu_only_col]
            logits = logits + self.gpu_skip(x).squeeze(-1) * gpu_pod
        logits = torch.where(mask, logits, torch.full_like(logits, self.masked))
        w = mask.to(g.dtype).unsqueeze(-1)
        ones = torch.zeros(n_segments, 1, dtype=g.dtype, device=g.device)
        count = ones.index_add(0, segment, w).clamp_min(1.0)
        mean = torch.zeros(n_segments, g.shape[1], dtype=g.dtype, device=g.device)
        mean = mean.index_add(0, segment, g * w) / count
        idx = segment.unsqueeze(-1).expand(-1, g.shape[1])
        mx = torch.zeros(n_segments, g.shape[1], dtype=g.dtype, device=g.device)
        mx = mx.scatter_reduce(0, idx, g * w, reduce="amax", include_self=True)
        value = self.value(torch.cat([mean, mx], dim=-1)).squeeze(-1)
        return logits, value


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
