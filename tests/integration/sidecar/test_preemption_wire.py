"""The preempt verb's wire format against kube-scheduler v1.36's own Go types.

scheduler-plugin/pkg/extenderwire json.Marshal's an ExtenderPreemptionArgs (as
HTTPExtender.ProcessPreemption sends it with nodeCacheCapable), the victim pods and the reply
a Go extender would give, into tests/data/extender/ (its Go test fails when they are stale).
Here the sidecar parses those args against a cache holding those pods, and Go decodes the
sidecar's reply into ExtenderPreemptionResult with DisallowUnknownFields and checks it as
kube-scheduler's convertToVictims would. Go is the one of hack/go-test.sh (same flags, so the
build cache of `make go-test` is reused).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from dsan.policies.reclaim import DefaultReclaimer, ProtectingReclaimer, Reclaimer
from dsan.policies.registry import make_scorer
from sidecar.cache import GraphCache
from sidecar.config import SidecarConfig
from sidecar.extender import ExtenderApp
from sidecar.metrics import SidecarMetrics
from sidecar.preemption import Reclamation
from sidecar.scoring import ScoringEngine
from sidecar.service import PolicyInfo, ScoringService
from tests.support import kubeobjects as ko
from tests.support.fakes import FakeClusterView

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = ROOT / "tests" / "data" / "extender"


def golden(name: str) -> Any:
    return json.loads((GOLDEN / name).read_text())


def app(reclaimer: Reclaimer) -> ExtenderApp:
    cache = GraphCache(SidecarConfig())
    view = FakeClusterView(cache, nodes=[ko.node("wire-0", cpu="4"), ko.node("wire-1", cpu="4")],
                           pods=golden("victim_pods.json"))
    view.start()
    eng = ScoringEngine(cache, make_scorer("k8s-default"), make_scorer("fgd"), 60)
    svc = ScoringService(cache, view, eng, SidecarMetrics(),
                         PolicyInfo("k8s-default", "k8s-default", "fgd"))
    return ExtenderApp(svc, Reclamation(cache, reclaimer))


def answer(reclaimer: Reclaimer) -> bytes:
    status, out = app(reclaimer).preempt((GOLDEN / "preemption_args.json").read_bytes())
    assert status == 200, out
    return out


def test_the_go_args_parse_and_the_reply_is_what_a_go_extender_would_send() -> None:
    args = golden("preemption_args.json")
    # The shape the Go types give (no JSON tags: capitalised keys; nil map -> null).
    assert args["NodeNameToVictims"] is None and set(args["NodeNameToMetaVictims"]) == {
        "wire-0", "wire-1"}
    assert json.loads(answer(ProtectingReclaimer())) == golden("preemption_result.json")
    assert json.loads(answer(DefaultReclaimer())) == {"NodeNameToMetaVictims": {
        "wire-0": {"Pods": [{"UID": "uid-web"}], "NumPDBViolations": 0}}}


def _go_decode(reply: bytes, tmp_path: Path) -> str:
    go = shutil.which(os.environ.get("GO", "go"))
    if go is None:  # a checkout without `make deps`; under CI tests/conftest.py fails this skip
        pytest.skip("no Go toolchain (hack/deps.sh installs it)")
    path = tmp_path / "reply.json"
    path.write_bytes(reply)
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-trimpath -mod=readonly",
           "DSAN_PREEMPT_REPLY": str(path)}
    proc = subprocess.run([go, "test", "-count=1", "-v", "-run", "TestSidecarReply",
                           "./pkg/extenderwire"], cwd=ROOT / "scheduler-plugin", env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.parametrize("reclaimer", [ProtectingReclaimer(), DefaultReclaimer()],
                         ids=lambda r: r.name)
def test_go_decodes_the_sidecars_reply_strictly(reclaimer: Reclaimer, tmp_path: Path) -> None:
    out = _go_decode(answer(reclaimer), tmp_path)
    node = "wire-1" if isinstance(reclaimer, ProtectingReclaimer) else "wire-0"
    assert f"decoded node={node} victims=" in out, out
    assert "--- PASS: TestSidecarReply" in out, out


def test_go_decodes_an_empty_reply_and_refuses_a_stray_field(tmp_path: Path) -> None:
    """The reply "evict nothing" is an empty map; the strict decoder is not a rubber stamp."""
    out = _go_decode(b'{"NodeNameToMetaVictims":{}}', tmp_path)
    assert "--- PASS: TestSidecarReply" in out and "decoded node=" not in out
    with pytest.raises(AssertionError, match="unknown field"):
        _go_decode(b'{"NodeNameToMetaVictims":{},"Error":""}', tmp_path)
