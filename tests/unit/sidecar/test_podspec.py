from __future__ import annotations

import re
import time
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsan.api.types import TASK_TYPES
from sidecar.podspec import (
    NO_MODEL,
    PodError,
    PodSpecMemo,
    parse_quantity,
    pod_key,
    pod_requests,
    podspec_from_parts,
    podspec_from_pod,
)
from tests.support import kubeobjects as ko


@pytest.mark.parametrize(
    ("text", "value"),
    [("500m", Decimal("0.5")), ("2", Decimal(2)), ("1Gi", Decimal(2**30)),
     ("1e3", Decimal(1000)), ("1k", Decimal(1000)), ("128Mi", Decimal(128 * 2**20)),
     (3, Decimal(3)), ("0.5", Decimal("0.5"))],
)
def test_quantities(text: object, value: Decimal) -> None:
    assert parse_quantity(text, "x") == value


@pytest.mark.parametrize("bad", ["", "abc", "1Qi", "-1", None, True, "NaN"])
def test_bad_quantity_names_where(bad: object) -> None:
    with pytest.raises(PodError, match="here"):
        parse_quantity(bad, "here")


def test_requests_sum_containers_take_max_of_init_and_add_overhead() -> None:
    pod = ko.pod("p", cpu="1", memory="1Gi")
    pod["spec"]["containers"].append({"name": "b", "resources": {"requests": {"cpu": "500m"}}})
    pod["spec"]["initContainers"] = [{"name": "i", "resources": {"requests": {"cpu": "2"}}},
                                     {"name": "j", "resources": {"limits": {"memory": "4Gi"}}}]
    pod["spec"]["overhead"] = {"cpu": "100m"}
    req = pod_requests(pod)
    assert req["cpu"] == Decimal("2.1")  # max(1.5, 2) + 0.1
    assert req["memory"] == Decimal(4 * 2**30)  # limits stand in for missing requests


