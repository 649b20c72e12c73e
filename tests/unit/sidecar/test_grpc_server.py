from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsan.api.gen.scorer_v1 import scorer_pb2
from sidecar.grpc_server import ScoreHandler
from sidecar.podspec import PodError, podspec_from_parts
from tests.support import kubeobjects as ko
from tests.unit.sidecar.test_extender_app import service

quantities = st.sampled_from(["1", "500m", "2", "16Gi", "1000", "x", "-1", "0.5"])
annotation_values = st.sampled_from(["500", "1000", "0", "A100", "T4,A100", "training", "?"])


@settings(max_examples=150, deadline=None)
@given(pods=st.lists(st.tuples(
    st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "dsan.io/gpu-milli"]),
                    quantities, max_size=3),
    st.dictionaries(st.sampled_from(["dsan.io/gpu-milli", "dsan.io/gpu-models",
                                     "dsan.io/task-type", "other"]), annotation_values,
                    max_size=2),
    st.integers(-5, 5), st.sampled_from(["a", "b"])), min_size=1, max_size=8))
def test_memoised_pod_specs_equal_a_fresh_parse(
        pods: list[tuple[dict[str, str], dict[str, str], int, str]]) -> None:
    svc = service()
    handler = ScoreHandler(svc)
    for requests, annots, priority, name in pods:
        pod = scorer_pb2.Pod(name=name, namespace="ns", requests=requests,
                             annotations=annots, priority=priority)
        try:  # as the handler parsed every request before the memo
            want = podspec_from_parts(name=f"ns/{name}", requests=dict(pod.requests),
                                      annotations=dict(pod.annotations), priority=priority,
                                      gpu_models=svc.cache.models)
        except PodError as exc:
            with pytest.raises(PodError, match=re.escape(str(exc))):
                handler._podspec(pod)
            continue
        assert handler._podspec(pod) == want


def test_a_new_gpu_model_invalidates_the_memo() -> None:
    svc = service()
    handler = ScoreHandler(svc)
    pod = scorer_pb2.Pod(name="p", requests={"nvidia.com/gpu": "1"},
                         annotations={"dsan.io/gpu-models": "H100"})
    before = handler._podspec(pod)
    svc.cache.upsert_node(ko.node("h", cpu="8", gpus=1, model="H100"))
    after = handler._podspec(pod)
    assert after.gpu_models != before.gpu_models
    assert after.gpu_models == (svc.cache.models["H100"],)
