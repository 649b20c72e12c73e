"""A workload owner's desired count: granted where it has none, lowered on eviction, each by a
compare-and-swap JSON patch."""

from __future__ import annotations

from typing import Any

import pytest

from dsan.api import types as t
from sidecar.recorder import WriteError
from sidecar.shrinker import Granter, Shrinker, grant_ops, shrink_ops
from tests.support.fakes import FakeWorkloads, idle


def owner(**ann: str) -> dict[str, Any]:
    return {"metadata": {"name": "driver", "namespace": "ns", "annotations": ann}}


@pytest.mark.parametrize(("desired", "minimum", "members", "result", "new"), [
    ("5", None, 1, "ok", "4"),
    ("5", None, 9, "ok", "0"),
    ("5", "3", 4, "ok", "3"),
    ("3", "3", 1, "at_minimum", None),
    ("0", None, 1, "at_minimum", None),
    (None, None, 1, "no_count", None),
    ("five", None, 1, "no_count", None),
])
def test_shrink_ops(desired: str | None, minimum: str | None, members: int, result: str,
                    new: str | None) -> None:
    ann = {}
    if desired is not None:
        ann[t.ANNOTATION_DESIRED_MEMBERS] = desired
    if minimum is not None:
        ann[t.ANNOTATION_MIN_MEMBERS] = minimum
    got, ops = shrink_ops(owner(**ann), members)
    assert got == result
    if new is None:
        assert ops == []
    else:
        path = "/metadata/annotations/dsan.io~1desired-members"
        assert ops == [{"op": "test", "path": path, "value": desired},
                       {"op": "replace", "path": path, "value": new}]


class Racing(FakeWorkloads):
    """Another writer changes the count between each read and patch, ``races`` times."""

    races: int = 0

    def json_patch_pod(self, namespace: str, name: str, ops: list[dict[str, Any]]) -> None:
        if self.races:
            self.races -= 1
            ann = self.pods[namespace, name]["metadata"]["annotations"]
            ann[t.ANNOTATION_DESIRED_MEMBERS] = str(int(ann[t.ANNOTATION_DESIRED_MEMBERS]) + 1)
        super().json_patch_pod(namespace, name, ops)


def test_a_concurrent_change_is_read_again_and_applied_on_top() -> None:
    fake = Racing({("ns", "driver"): owner(**{t.ANNOTATION_DESIRED_MEMBERS: "4"})})
    fake.races = 1
    assert Shrinker(fake).shrink("ns", "driver", 1) == "ok"
    assert fake.pods["ns", "driver"]["metadata"]["annotations"][
        t.ANNOTATION_DESIRED_MEMBERS] == "4"  # 4 -> 5 by the other writer, -> 4 by us
    fake.races = 5
    s = Shrinker(fake)
    assert s.shrink("ns", "driver", 1) == "conflict" and s.counts["conflict"] == 1


def test_failures_are_counted_by_reason_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeWorkloads({("ns", "driver"): owner(**{t.ANNOTATION_DESIRED_MEMBERS: "4"})},
                         fail=WriteError("forbidden", "denied"))
    s = Shrinker(fake)
    with caplog.at_level("WARNING", logger="dsan.sidecar.shrinker"):
        assert s.shrink("ns", "driver", 1) == "forbidden"
        assert s.shrink("ns", "driver", 1) == "forbidden"
        assert s.shrink("ns", "gone", 1) == "not_found"
    assert s.counts["forbidden"] == 2 and s.counts["not_found"] == 1
    assert len(caplog.records) == 2


def test_a_full_queue_drops_and_counts() -> None:
    s = Shrinker(FakeWorkloads(), maxsize=1)
    s.offer("ns", "a", 1)
    s.offer("ns", "b", 1)
    assert s.counts["dropped"] == 1


@pytest.mark.parametrize(("ann", "result"), [
    ({t.ANNOTATION_MAX_MEMBERS: "8"}, "ok"),
    ({t.ANNOTATION_MAX_MEMBERS: "8", t.ANNOTATION_DESIRED_MEMBERS: "3"}, "already_set"),
])
def test_grant_ops_add_a_count_only_where_there_is_none(ann: dict[str, str], result: str) -> None:
    o = owner(**ann)
    o["metadata"]["resourceVersion"] = "41"
    got, ops = grant_ops(o, 6)
    assert got == result
    assert ops == ([{"op": "test", "path": "/metadata/resourceVersion", "value": "41"},
                    {"op": "add", "path": "/metadata/annotations/dsan.io~1desired-members",
                     "value": "6"}] if result == "ok" else [])


class Updating(FakeWorkloads):
    """The owner's status changes (a new resourceVersion) between each read and patch,
    ``races`` times; with ``sets``, its own controller writes a count the first time."""

    races: int = 0
    sets: str | None = None

    def json_patch_pod(self, namespace: str, name: str, ops: list[dict[str, Any]]) -> None:
        if self.races:
            self.races -= 1
            meta = self.pods[namespace, name]["metadata"]
            meta["resourceVersion"] = str(int(meta.get("resourceVersion", "1")) + 1)
            if self.sets is not None:
                meta["annotations"][t.ANNOTATION_DESIRED_MEMBERS] = self.sets
        super().json_patch_pod(namespace, name, ops)


def test_a_grant_is_read_again_after_a_status_update_and_never_overwrites_a_count() -> None:
    fake = Updating({("ns", "driver"): owner(**{t.ANNOTATION_MAX_MEMBERS: "8"})})
    fake.races = 1
    assert Granter(fake).grant("ns", "driver", 6) == "ok"
    assert fake.pods["ns", "driver"]["metadata"]["annotations"][
        t.ANNOTATION_DESIRED_MEMBERS] == "6"
    # The owner's controller sets its own count between the read and the write: it stands.
    fake = Updating({("ns", "driver"): owner(**{t.ANNOTATION_MAX_MEMBERS: "8"})})
    fake.races, fake.sets = 1, "2"
    g = Granter(fake)
    assert g.grant("ns", "driver", 6) == "already_set"
    assert fake.pods["ns", "driver"]["metadata"]["annotations"][
        t.ANNOTATION_DESIRED_MEMBERS] == "2"
    fake = Updating({("ns", "driver"): owner(**{t.ANNOTATION_MAX_MEMBERS: "8"})})
    fake.races = 3
    assert Granter(fake).grant("ns", "driver", 6) == "conflict"


def test_an_owner_is_offered_once_and_a_refusal_is_counted() -> None:
    fake = FakeWorkloads({("ns", "driver"): owner(**{t.ANNOTATION_MAX_MEMBERS: "8"})})
    g = Granter(fake)
    g.start()
    try:
        for _ in range(3):  # every informer event of the owner reaches the hook
            g.offer("ns", "driver", "uid-1", 6)
        assert idle(g)
    finally:
        g.stop()
    assert len(fake.patches) == 1 and g.counts["ok"] == 1
    fake.fail = WriteError("forbidden", "denied by the admission policy")
    fake.pods["ns", "other"] = owner(**{t.ANNOTATION_MAX_MEMBERS: "4"})
    assert g.grant("ns", "other", 4) == "forbidden" and g.counts["forbidden"] == 1