def test_sidecar_init_containers_add_up_as_kube_scheduler_charges_them() -> None:
    """component-helpers' PodRequests (what NodeResourcesFit and the DSANScore plugin charge):
    a restartable init container (a sidecar) runs beside the containers, so it adds to them,
    and the init containers after it run beside it."""
    pod = ko.pod("p", cpu="1", memory="1Gi")
    pod["spec"]["initContainers"] = [
        {"name": "mesh", "restartPolicy": "Always",
         "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
        {"name": "migrate", "resources": {"requests": {"cpu": "3"}}},
        {"name": "log", "restartPolicy": "Always", "resources": {"requests": {"cpu": "250m"}}}]
    req = pod_requests(pod)
    assert req["cpu"] == Decimal("3.5")  # max(1 + 0.5 + 0.25, 3 + 0.5)
    assert req["memory"] == Decimal(2 * 2**30)  # 1Gi + the sidecar's 1Gi
    # The memo tells a sidecar from a plain init container of the same resources.
    memo = PodSpecMemo()
    plain = ko.pod("q", cpu="1")
    plain["spec"]["initContainers"] = [{"name": "i", "resources": {"requests": {"cpu": "1"}}}]
    side = ko.pod("r", cpu="1")
    side["spec"]["initContainers"] = [{"name": "i", "restartPolicy": "Always",
                                       "resources": {"requests": {"cpu": "1"}}}]
    assert memo.get(plain, {}).cpu_milli == 1000 and memo.get(side, {}).cpu_milli == 2000


def test_limits_stand_in_for_each_missing_request() -> None:
    """As the API server defaults them: per resource, not only when requests is absent."""
    pod = ko.pod("p")
    pod["spec"]["containers"] = [{"name": "c", "resources": {
        "requests": {"cpu": "1"}, "limits": {"cpu": "2", "memory": "1Gi"}}}]
    req = pod_requests(pod)
    assert req["cpu"] == Decimal(1) and req["memory"] == Decimal(2**30)


def test_whole_gpu_pod() -> None:
    spec = podspec_from_pod(ko.pod("p", cpu="4", memory="8Gi", gpus=2, namespace="ns"), {})
    assert spec.name == "ns/p"
    assert (spec.cpu_milli, spec.mem_mib, spec.num_gpu, spec.gpu_milli) == (4000, 8192, 2, 1000)


def test_gpu_share_from_annotation_or_resource() -> None:
    a = podspec_from_pod(ko.pod("p", gpus=1, annotations={"dsan.io/gpu-milli": "300"}), {})
    assert (a.num_gpu, a.gpu_milli) == (1, 300)
    r = podspec_from_pod(ko.pod("p", extra_requests={"dsan.io/gpu-milli": "250"}), {})
    assert (r.num_gpu, r.gpu_milli) == (1, 250)
    cpu = podspec_from_pod(ko.pod("p"), {})
    assert (cpu.num_gpu, cpu.gpu_milli) == (0, 0)


def test_bad_share_and_priority_are_errors() -> None:
    with pytest.raises(PodError, match="gpu-milli"):
        podspec_from_pod(ko.pod("p", annotations={"dsan.io/gpu-milli": "5000"}), {})
    with pytest.raises(PodError, match="priority"):
        podspec_from_parts("p", {}, {}, "high", {})


def test_gpu_models_map_to_indices_and_unknown_models_match_nothing() -> None:
    models = {"A100": 0, "V100": 1}
    spec = podspec_from_pod(ko.pod("p", gpus=1, annotations={"dsan.io/gpu-models": "V100|A100"}),
                            models)
    assert spec.gpu_models == (0, 1)
    only_unknown = podspec_from_pod(
        ko.pod("p", gpus=1, annotations={"dsan.io/gpu-models": "H100"}), models)
    assert only_unknown.gpu_models == (NO_MODEL,)


def test_task_type_and_priority() -> None:
    pod = ko.pod("p", annotations={"dsan.io/task-type": "train"})
    pod["spec"]["priority"] = 7
    spec = podspec_from_pod(pod, {})
    assert TASK_TYPES[spec.task_type] == "train" and spec.priority == 7


@pytest.mark.parametrize(
    ("pod", "where"),
    [({"metadata": {}}, "Pod.spec"), ({"spec": {"containers": "x"}}, "containers"),
     ({"spec": {"containers": [{"resources": {"requests": {"cpu": "x"}}}]}}, r"requests\[cpu\]"),
     ([], "expected an object"), ({"metadata": [], "spec": {}}, "metadata"),
     ({"spec": {"containers": [], "overhead": ["cpu"]}}, r"Pod.spec.overhead: expected an object"),
     ({"spec": {"containers": [{"resources": {"limits": "1"}}]}}, r"limits: expected an object")],
)
def test_malformed_pods_name_the_field(pod: object, where: str) -> None:
    with pytest.raises(PodError, match=where):
        podspec_from_pod(pod, {})


def test_pod_key_prefers_uid() -> None:
    assert pod_key(ko.pod("p", uid="u1")) == "u1"
    assert pod_key({"metadata": {"name": "p", "namespace": "n"}}) == "n/p"


def test_absurd_requests_are_rejected_not_turned_into_infinity() -> None:
    with pytest.raises(PodError, match=r"requests\[cpu\]: '1e400' is out of range"):
        podspec_from_pod(ko.pod("p", cpu="1e400"), {})


@pytest.mark.parametrize(
    ("requests", "field"),
    [({"nvidia.com/gpu": "1e999998"}, "nvidia.com/gpu"),
     ({"dsan.io/gpu-milli": "1e999999"}, "dsan.io/gpu-milli"),
     ({"cpu": "1e999998"}, "cpu"), ({"cpu": "1e999999"}, "cpu"),
     ({"memory": "1e300000"}, "memory"), ({"nvidia.com/gpu": "1e300000"}, "nvidia.com/gpu")],
)
def test_huge_exponents_are_refused_in_microseconds_naming_the_field(
        requests: dict[str, str], field: str) -> None:
    """Defects 1-3 of issue 34: `int()` of a million-digit GPU count froze every thread for
    ~31 s, and a CPU request past Decimal's range raised decimal.Overflow (a 500)."""
    t0 = time.process_time()
    with pytest.raises(PodError, match=rf"requests\[{re.escape(field)}\]: .* out of range"):
        podspec_from_parts("p", requests, {}, 0, {})
    with pytest.raises(PodError, match=rf"requests\[{re.escape(field)}\]"):
        podspec_from_pod(ko.pod("p", extra_requests=requests), {})
    assert time.process_time() - t0 < 0.05


@pytest.mark.parametrize(
    ("requests", "priority", "field"),
    [({"memory": "1_000"}, 0, "memory"), ({"cpu": "\u0661"}, 0, "cpu"),
     ({"cpu": "1 "}, 0, "cpu"), ({"cpu": " 1"}, 0, "cpu"), ({"cpu": "-1"}, 0, "cpu"),
     ({"nvidia.com/gpu": "0.5"}, 0, "nvidia.com/gpu"),
     ({"dsan.io/gpu-milli": "250.5"}, 0, "dsan.io/gpu-milli"),
     ({}, 2**63, "priority"), ({}, 2**31, "priority"), ({}, -(2**31) - 1, "priority")],
)
def test_what_kubernetes_refuses_is_refused(requests: dict[str, str], priority: int,
                                            field: str) -> None:
    """Defect 8: quantities outside apimachinery's grammar, and a priority outside int32."""
    with pytest.raises(PodError, match=re.escape(field)):
        podspec_from_parts("p", requests, {}, priority, {})


def test_int32_priorities_and_a_null_priority_are_accepted() -> None:
    assert podspec_from_parts("p", {}, {}, 2**31 - 1, {}).priority == 2**31 - 1
    assert podspec_from_parts("p", {}, {}, -(2**31), {}).priority == -(2**31)
    assert podspec_from_parts("p", {}, {}, None, {}).priority == 0


@pytest.mark.parametrize("share", ["\u0663\u0660\u0660", " 300", "3_00", "300 "])
def test_a_gpu_share_annotation_is_ascii_digits(share: str) -> None:
    with pytest.raises(PodError, match="gpu-milli"):
        podspec_from_pod(ko.pod("p", gpus=1, annotations={"dsan.io/gpu-milli": share}), {})


def test_our_annotations_must_be_strings() -> None:
    pod = ko.pod("p", gpus=1)
    pod["metadata"]["annotations"] = {"dsan.io/gpu-models": ["A100"]}
    with pytest.raises(PodError, match=r"annotations\[dsan.io/gpu-models\]: expected a string"):
        podspec_from_pod(pod, {})


_QUANTITIES = st.sampled_from(["1", "500m", "2Gi", 4, 4.0, "4", True, "-1", "abc", None, "1"])


@st.composite
def _pods(draw: st.DrawFn) -> Any:
    """Pods of a few shapes (so the memo hits), with value types that parse differently
    ("4" vs 4 vs true), missing or malformed parts, and per-pod names."""
    def resources() -> Any:
        kind = draw(st.sampled_from(["requests", "limits", "both", "none", "bad"]))
        req = draw(st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu",
                                                    "dsan.io/gpu-milli"]), _QUANTITIES,
                                   max_size=3))
        return {"requests": {"requests": req}, "limits": {"limits": req},
                "both": {"requests": req, "limits": {"cpu": "8"}}, "none": {},
                "bad": draw(st.sampled_from([[1], "x", 3]))}[kind]

    containers = draw(st.sampled_from([
        "list", "list", "list", "missing", "dict", "str"]))
    spec: dict[str, Any] = {"schedulerName": "dsan-scheduler"}
    if containers == "list":
        spec["containers"] = [{"name": f"c{i}", "resources": resources()}
                              for i in range(draw(st.integers(1, 2)))]
    elif containers != "missing":
        spec["containers"] = {"c": {}} if containers == "dict" else "c"
    if draw(st.booleans()):
        spec["initContainers"] = [{"name": "i", "resources": resources()}]
    if draw(st.booleans()):
        spec["overhead"] = draw(st.sampled_from([{"cpu": "100m"}, {"cpu": 1}, [], None]))
    if draw(st.booleans()):
        spec["priority"] = draw(st.sampled_from([0, 5, True, 1.0, "5"]))
    ann = draw(st.sampled_from([{}, {"dsan.io/gpu-milli": "300"}, {"dsan.io/gpu-milli": 300},
                                {"dsan.io/gpu-models": "A100,V100"}, {"dsan.io/task-type": "web"},
                                None, ["x"]]))
    meta: Any = {"name": f"p{draw(st.integers(0, 3))}", "namespace": "ns", "annotations": ann}
    if draw(st.integers(0, 9)) == 0:
        meta = draw(st.sampled_from([None, ["m"]]))
    return {"metadata": meta, "spec": draw(st.sampled_from([spec, spec, spec, None, ["s"]]))}


