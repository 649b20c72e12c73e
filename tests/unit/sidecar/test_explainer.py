"""/explain on a small world: SHAP of the served DSAN logit, additive and equal to the logit
the served model gives the cluster the pod was scored on; the per-term breakdown for FGD and
k8s-default; the refusals (unknown pod, unexplainable policy, busy, bad path)."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from dsan.core.filtering import feasible_nodes
from dsan.core.snapshot import ClusterSnapshot
from dsan.features import FEATURE_NAMES, default_workload
from dsan.model.serving import ServingModel
from sidecar.explainer import ExplainRefused, parse_path
from sidecar.podspec import podspec_from_pod
from tests.unit.sidecar.decisionworld import GPU_NODES, World, served, world


def reference_logits(w: World, name: str, snap: ClusterSnapshot) -> dict[str, float]:
    """DSAN's logits of the pod's feasible nodes on ``snap``, from a model of its own
    (featurize every candidate, run the numpy runtime)."""
    spec = podspec_from_pod(w.pods[name], w.cache.models)
    nodes = feasible_nodes(spec, snap)
    logits = ServingModel.from_dir(workload=default_workload()).reference(spec, snap, nodes)
    return {snap.names[int(n)]: float(v) for n, v in zip(nodes, logits, strict=True)}


def test_dsan_impacts_add_up_to_the_served_logit_of_the_cluster_it_was_scored_on() -> None:
    w = world()
    w.create("warm", cpu="2", memory="4Gi", gpus=1)
    w.bind("warm", w.score("warm").winner)  # another pod placed before ours
    w.create("p", cpu="4", memory="16Gi", gpus=1)
    before = w.before()
    res = w.score("p")
    w.bind("p", res.winner)
    doc = w.explainer.explain("default", "p")

    assert doc["task_id"] == "default/p" and doc["recommended_node"] == res.winner
    factors = doc["decision_factors"]
    assert len(factors) == len(FEATURE_NAMES) + 1
    assert set(factors[0]) >= {"feature", "value", "unit", "impact"}
    total = sum(f["impact"] for f in factors)
    assert abs(total - (doc["score"] - doc["base_value"])) < 1e-9
    assert abs(sum(f["runner_up_impact"] for f in factors)
               - (doc["runner_up_score"] - doc["base_value"])) < 1e-9
    # the score is the served model's logit of the winner on the cluster before the pod
    # was charged to it (float32 batches of other rows round differently: up to ~1.2e-4 on a
    # logit of ~51 seen)
    ref = reference_logits(w, "p", before)
    assert doc["score"] == pytest.approx(ref[res.winner], abs=1e-3)
    assert doc["runner_up_score"] == pytest.approx(ref[doc["runner_up"]], abs=1e-3)
    # ...which the pod's own charge would have changed (by ~5.6): the check can fail
    with w.cache.scoring_lock:
        after = w.cache.snapshot().snap.copy()
    assert abs(reference_logits(w, "p", after)[res.winner] - ref[res.winner]) > 0.1
    assert doc["policy"].startswith("dsan@") and doc["reply"]["recommended"] == 10
    # the JSON answer carries the same numbers
    status, body, _ = w.explainer.http("default/p")
    assert status == 200 and orjson.loads(body)["score"] == doc["score"]


def test_factors_come_largest_impact_first() -> None:
    w = world()
    w.create("p", cpu="4", memory="16Gi", gpus=1)
    w.score("p")
    impacts = np.abs([f["impact"] for f in w.explainer.explain("default", "p")
                      ["decision_factors"]])
    assert np.all(np.diff(impacts) <= 0) and impacts[0] > 0


def test_the_cpu_budget_stops_sampling_and_keeps_the_impacts_additive() -> None:
    w = world(budget_s=1e-9, permutations=50)
    w.create("p", cpu="4", memory="16Gi", gpus=1)
    w.score("p")
    doc = w.explainer.explain("default", "p")
    assert "(2 orderings" in doc["method"], doc["method"]  # one antithetic pair, not 50
    total = sum(f["impact"] for f in doc["decision_factors"])
    assert abs(total - (doc["score"] - doc["base_value"])) < 1e-9


@pytest.mark.parametrize("policy", ["fgd", "k8s-default"])
def test_heuristics_get_their_terms_adding_up_to_their_score(policy: str) -> None:
    w = world(policy=policy)
    w.create("p", cpu="4", memory="16Gi", gpus=1)
    before = w.before()
    res = w.score("p")
    w.bind("p", res.winner)
    doc = w.explainer.explain("default", "p")
    assert doc["policy"] == policy and doc["recommended_node"] == res.winner
    total = sum(f["impact"] for f in doc["decision_factors"])
    assert abs(total - (doc["score"] - doc["base_value"])) < 1e-9
    spec = podspec_from_pod(w.pods["p"], w.cache.models)
    row = before.names.index(res.winner)
    assert doc["score"] == served(policy).score(spec, before, np.array([row]))[0]


def test_nodes_with_stale_telemetry_are_explained_by_the_fallback_that_scored_them() -> None:
    w = world(telemetry=False, stale_s=60)  # kwok-like GPU nodes: no telemetry, ever
    w.create("p", cpu="4", memory="16Gi", gpus=1)
    res = w.score("p")
    assert res.winner in GPU_NODES
    doc = w.explainer.explain("default", "p")
    assert doc["policy"] == "fgd" and doc["served_policy"].startswith("dsan@")
    assert doc["runner_up"] in GPU_NODES  # compared within the group the fallback scored


def test_refusals() -> None:
    w = world(policy="tetris")
    w.create("p", cpu="4", memory="16Gi")
    w.score("p")
    with pytest.raises(ExplainRefused, match="has no explanation") as exc:
        w.explainer.explain("default", "p")
    assert exc.value.status == 404
    with pytest.raises(ExplainRefused, match="has not scored pod default/q") as exc:
        w.explainer.explain("default", "q")
    assert exc.value.status == 404
    assert w.explainer.http("default/q")[0] == 404
    assert w.explainer.results["not_found"] == 1


def test_one_explanation_at_a_time() -> None:
    w = world()
    w.create("p", cpu="4", memory="16Gi", gpus=1)
    w.score("p")
    with w.explainer._slot:  # another request is computing one
        status, body, extra = w.explainer.http("default/p")
    assert status == 429 and "Retry-After" in extra and b"retry" in body
    assert w.explainer.http("default/p")[0] == 200


def test_a_pod_scored_on_one_node_has_nothing_to_compare() -> None:
    w = world()
    w.create("p", cpu="4", memory="16Gi")
    w.score("p", names=["node-00001"])
    with pytest.raises(ExplainRefused, match="one node"):
        w.explainer.explain("default", "p")


def test_pods_the_sidecar_may_not_assume_are_not_remembered() -> None:
    w = world()
    w.create("p", cpu="4", memory="16Gi")
    w.bind("p", "node-00001")  # no longer pending: a score now is a probe
    w.score("p")
    assert w.decisions.get("default/p") is None


@pytest.mark.parametrize(("rest", "ok"), [
    ("ns/pod", ("ns", "pod")), ("ns/a%2Eb", ("ns", "a.b")), ("ns", None), ("a/b/c", None),
    ("ns/", None), ("/p", None), ("ns/" + "x" * 254, None), ("ns/a%2Fb", None),
    ("ns/a%0Ab", None),
])
def test_explain_paths(rest: str, ok: tuple[str, str] | None) -> None:
    if ok is not None:
        assert parse_path(rest) == ok
    else:
        with pytest.raises(ExplainRefused) as exc:
            parse_path(rest)
        assert exc.value.status == 400
