"""The elastic grant wired as the sidecar runs it: an owner for this scheduler with
dsan.io/max-members and no count, seen by the informer, gets the served policy's grant
written into its dsan.io/desired-members."""

from __future__ import annotations

from typing import Any

import pytest

from dsan.api import types as t
from sidecar.app import Sidecar, load_policies
from sidecar.cache import GraphCache
from sidecar.config import SidecarConfig
from tests.support import kubeobjects as ko
from tests.support.fakes import FakeClusterView, FakeWorkloads, idle


def owner(name: str, scheduler: str = t.SCHEDULER_NAME, **ann: str) -> dict[str, Any]:
    p = ko.pod(name, uid=f"uid-{name}", annotations={t.ANNOTATION_TASK_TYPE: "batch", **ann})
    p["spec"]["schedulerName"] = scheduler
    return p


def granted(policy: str, pods: list[dict[str, Any]], **cfg: Any) -> dict[str, str | None]:
    config = SidecarConfig(http_port=0, grpc_port=0, policy=policy, gc_freeze_after_sync=False,
                           **cfg)
    fake = FakeWorkloads({("default", p["metadata"]["name"]): p for p in pods})
    views: list[FakeClusterView] = []

    def factory(cache: GraphCache) -> FakeClusterView:
        views.append(FakeClusterView(cache, nodes=[ko.node("n0")], pods=pods))
        return views[0]

    sc = Sidecar(config, view_factory=factory, policies=load_policies(config), workloads=fake)
    sc.start()
    try:
        for p in pods:  # a status update: the owner is offered once all the same
            views[0].apply("pods", "MODIFIED", p)
        assert sc.granter is None or idle(sc.granter)
    finally:
        sc.stop()
    return {p["metadata"]["name"]: p["metadata"]["annotations"].get(t.ANNOTATION_DESIRED_MEMBERS)
            for p in pods}


def test_dsan_grants_its_learned_share_of_the_growth() -> None:
    """The shipped actions.json's batch_growth (0.90): 2 + round(0.90 x 10) = 11; a training
    owner's train_growth (0.997) rounds to all 8."""
    pods = [owner("spark", **{t.ANNOTATION_MIN_MEMBERS: "2", t.ANNOTATION_MAX_MEMBERS: "12"}),
            owner("trainer", **{t.ANNOTATION_TASK_TYPE: "train", t.ANNOTATION_MAX_MEMBERS: "8"}),
            owner("counted", **{t.ANNOTATION_MAX_MEMBERS: "12",
                                t.ANNOTATION_DESIRED_MEMBERS: "3"}),
            owner("other-scheduler", scheduler="default-scheduler",
                  **{t.ANNOTATION_MAX_MEMBERS: "12"}),
            owner("no-max"),
            owner("min-above-max", **{t.ANNOTATION_MIN_MEMBERS: "5",
                                      t.ANNOTATION_MAX_MEMBERS: "3"})]
    assert granted("dsan", pods) == {"spark": "11", "trainer": "8", "counted": "3",
                                     "other-scheduler": None, "no-max": None,
                                     "min-above-max": None}


@pytest.mark.parametrize(("cfg", "want"), [({}, "12"), ({"elastic_grant": False}, None)])
def test_a_heuristic_grants_everything_and_the_flag_turns_it_off(cfg: dict[str, Any],
                                                                 want: str | None) -> None:
    pods = [owner("spark", **{t.ANNOTATION_MIN_MEMBERS: "2", t.ANNOTATION_MAX_MEMBERS: "12"})]
    assert granted("fgd", pods, **cfg) == {"spark": want}
