"""Preferred allocation: exact search on small requests, greedy on large, errors named."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deviceplugin import topology as tp
from deviceplugin.fake import FakeBackend, topology_peers


def _topo(name: str, n: int = 8) -> tp.Topology:
    devs = FakeBackend(n, topology=name).devices()
    numa = [i // (n // 2) for i in range(n)]
    return tp.Topology.build([d.uuid for d in devs], [d.nvlink_peers for d in devs],
                             [d.nvlink_domain for d in devs], numa, pcie=[i // 2 for i in range(n)])


def test_domains_are_connected_components() -> None:
    assert tp.nvlink_domains({0: (1,), 1: (0,), 2: (), 3: (4,), 4: (3,)}) == {
        0: 0, 1: 0, 2: None, 3: 3, 4: 3}
    assert set(tp.nvlink_domains(topology_peers("dgx1", 8)).values()) == {0}


def test_whole_quad_preferred_and_must_include_respected() -> None:
    t = _topo("two-quads")
    ids = list(t.ids)
    assert t.preferred(ids, [], 4) == ids[:4]
    assert t.preferred(ids, [ids[7]], 2) == [ids[6], ids[7]]  # quad-mate under its switch
    assert t.preferred(ids, [ids[1], ids[6]], 2) == [ids[1], ids[6]]


def test_dgx1_cross_quad_link_is_used() -> None:
    t = _topo("dgx1")
    ids = list(t.ids)
    # GPU 1's cross link goes to GPU 5.
    assert t.preferred([ids[1], ids[4], ids[5], ids[6]], [ids[1]], 2) == [ids[1], ids[5]]


def test_no_nvlink_falls_back_to_numa() -> None:
    t = _topo("none")
    ids = list(t.ids)
    assert t.preferred([ids[2], ids[5], ids[6]], [], 2) == [ids[5], ids[6]]


def test_pcie_switch_ranks_between_nvlink_domain_and_numa() -> None:
    devs = FakeBackend(4, topology="none").devices()
    ids = [d.uuid for d in devs]
    # All on one NUMA node; GPUs 1 and 2 share a PCIe switch.
    t = tp.Topology.build(ids, [()] * 4, [None] * 4, [0] * 4, pcie=[0, 1, 1, 2])
    assert t.preferred(ids, [], 2) == [ids[1], ids[2]]
    assert t.preferred(ids, [ids[3]], 2) == [ids[0], ids[3]]  # tie: lowest index
    # A shared NVLink domain still beats a shared switch.
    t2 = tp.Topology.build(ids, [(), (), (), ()], [None, 7, None, 7], [0] * 4,
                           pcie=[0, 1, 1, 2])
    assert t2.preferred(ids, [ids[1]], 2) == [ids[1], ids[3]]


@pytest.mark.parametrize(
    ("avail", "must", "size", "msg"),
    [([0, 1], [], 3, "cannot pick 3"), ([0, 1], [2], 1, "must-include"),
     ([0, 1, 2], [0, 1], 1, "cannot pick 1")],
)
def test_impossible_requests_are_named(avail: list[int], must: list[int], size: int,
                                       msg: str) -> None:
    t = _topo("two-quads")
    with pytest.raises(ValueError, match=msg):
        t.preferred([t.ids[i] for i in avail], [t.ids[i] for i in must], size)
    with pytest.raises(ValueError, match="unknown device"):
        t.preferred(["GPU-nope"], [], 1)


@settings(max_examples=40, deadline=None)
@given(st.sets(st.integers(0, 7), min_size=1), st.data())
def test_exact_answer_is_optimal_and_valid(avail: set[int], data: st.DataObject) -> None:
    t = _topo("dgx1")
    size = data.draw(st.integers(1, len(avail)))
    must = data.draw(st.sets(st.sampled_from(sorted(avail)), max_size=size))
    got = t.preferred([t.ids[i] for i in avail], [t.ids[i] for i in must], size)
    idx = [t.ids.index(g) for g in got]
    assert len(set(idx)) == size and set(idx) <= avail and set(must) <= set(idx)
    best = max(t.score(list(c)) for c in itertools.combinations(sorted(avail), size)
               if set(must) <= set(c))
    assert t.score(idx) == pytest.approx(best)


def test_greedy_path_on_a_large_node_keeps_domains_together(monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    monkeypatch.setattr(tp, "MAX_EXACT_COMBINATIONS", 1)  # force the greedy search
    t = _topo("two-quads", 16)
    ids = list(t.ids)
    got = t.preferred(ids, [ids[9]], 6)
    assert got == ids[8:14]  # all in GPU 9's half
