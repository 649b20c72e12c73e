"""The parameter server's state: the global model, its version and the shadow's verdicts.
A rollback restores the optimiser state too: Adam's moments of a bad step would otherwise
push the restored weights the same way again.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from dsan.model.net import DSANNet


class ParameterServer:
    """Holds the global model, its version and the last version the shadow accepted."""

    def __init__(self, model: DSANNet, opt: torch.optim.Optimizer, threshold: float) -> None:
        self.model, self.opt, self.threshold = model, opt, threshold
        self.version = 0
        self.good_version = 0
        self.good_score = -float("inf")
        self._good = self._snapshot()
        self.rollbacks: list[dict[str, Any]] = []

    def _snapshot(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        return copy.deepcopy(self.model.state_dict()), copy.deepcopy(self.opt.state_dict())

    def weights(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}

    def bump(self) -> int:
        self.version += 1
        return self.version

    def judge(self, score: float) -> bool:
        """Accept the current version (``score`` at most ``threshold`` below the best accepted
        one) or roll back to the last good version."""
        if score >= self.good_score - self.threshold:
            self.good_score = max(self.good_score, score)
            self.good_version = self.version
            self._good = self._snapshot()
            return True
        self.rollbacks.append({"from_version": self.version, "to_version": self.good_version,
                               "score": score, "good_score": self.good_score})
        self.model.load_state_dict(self._good[0])
        # a copy: the optimiser adopts the tensors it is given and updates them in place, so
        # the next steps would overwrite the good state a later rollback restores
        self.opt.load_state_dict(copy.deepcopy(self._good[1]))
        return False

    def holds_good_weights(self) -> bool:
        """Whether the model's weights are those of the last accepted version."""
        return all(
            torch.equal(a, b)
            for a, b in zip(self.model.state_dict().values(), self._good[0].values(), strict=True)
        )
