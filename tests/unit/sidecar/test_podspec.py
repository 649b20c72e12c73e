from __future__ import annotations

from decimal import Decimal

import pytest

from dsan.api.types import TASK_TYPES
from sidecar import kubeobjects as ko
from sidecar.podspec import (
    NO_MODEL,
    PodError,
    parse_quantity,
    pod_key,
    pod_requests,
    podspec_from_parts,
    podspec_from_pod,
)


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
     ([], "expected an object"), ({"metadata": [], "spec": {}}, "metadata")],
)
def test_malformed_pods_name_the_field(pod: object, where: str) -> None:
    with pytest.raises(PodError, match=where):
        podspec_from_pod(pod, {})


def test_pod_key_prefers_uid() -> None:
    assert pod_key(ko.pod("p", uid="u1")) == "u1"
    assert pod_key({"metadata": {"name": "p", "namespace": "n"}}) == "n/p"


def test_absurd_requests_are_rejected_not_turned_into_infinity() -> None:
    with pytest.raises(PodError, match="more than any node"):
        podspec_from_pod(ko.pod("p", cpu="1e400"), {})
