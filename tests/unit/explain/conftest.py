"""A small cluster in mid-run and a small random DSAN model, shared by the explain tests."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dsan.core.snapshot import ClusterSnapshot, PodSpec, empty_snapshot


@pytest.fixture
def snap() -> ClusterSnapshot:
    n = 24
    rng = np.random.default_rng(5)
    count = rng.choice([0, 2, 4, 8], size=n, p=[0.2, 0.2, 0.3, 0.3])
    s = empty_snapshot(
        [f"node-{i:02d}" for i in range(n)],
        rng.choice([32_000.0, 64_000.0, 96_000.0], size=n),
        rng.choice([131_072.0, 262_144.0, 524_288.0], size=n),
        count,
        np.where(count > 0, rng.integers(0, 3, size=n), -1),
        ["A100", "V100", "T4"],
    )
    s.cpu_used[:] = np.floor(s.cpu_cap * rng.uniform(0, 0.6, size=n))
    s.mem_used[:] = np.floor(s.mem_cap * rng.uniform(0, 0.6, size=n))
    used = rng.integers(0, 1001, size=s.gpu_free.shape)
    s.gpu_free[:] = np.where(
        s.gpu_present & (rng.random(s.gpu_free.shape) < 0.4), 1000 - used, s.gpu_free
    )
    return s


@pytest.fixture
def pod() -> PodSpec:
    return PodSpec("pod-a", cpu_milli=4000, mem_mib=16_384, num_gpu=1, gpu_milli=500)


@pytest.fixture
def dsan_scorer():
    from dsan.model.net import DSANNet, ModelConfig
    from dsan.policies.dsan import DSANScorer
    from tests.support.models import serving_model

    torch.manual_seed(0)
    return DSANScorer(serving_model(DSANNet(ModelConfig(hidden=8))))


@pytest.fixture(autouse=True)
def _one_torch_thread():
    # Tiny batches: extra intra-op threads only contend on the shared 2-core machine.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
