"""DSAN's settle reaches the compiled twins of its class-row update: the rows recomputed from
the placement memo in one call (dsan._memorows), the trackers' hinted syncs
(dsan._rowsync), and nothing falls back to the Python twins (a C twin hands arrays of
another dtype or layout to them without a word)."""

from __future__ import annotations

from typing import Any

import pytest

from dsan import rowsync
from dsan.features import default_workload
from dsan.model import classrows, memorows
from dsan.model.serving import ServingModel
from dsan.policies.dsan import DSANScorer
from sidecar import kubeobjects as ko
from sidecar.podspec import podspec_from_pod
from sidecar.scoring import ScoringEngine
from tests.unit.sidecar.test_scoring_dsan import MODEL, NAMES, NOW, POD_SHAPES, Untrusting, _cache


def _spy(calls: list[str], name: str, fn: Any) -> Any:
    def spy(*a: object) -> object:
        calls.append(name)
        return fn(*a)
    return spy


@pytest.mark.skipif(None in (memorows._C, rowsync._C, classrows._C),
                    reason="dsan._memorows / _rowsync / _classrows not built (no C compiler)")
def test_the_settle_reaches_the_c_twins(monkeypatch: pytest.MonkeyPatch) -> None:
    fell_back: list[str] = []
    for mod, name in ((memorows, "update_py"), (memorows, "rows_py"), (rowsync, "sync_rows_py"),
                      (classrows, "first_py"), (classrows, "store_py")):
        monkeypatch.setattr(mod, name, _spy(fell_back, name, getattr(mod, name)))
    served: list[bool] = []
    update = memorows.update
    monkeypatch.setattr(memorows, "update", lambda *a: served.append(update(*a)) or served[-1])
    synced: list[str] = []
    monkeypatch.setattr(rowsync._C, "sync_rows",
                        _spy(synced, "sync_rows", rowsync._C.sync_rows), raising=True)
    cache = _cache()
    engine = ScoringEngine(cache, DSANScorer(ServingModel(MODEL, default_workload())),
                           Untrusting(), 1e9, wall=lambda: NOW.timestamp() + 5)
    for k in range(24):  # two shapes in turn, each assumption replacing one of three: nodes
        # go back to earlier states, whose placements the memo holds
        spec = podspec_from_pod(ko.pod(f"p{k % 3}", uid=f"u{k % 3}",  # type: ignore[arg-type]
                                       **POD_SHAPES[k % 2]), cache.models)
        names = NAMES[k % 10:] + NAMES[: k % 10]
        assert engine.score(spec, names, assume=f"default/p{k % 3}", defer=True).best >= 0
        engine.settle()
    assert fell_back == []
    assert sum(served) >= 8 and synced, (served, synced)
