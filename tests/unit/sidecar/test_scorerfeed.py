"""The scorer feed (sidecar.scorerfeed): a scorer that trusts snapshot versions is told so
once, and before it reads the same snapshot at a new version, which rows were written in
between; nothing for a scorer without both hooks. That DSAN served this way stays exact is
test_scoring_dsan.py's."""

from __future__ import annotations

from typing import Any

from dsan.snapshot import PodSpec
from sidecar import kubeobjects as ko
from sidecar.cache import GraphCache
from sidecar.config import SidecarConfig
from sidecar.scorerfeed import ScorerFeed
from tests.unit.sidecar.test_scoring import CpuFree

POD = PodSpec(name="p", cpu_milli=1000, mem_mib=100)


class NotesOnly(CpuFree):
    """Takes row notes but does not promise to trust versions: must never get any."""

    def __init__(self) -> None:
        super().__init__("dsan")
        self.notes: list[tuple[int, int, list[int]]] = []

    def note_changes(self, since: int, version: int, rows: Any) -> None:
        self.notes.append((since, version, sorted(set(rows))))


class Trusting(NotesOnly):
    def __init__(self) -> None:
        super().__init__()
        self.trusted = 0

    def trust_snapshot_versions(self) -> None:
        self.trusted += 1


def _cache() -> GraphCache:
    cache = GraphCache(SidecarConfig())
    cache.replace_nodes([ko.node(f"n{i}", cpu="8", gpus=2, model="A100") for i in range(4)])
    return cache


def test_rows_written_between_two_reads_are_noted_once() -> None:
    cache, scorer = _cache(), Trusting()
    feed = ScorerFeed(cache, scorer)
    assert scorer.trusted == 1
    pub = cache.snapshot()
    feed(pub)  # the first read: nothing to compare with
    v0 = pub.version
    with cache.scoring_lock:
        cache.assume("default/a", POD, "n2", patch_published=True)
    again = cache.snapshot()
    assert again.snap is pub.snap and again.version != v0  # patched in place
    feed(again)
    feed(again)  # the same version: nothing new
    assert scorer.notes == [(v0, again.version, [again.index["n2"]])]


def test_no_notes_without_trust_and_nothing_asked_of_a_plain_scorer() -> None:
    cache = _cache()
    notes_only = NotesOnly()
    feeds = [ScorerFeed(cache, CpuFree("fgd")), ScorerFeed(cache, notes_only)]
    for feed in feeds:
        feed(cache.snapshot())
    with cache.scoring_lock:
        cache.assume("default/a", POD, "n1", patch_published=True)
    for feed in feeds:
        feed(cache.snapshot())
    assert notes_only.notes == []
