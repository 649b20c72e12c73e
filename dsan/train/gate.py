"""Why the scenario stage cannot undo the openb stage: the residual's gate and the freeze.

* :func:`gate`: the head's MLP residual is gated by :data:`GATE_FEATURE`, 0 on openb (no
  telemetry), where it adds one constant per pod and so re-ranks nothing; gradient hooks
  keep the cuts through training, and :func:`gate_margin` checks them on openb states.
* :func:`freeze`: only :data:`TRAINED` trains; encoders, prior scale and skip stay.
"""

from __future__ import annotations

import torch

from dsan.features import FEATURE_NAMES
from dsan.model.net import DSANNet

#: Parameter-name prefixes the scenario stage trains; everything else stays frozen.
TRAINED = ("fusion.", "head.proj.", "head.mlp.", "head.value.")

#: 1 when the node has live telemetry (the scenario, a sidecar with the device plugin), 0 on
#: openb.
GATE_FEATURE = "tel_present"
GATE_SHIFT = 100.0

#: Columns only the openb stage's (frozen) skip reads: the residual gets no input weight from
#: them (they can be non-zero in the seed scenario, and a residual trained on
#: shape1_room_gpu_bound broke Table 1, docs/results/dsan_openb.md).
OPENB_ONLY = ("shape1_room_gpu_bound", "cpu_bound_cpu_per_gpu")
#: OPENB_ONLY columns the attention's query does not read either (zero weights, no gradient).
QUERY_CUT = ("cpu_bound_cpu_per_gpu",)


def gate(model: DSANNet) -> None:
    """Make the head's MLP residual one constant per pod where telemetry is absent.

    ``g = ReLU(proj(x))`` gets ``+GATE_SHIFT * tel_present`` and ``-GATE_SHIFT`` in its bias,
    so without telemetry ``g = 0`` (while :func:`gate_margin` < 0), and the MLP's input from
    the attention stream is cut: its output is ``mlp(0)`` for every candidate. With
    telemetry the shift cancels. Idempotent.
    """
    col = FEATURE_NAMES.index(GATE_FEATURE)
    cut = [FEATURE_NAMES.index(n) for n in OPENB_ONLY]
    qcut = [FEATURE_NAMES.index(n) for n in QUERY_CUT]
    proj, first, hidden = model.head.proj, model.head.mlp[0], model.head.hidden
    query = model.fusion.query
    assert isinstance(first, torch.nn.Linear)
    with torch.no_grad():
        if not bool((proj.weight[:, col] == GATE_SHIFT).all()):
            proj.bias.sub_(GATE_SHIFT)
            proj.weight[:, col] = GATE_SHIFT
        proj.weight[:, cut] = 0.0
        first.weight[:, 2 * hidden :] = 0.0
        query.weight[:, qcut] = 0.0
    _no_grad_cols(query.weight, qcut)
    _no_grad_cols(proj.weight, [col, *cut])
    _no_grad_cols(first.weight, slice(2 * hidden, None))


def _no_grad_cols(w: torch.Tensor, cols: list[int] | slice) -> None:
    """Mask the gradient of ``w``'s columns ``cols`` for good."""
    mask = torch.ones_like(w)
    mask[:, cols] = 0.0
    w.register_hook(lambda g: g * mask)


def gate_margin(model: DSANNet, x: torch.Tensor) -> float:
    """Largest proj pre-activation over rows ``x`` without telemetry (< 0: the gate holds)."""
    col = FEATURE_NAMES.index(GATE_FEATURE)
    rows = x[x[:, col] == 0]
    if rows.numel() == 0:
        return float("-inf")
    with torch.no_grad():
        return float(model.head.proj(rows).max())


def freeze(model: DSANNet) -> list[torch.nn.Parameter]:
    """Freeze all but :data:`TRAINED`; returns the trainable parameters."""
    out = []
    for name, p in model.named_parameters():
        p.requires_grad_(name.startswith(TRAINED))
        if p.requires_grad:
            out.append(p)
    return out
