"""The scenario stage's updates (dsan.train.scenario_updates): the imitation loss's
per-class weights. The updates' effect on a training run is test_scenario_train.py's."""

from __future__ import annotations

import numpy as np
import pytest

from dsan.api.types import TASK_TYPES
from dsan.train.scenario_rollout import ScenarioRollout
from dsan.train.scenario_updates import PRIORITY_COL, TASK_COLS, _type_weights


def test_type_weights_by_priority_gives_drivers_their_own_share() -> None:
    ro = ScenarioRollout()
    batch, web = TASK_TYPES.index("batch"), TASK_TYPES.index("web")
    for t, prio in [(batch, 0.4), (batch, 0.1), (batch, 0.1), (batch, 0.1), (web, 0.3)]:
        x = np.zeros((2, 128), dtype=np.float32)
        x[:, TASK_COLS[t]] = 1.0
        x[:, PRIORITY_COL] = prio
        ro.x.append(x)
    steps = np.arange(5)
    by_type = _type_weights(ro, steps).numpy()
    np.testing.assert_allclose(by_type, [0.125, 0.125, 0.125, 0.125, 0.5])
    # (type, priority) classes: the lone driver weighs as much as the three executors together
    by_prio = _type_weights(ro, steps, by_priority=True).numpy()
    np.testing.assert_allclose(by_prio, [1 / 3, 1 / 9, 1 / 9, 1 / 9, 1 / 3], rtol=1e-6)
    assert by_prio.sum() == pytest.approx(1.0)
