"""The rollout type: it survives pickling (RPC) intact and compact, and its row store reuses
its memory."""

from __future__ import annotations

import pickle

import numpy as np
import torch

from dsan.model.net import DSANNet, ModelConfig
from dsan.train.collector import collect
from dsan.train.openb import EnvConfig, make_episode
from dsan.train.rollout import RowStore


def test_rollout_pickles_to_flat_buffers_and_back() -> None:
    torch.manual_seed(3)
    model = DSANNet(ModelConfig(hidden=8)).eval()
    ro = collect([make_episode(EnvConfig(n_nodes=16), 7)], model, "sample")[0]
    back = pickle.loads(pickle.dumps(ro))
    assert len(back) == len(ro) > 0
    for k in ("action", "logp", "value", "reward"):
        assert getattr(back, k) == getattr(ro, k)
    for k in ("x", "cand", "teacher"):
        assert len(getattr(back, k)) == len(ro)
        for u, v in zip(getattr(back, k), getattr(ro, k), strict=True):
            np.testing.assert_array_equal(u, v)
    assert back.summary == ro.summary and back.nodes is not None and ro.nodes is not None
    assert torch.equal(back.nodes.edge_index, ro.nodes.edge_index)
    # The node-block columns travel once, as the episode's node rows, not once per row.
    assert pickle.loads(pickle.dumps(ro, protocol=5)).x[0].shape == ro.x[0].shape
    assert len(pickle.dumps(ro)) < 0.7 * sum(x.nbytes for x in ro.x)


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