@settings(max_examples=300, deadline=None)
@given(pods=st.lists(_pods(), min_size=1, max_size=12))
def test_the_memo_gives_a_fresh_parse_or_its_error_for_every_pod(pods: list[Any]) -> None:
    """PodSpecMemo.get equals podspec_from_pod, spec or error, with earlier shapes
    remembered (the same shape under another name, other value types, bad pods)."""
    memo = PodSpecMemo()
    models = {"A100": 0, "V100": 1}
    for pod in pods * 2:
        try:
            want: Any = podspec_from_pod(pod, models)
        except PodError as exc:
            want = str(exc)
        try:
            got: Any = memo.get(pod, models)
        except PodError as exc:
            got = str(exc)
        assert got == want


def test_the_memo_starts_over_when_the_gpu_models_change() -> None:
    memo = PodSpecMemo()
    pod = ko.pod("p", gpus=1, annotations={"dsan.io/gpu-models": "H100"})
    assert memo.get(pod, {"A100": 0}).gpu_models == (NO_MODEL,)
    assert memo.get(pod, {"A100": 0, "H100": 1}).gpu_models == (1,)


def test_memo_never_keeps_a_spec_parsed_with_models_replaced_meanwhile() -> None:
    """Request threads share the memo: one parsing with the old GPU models while another
    sees the new ones must not leave its old-model spec behind for the new models."""
    from dsan.core.snapshot import PodSpec

    memo = PodSpecMemo()
    old, new = {"A100": 0}, {"A100": 0, "H100": 1}

    def parse_old() -> PodSpec:
        # Another request thread, meanwhile, with the models the informer just replaced.
        memo.lookup("other", "q", new, lambda: PodSpec("q", 0, 0))
        return PodSpec("p", 0, 0, gpu_models=(0,))

    assert memo.lookup("shape", "p", old, parse_old).gpu_models == (0,)
    fresh = memo.lookup("shape", "p", new, lambda: PodSpec("p", 0, 0, gpu_models=(0, 1)))
    assert fresh.gpu_models == (0, 1)
