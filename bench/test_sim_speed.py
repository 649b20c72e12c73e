"""Per-policy wall time of one full openb run (1213 nodes, `default` tuned to 1.3x, ~10.8k
pods), all policies side by side in one session. Budget: <= 20 s per run on the 2-core CI
machine. Run: `.venv/bin/python -m pytest -q bench/test_sim_speed.py --benchmark-only`."""

from __future__ import annotations

import pytest

from dsan.policies.registry import MODEL_FREE
from dsan.sim import paths
from dsan.sim.openb import load_nodes, load_pods
from dsan.sim.protocol import OpenbConfig, run_openb

POLICIES = list(MODEL_FREE)


@pytest.fixture(scope="module")
def traces():  # type: ignore[no-untyped-def]
    try:
        nodes_path = paths.openb_csv(paths.DEFAULT_NODES)
        pods_path = paths.openb_csv(paths.DEFAULT_PODS)
    except paths.TracesNotFound:
        pytest.skip("openb traces not available")
    nodes = load_nodes(nodes_path)
    return nodes_path, pods_path, nodes, load_pods(pods_path, nodes.gpu_models)


@pytest.mark.parametrize("policy", POLICIES)
def test_openb_run_time(benchmark, traces, policy: str) -> None:  # type: ignore[no-untyped-def]
    nodes_path, pods_path, nodes, pods = traces
    cfg = OpenbConfig(pods_path, nodes_path, policy, seed=42)
    res = benchmark.pedantic(run_openb, args=(cfg, nodes, pods), rounds=2, iterations=1)
    benchmark.extra_info["unallocated_gpu_pct_at_100"] = res["unallocated_gpu_pct_at_100"]
    benchmark.extra_info["pods_submitted"] = res["pods_submitted"]
    assert res["runtime_s"] < 20.0
