"""The greedy tie-break search: on known objectives it adopts the helpful weights in order
and logs them; configs are validated; the shipped result is a tie-break."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dsan.features import FEATURE_NAMES, node_block
from dsan.sim import paths
from dsan.sim.openb import load_nodes
from dsan.train.linear import COLUMNS, SUPPORTED
from dsan.train.search import GreedyConfig, greedy
from dsan.train.skipweights import load_openb_skip

OPT = np.array([-0.4, 0.3])


class TieBreaks:
    """Fake episodes where a negative weight on gpu_min_free helps 0.3 points, a positive one
    on node_idle 0.1, and anything on gpu_max_free hurts."""

    def unallocated(
        self,
        features: tuple[str, ...],
        w: np.ndarray,
        workload: str,
        seed: int,
        gpu_w: np.ndarray | None = None,
    ) -> float:
        assert gpu_w is None  # the classic search: one weight vector for every pod
        v = dict(zip(features, np.asarray(w), strict=True))
        return (
            5.0
            - 0.3 * (v["gpu_min_free"] < 0)
            - 0.1 * (v["node_idle"] > 0)
            + 0.5 * (v["gpu_max_free"] != 0)
            + 0.2 * np.sin(seed)
        )

    def fgd(self, workload: str, seed: int) -> float:
        return 5.0 + 0.2 * np.sin(seed)


def test_greedy_adopts_helpful_tie_breaks_in_order_and_stops(tmp_path: Path) -> None:
    cfg = GreedyConfig(
        features=("gpu_max_free", "node_idle", "gpu_min_free"),
        workloads=("a", "b"),
        rounds=3,
        out=str(tmp_path),
    )
    res = greedy(cfg, TieBreaks())
    got = dict(zip(res["features"], res["weights"], strict=True))
    assert got == pytest.approx({"gpu_min_free": -0.5, "node_idle": 0.05})  # round 2: 10x less
    assert res["confirm_gap"] == pytest.approx(-0.4)
    adopted = [json.loads(x) for x in (tmp_path / "greedy.jsonl").read_text().splitlines()]
    assert [a["adopted"] for a in adopted if "adopted" in a] == [
        "all:gpu_min_free=-0.5",
        "all:node_idle=0.05",
    ]
    assert "gpu_weights" not in res  # one weight vector for every pod


class ByClass:
    """Fake episodes where gpu_max_free < 0 helps GPU pods 0.3 points but costs 0.2 when CPU-only
    pods use it too, and node_idle > 0 on CPU-only pods helps 0.1."""

    def unallocated(
        self,
        features: tuple[str, ...],
        w: np.ndarray,
        workload: str,
        seed: int,
        gpu_w: np.ndarray | None = None,
    ) -> float:
        c = dict(zip(features, np.asarray(w), strict=True))
        g = dict(zip(features, np.asarray(w if gpu_w is None else gpu_w), strict=True))
        return (
            5.0
            - 0.3 * (g["gpu_max_free"] < 0)
            + 0.2 * (c["gpu_max_free"] != 0)
            - 0.1 * (c["node_idle"] > 0)
            + 0.2 * np.sin(seed)
        )

    def fgd(self, workload: str, seed: int) -> float:
        return 5.0 + 0.2 * np.sin(seed)


def test_greedy_by_class_drops_a_harmful_cpu_weight_and_conditions_on_pod_class(
    tmp_path: Path,
) -> None:
    cfg = GreedyConfig(
        features=("gpu_max_free", "node_idle"),
        workloads=("a",),
        rounds=3,
        classes=("cpu", "gpu", "all"),
        init=(("gpu_max_free", -0.5, -0.5),),  # an all-pods tie-break: gap -0.1
        out=str(tmp_path),
    )
    res = greedy(cfg, ByClass())
    assert res["features"] == ["gpu_max_free", "node_idle"]
    # CPU-only pods: gpu_max_free dropped, node_idle adopted; GPU pods keep gpu_max_free
    assert res["weights"] == pytest.approx([0.0, 0.05])
    assert res["gpu_weights"] == pytest.approx([-0.5, -0.05])
    assert res["confirm_gap"] == pytest.approx(-0.4)


def test_greedy_config_rejects_unknown_classes_and_init_features() -> None:
    with pytest.raises(ValueError, match="classes"):
        GreedyConfig(classes=("tpu",))
    with pytest.raises(ValueError, match="init"):
        GreedyConfig(features=("node_idle",), init=(("gpu_max_free", 0.0, -0.5),))


def test_shipped_openb_skip_is_a_tie_break_on_supported_features() -> None:
    names, weights, gpu_weights = load_openb_skip()
    assert names and len(names) == len(weights)
    assert set(names) <= set(SUPPORTED)
    # How far each feature can differ between two openb candidates, which is all a tie-break
    # acts on: the static node block's range over the inventory (node_has_gpu is 1 on every
    # openb node, so it cannot reorder them); the allocation-dependent columns lie in [0, 1],
    # except frag_delta, a fragmentation change in GPUs: at most a node's 8 GPUs either way.
    nodes = load_nodes(paths.openb_csv(paths.DEFAULT_NODES))
    snap = nodes.snapshot()
    static = node_block(snap, np.arange(len(snap), dtype=np.int64))
    bound = {"frag_delta": 8.0}
    top = [
        float(np.ptp(static[:, FEATURE_NAMES.index(n)])) if n not in COLUMNS else bound.get(n, 1.0)
        for n in names
    ]
    per_class = [weights]  # CPU-only pods: head.skip
    per_class.append(
        [a + b for a, b in zip(weights, gpu_weights or [0.0] * len(names), strict=True)]
    )
    spans = [sum(abs(x) * t for x, t in zip(w, top, strict=True)) for w in per_class]
    # GPU pods: below one FGD integer point, so the skip only reorders nodes FGD scores
    # equally. CPU-only pods (node_cpu_per_gpu +0.5 on top of gpu_max_free -0.5, and
    # shape1_hostable_after +0.29): up to ~1.4, so a one-point FGD difference can
    # flip on extreme nodes, never two points.
    assert spans[1] < 1.0
    assert spans[0] < 2.0
