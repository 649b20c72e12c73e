"""Elastic shrink: the owner's desired count lowered by a compare-and-swap JSON patch."""

from __future__ import annotations

from typing import Any

import pytest

from dsan.api import types as t
from sidecar.recorder import WriteError
from sidecar.shrinker import Shrinker, shrink_ops
from tests.support.fakes import FakeWorkloads


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
    assert s.shrink("ns", "driver", 1) == "conflict" and s.results["conflict"] == 1


def test_failures_are_counted_by_reason_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeWorkloads({("ns", "driver"): owner(**{t.ANNOTATION_DESIRED_MEMBERS: "4"})},
                         fail=WriteError("forbidden", "denied"))
    s = Shrinker(fake)
    with caplog.at_level("WARNING", logger="dsan.sidecar.shrinker"):
        assert s.shrink("ns", "driver", 1) == "forbidden"
        assert s.shrink("ns", "driver", 1) == "forbidden"
        assert s.shrink("ns", "gone", 1) == "not_found"
    assert s.results["forbidden"] == 2 and s.results["not_found"] == 1
    assert len(caplog.records) == 2


def test_a_full_queue_drops_and_counts() -> None:
    s = Shrinker(FakeWorkloads(), maxsize=1)
    s.offer("ns", "a", 1)
    s.offer("ns", "b", 1)
    assert s.results["dropped"] == 1
