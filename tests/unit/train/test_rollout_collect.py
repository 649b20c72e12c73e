"""The lockstep collector takes the decisions the one-episode path takes, samples from the
model's distribution, and rollouts survive pickling (RPC) intact."""

from __future__ import annotations

import pickle

import numpy as np
import torch

from dsan.model.net import DSANNet, ModelConfig
from dsan.train.env import EnvConfig, make_episode
from dsan.train.rollout import RowStore, collect, run_episode, segment_choice


def _model() -> DSANNet:
    torch.manual_seed(3)
    return DSANNet(ModelConfig(hidden=8)).eval()


def test_lockstep_greedy_decides_exactly_as_one_episode_at_a_time() -> None:
    model, env = _model(), EnvConfig(n_nodes=12, tune=0.6)
    seeds = [1, 2, 5]
    one = [run_episode(make_episode(env, s), model, "greedy") for s in seeds]
    many = collect([make_episode(env, s) for s in seeds], model, "greedy")
    assert len({len(r) for r in one}) > 1  # episodes of different lengths: some finish first
    for a, b in zip(one, many, strict=True):
        assert len(a) > 10 and a.action == b.action
        assert a.reward == b.reward and a.alloc_pct == b.alloc_pct and a.failed == b.failed
        for xa, xb, ca, cb in zip(a.x, b.x, a.cand, b.cand, strict=True):
            np.testing.assert_array_equal(xa, xb)
            np.testing.assert_array_equal(ca, cb)
        np.testing.assert_allclose(a.logp, b.logp, atol=1e-5)
        np.testing.assert_allclose(a.value, b.value, atol=1e-5)


def test_segment_choice_greedy_takes_the_first_maximum_of_each_segment() -> None:
    logits = np.array([1.0, 3.0, 3.0, 0.0, -1.0, 2.0], dtype=np.float32)
    offsets = np.array([0, 3, 4, 6])
    pick, logp = segment_choice(logits, offsets, "greedy", np.random.default_rng(0))
    assert pick.tolist() == [1, 0, 1]
    want = [3 - np.log(np.exp(1) + 2 * np.exp(3)), 0.0, 2 - np.log(np.exp(-1) + np.exp(2))]
    np.testing.assert_allclose(logp, want, rtol=1e-6)


def test_segment_choice_samples_each_segment_from_its_softmax() -> None:
    rng = np.random.default_rng(0)
    logits = np.array([0.0, 1.0, 2.0, -3.0, 5.0, 5.0], dtype=np.float32)
    offsets = np.array([0, 3, 4, 6])
    n = 20_000
    counts = np.zeros(6)
    for _ in range(n // 100):  # 100 draws of every segment per call, as 100 stacked copies
        big = np.tile(logits, 100)
        offs = np.concatenate([offsets[:-1] + 6 * i for i in range(100)] + [[600]])
        pick, _ = segment_choice(big, offs, "sample", rng)
        rows = (offs[:-1] + pick) % 6
        np.add.at(counts, rows, 1)
    p0 = np.exp(logits[:3]) / np.exp(logits[:3]).sum()
    np.testing.assert_allclose(counts[:3] / n, p0, atol=0.015)
    assert counts[3] == n  # a one-row segment always takes its row
    np.testing.assert_allclose(counts[4:] / n, [0.5, 0.5], atol=0.015)


def test_rollout_pickles_to_flat_buffers_and_back() -> None:
    ro = collect([make_episode(EnvConfig(n_nodes=16), 7)], _model(), "sample")[0]
    back = pickle.loads(pickle.dumps(ro))
    assert len(back) == len(ro) > 0
    for k in ("action", "logp", "value", "reward"):
        assert getattr(back, k) == getattr(ro, k)
    for k in ("x", "cand", "teacher"):
        assert len(getattr(back, k)) == len(ro)
        for u, v in zip(getattr(back, k), getattr(ro, k), strict=True):
            np.testing.assert_array_equal(u, v)
    np.testing.assert_array_equal(back.flat()[2], ro.flat()[2])
    assert back.alloc_pct == ro.alloc_pct and torch.equal(back.edge_index, ro.edge_index)


def test_row_store_keeps_rows_until_reset_and_then_reuses_its_memory() -> None:
    store = RowStore(cols=3, chunk_rows=5)
    rng = np.random.default_rng(0)
    xs = [rng.random((n, 3)).astype(np.float32) for n in (2, 2, 3, 7, 1)]
    views = [store.put(x) for x in xs]
    for x, v in zip(xs, views, strict=True):  # none overwritten by later puts, across chunks
        np.testing.assert_array_equal(v, x)
    assert [len(c) for c in store.chunks] == [5, 5, 7, 5]  # an oversized put gets its own
    chunks = list(store.chunks)
    store.reset()
    again = [store.put(x[::-1].copy()) for x in xs]
    assert all(a is b for a, b in zip(store.chunks, chunks, strict=True))  # no new memory
    assert np.shares_memory(again[0], views[0])
    for x, v in zip(xs, again, strict=True):
        np.testing.assert_array_equal(v, x[::-1])


def test_collect_into_a_row_store_keeps_the_same_rollouts() -> None:
    model, env = _model(), EnvConfig(n_nodes=12, tune=0.6)
    plain = collect([make_episode(env, s) for s in (1, 2)], model, "sample")
    store = RowStore(chunk_rows=64)
    for _ in range(2):  # the second round writes over the first one's rows
        store.reset()
        got = collect([make_episode(env, s) for s in (1, 2)], model, "sample", store=store)
        for a, b in zip(plain, got, strict=True):
            assert a.action == b.action and a.logp == b.logp and len(a.x) == len(b.x)
            for xa, xb in zip(a.x, b.x, strict=True):
                np.testing.assert_array_equal(xa, xb)
                assert any(np.shares_memory(xb, c) for c in store.chunks)
