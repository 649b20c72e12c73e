"""The collector: K episodes in lockstep take the decisions one episode at a time takes, the
draws sample from the model's distribution, rows may live in a row store, and the modes
record what they say."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dsan.model.net import DSANNet, ModelConfig
from dsan.train.collector import collect, segment_choice, softmax_choice
from dsan.train.openb import EnvConfig, make_episode
from dsan.train.rollout import RowStore
from dsan.train.teachers import make_teacher


def _model() -> DSANNet:
    torch.manual_seed(3)
    return DSANNet(ModelConfig(hidden=8)).eval()


def test_lockstep_greedy_decides_exactly_as_one_episode_at_a_time() -> None:
    model, env = _model(), EnvConfig(n_nodes=12, tune=0.6)
    seeds = [1, 2, 5]
    one = [collect([make_episode(env, s)], model, "greedy")[0] for s in seeds]
    many = collect([make_episode(env, s) for s in seeds], model, "greedy")
    assert len({len(r) for r in one}) > 1  # episodes of different lengths: some finish first
    for a, b in zip(one, many, strict=True):
        assert len(a) > 10 and a.action == b.action
        assert a.reward == b.reward and a.summary == b.summary
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


def test_softmax_choice_draws_as_the_scenario_stage_does() -> None:
    """torch's float64 log-softmax per segment, argmax or ``rng.choice`` over it: the rule
    whose draws the shipped scenario model was trained on."""
    logits = np.array([0.5, 2.0, -1.0, 3.0, 3.0], dtype=np.float32)
    offsets = np.array([0, 3, 5])
    pick, logp = softmax_choice(logits, offsets, "greedy", np.random.default_rng(0))
    assert pick.tolist() == [1, 0]
    lp = torch.log_softmax(torch.from_numpy(logits[:3]).double(), 0)
    assert logp[0] == float(lp[1])
    rng, ref = np.random.default_rng(5), np.random.default_rng(5)
    pick, _ = softmax_choice(logits, offsets, "sample", rng)
    for (lo, hi), got in zip([(0, 3), (3, 5)], pick.tolist(), strict=True):
        p = torch.log_softmax(torch.from_numpy(logits[lo:hi]).double(), 0).exp()
        assert got == int(ref.choice(hi - lo, p=p.numpy() / float(p.sum())))


def test_teacher_mode_labels_the_teachers_choice_and_keep_false_keeps_no_rows() -> None:
    env = EnvConfig(n_nodes=12, tune=0.6)
    ep = make_episode(env, 2)
    (ro,) = collect([ep], None, "teacher", make_teacher("fgd", ep.target))
    assert len(ro) > 10 and len(ro.x) == len(ro.teacher) == len(ro.cand) == len(ro)
    for a, best, x, cand in zip(ro.action, ro.teacher, ro.x, ro.cand, strict=True):
        assert best.sum() == 1 and best[a]  # the exact choice, tie-break included
        assert x.shape == (len(cand), 128)
    assert ro.nodes is not None and not ro.emb  # openb keeps node inputs, not embeddings
    (bare,) = collect([make_episode(env, 2)], None, "teacher", make_teacher("fgd", ep.target),
                      keep=False)
    assert bare.action == ro.action and bare.reward == ro.reward and not bare.x


def test_modes_are_checked() -> None:
    ep = make_episode(EnvConfig(n_nodes=12), 1)
    with pytest.raises(ValueError, match="unknown rollout mode"):
        collect([ep], _model(), "explore")
    with pytest.raises(ValueError, match="teacher"):
        collect([ep], _model(), "dagger")
    with pytest.raises(ValueError, match="model"):
        collect([ep], None, "sample")
