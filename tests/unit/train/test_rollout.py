"""The rollouts' row store reuses its memory."""

from __future__ import annotations

import numpy as np

from dsan.train.rollout import RowStore


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
