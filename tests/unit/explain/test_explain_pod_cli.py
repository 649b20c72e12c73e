"""``dsan explain pod``: its argument errors, an unreachable sidecar, a sidecar's refusal,
and the table it prints (a sidecar answering for real: tests/integration/sidecar/
test_explain_http.py; a real cluster: tests/e2e/test_dsan_explain.py)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from dsan.cli import main
from dsan.explain.cli import parse_pod
from dsan.explain.report import PodInfo, table

DOC: dict[str, Any] = {
    "task_id": "ns/p", "recommended_node": "a", "runner_up": "b", "policy": "dsan@v1",
    "method": "m", "candidates": 3, "base_value": 1.0, "score": 2.5,
    "reply": {"recommended": 10, "runner_up": 9, "max": 10}, "notes": ["n1"], "context": [],
    "decision_factors": [
        {"feature": f"f{i}", "value": float(i), "unit": "u", "impact": 0.5 - 0.1 * i,
         "runner_up_value": 0.0, "runner_up_impact": 0.1} for i in range(5)],
}


@pytest.fixture
def sidecar() -> Iterator[tuple[str, list[str]]]:
    """A stand-in answering DOC for ns/p, the sidecar's 404 JSON otherwise; the paths asked."""
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            ok = self.path == "/explain/ns/p"
            body = json.dumps(DOC if ok else {"error": "the sidecar has not scored pod x"})
            self.send_response(200 if ok else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *a: Any) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", asked
    srv.shutdown()
    srv.server_close()


def test_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "pod", "no-namespace"]) == 2
    assert "NAMESPACE/NAME" in capsys.readouterr().err
    assert main(["explain", "pod", "ns/p", "--top-k", "0"]) == 2
    with pytest.raises(ValueError):
        parse_pod("a/b/c")


@pytest.mark.parametrize(("extra", "message"), [
    (("--timeout", "0"), "--timeout must be a finite number > 0, got 0.0"),
    (("--timeout", "-1"), "--timeout must be a finite number > 0, got -1.0"),
    (("--timeout", "nan"), "--timeout must be a finite number > 0, got nan"),
    (("--sidecar", "127.0.0.1:8888"), "--sidecar must be an http:// or https:// URL"),
    (("--sidecar", "http://"), "--sidecar must be an http:// or https:// URL"),
])
def test_a_bad_timeout_or_sidecar_address_is_a_bad_argument(
        capsys: pytest.CaptureFixture[str], extra: tuple[str, ...], message: str) -> None:
    # these were blamed on the sidecar ("sent no JSON"), exit 1
    assert main(["explain", "pod", "ns/p", *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dsan explain pod: error: ") and message in err


def test_an_unreachable_sidecar_says_how_to_reach_one(capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert main(["explain", "pod", "ns/p", "--sidecar", f"http://127.0.0.1:{port}"]) == 1
    assert "kubectl -n <namespace> port-forward" in capsys.readouterr().err


def test_the_sidecars_answer_and_refusal(sidecar: tuple[str, list[str]],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    url, asked = sidecar
    assert main(["explain", "pod", "ns/p", "--sidecar", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == DOC
    assert main(["explain", "pod", "ns/q", "--sidecar", url]) == 1
    assert "answered 404: the sidecar has not scored pod x" in capsys.readouterr().err
    assert asked == ["/explain/ns/p", "/explain/ns/q"]


def test_the_table_sums_what_it_leaves_out() -> None:
    out = table(DOC, top_k=2, pod=PodInfo("a", "dsan-scheduler", "dsan@v1"))
    assert "pod ns/p: bound to a by dsan-scheduler, dsan.io/scored-by=dsan@v1" in out
    assert "recommended a (10/10), runner-up b (9/10), 3 candidates" in out
    assert "score 2.5 = base value 1 + impacts +1.5" in out
    assert "(3 more)" in out and "+0.6000" in out  # 0.3 + 0.2 + 0.1
    assert out.rstrip().endswith("note: n1")
