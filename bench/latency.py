"""Score latency of the sidecar, judged against the serving budgets, optionally side by side with
another checkout of this repository in the same run.

    .venv/bin/python bench/latency.py --out docs/results/latency.md [--base ../other-checkout]

Rows, per size (100, 1,000, 5,000 candidate nodes) and policy (dsan, fgd, k8s-default):

* **in process**: ``ScoringService.score``, the call a server makes per request (snapshot,
  candidate rows, feasibility, policy, normalise, tie-break; the winner's assumption deferred),
  each call followed off the clock by the settle the servers run after a reply;
* **gRPC**: ``Score`` from a Go client with the DSANScore plugin's stubs and settings
  (``scheduler-plugin/cmd/scorebench``), beside a no-op servicer on the same server stack;
* **HTTP**: ``POST /dsan/prioritize`` from Go's net/http (kube-scheduler's extender client),
  beside a no-op extender in the same server;
* **filter** (``--filter``): ``ScoringEngine.filter`` in process, what the opt-in ``filter``
  verb and gRPC ``Filter`` run per pod (feasibility and the policy's node quota), for an
  elastic pod over every node of the world.

The clients pause ``--gap-ms`` (2 ms) between calls, off the clock: kube-scheduler's own
work per pod is 2.2-2.8 ms on this machine (``docs/results/throughput.md``), so in a cluster
the settle after a reply (the assumption, the scorer's preparation for the next pod) runs
before the next call; ``--gap-ms 0`` sends back to back, which puts the settle on the next
call's clock.

Placement as the chart's latency deployment (``sidecar.exclusiveCpus: 1``): every serving
process on the last CPU, the Go client on the others (``bench/pinning.py``). Every world is
its own process (``bench/latency_server.py``), one per tree, policy and size; the rows of one
cell (API, size) take turns in ``--chunks`` chunks so that this machine's drift in speed
falls on every row alike, and p50/p99 are over all calls. Budgets: DSAN in process p99 <= 250
us at 1,000 nodes and <= 1 ms at 5,000; gRPC p99 <= 1 ms at 1,000 nodes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PLUGIN = ROOT / "scheduler-plugin"
sys.path.insert(0, str(HERE))

from pinning import Placement, set_process_affinity  # noqa: E402

#: (API, size) -> budget in seconds on DSAN's p99.
BUDGETS = {("inprocess", 1000): 250e-6, ("inprocess", 5000): 1e-3, ("grpc", 1000): 1e-3}


@dataclass
class Server:
    """One world in its own process."""

    tree: str
    policy: str
    n: int
    proc: subprocess.Popen[str]
    http: int
    grpc: int
    pid: int

    @classmethod
    def start(cls, tree: str, root: Path, python: str, policy: str, n: int) -> Server:
        env = {**os.environ, "PYTHONPATH": str(root)}
        proc = subprocess.Popen(
            [python, str(HERE / "latency_server.py"), "--nodes", str(n), "--policy", policy],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=root, env=env)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{tree}:{policy} at {n} nodes did not start")
        info = json.loads(line)
        return cls(tree, policy, n, proc, info["http"], info["grpc"], info["pid"])

    @property
    def label(self) -> str:
        return self.policy if self.policy == "noop" else f"{self.tree}:{self.policy}"

    def inprocess(self, k: int) -> tuple[list[int], list[int]]:
        stdin, stdout = self.proc.stdin, self.proc.stdout
        assert stdin is not None and stdout is not None
        stdin.write(f"inprocess {k}\n")
        stdin.flush()
        out = json.loads(stdout.readline())
        return out["ns"], out["settle_ns"]

    def filter(self, k: int) -> list[int]:
        stdin, stdout = self.proc.stdin, self.proc.stdout
        assert stdin is not None and stdout is not None
        stdin.write(f"filter {k}\n")
        stdin.flush()
        return list(json.loads(stdout.readline())["ns"])

    def stop(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@dataclass
class Row:
    api: str
    n: int
    label: str
    ns: list[int] = field(default_factory=list)
    settle_ns: list[int] = field(default_factory=list)

    def q(self, p: float) -> float:
        return float(np.percentile(self.ns, p)) / 1e9


def go_client() -> Path:
    """The scorebench binary, built once per hash of its sources into ~/.cache/dsan/bin."""
    srcs = [PLUGIN / "go.mod", PLUGIN / "go.sum", PLUGIN / "cmd/scorebench/main.go",
            *sorted((PLUGIN / "pkg/scoreclient").glob("*.go")),
            *sorted((PLUGIN / "gen").rglob("*.go"))]
    digest = hashlib.sha1(b"".join(p.read_bytes() for p in srcs)).hexdigest()[:12]
    exe = Path.home() / ".cache/dsan/bin" / f"scorebench-{digest}" / "scorebench"
    if not exe.exists():
        tmp = exe.with_suffix(".tmp")
        tmp.parent.mkdir(parents=True, exist_ok=True)
        go = shutil.which("go") or "go"
        subprocess.run([go, "build", "-trimpath", "-o", str(tmp), "./cmd/scorebench"],
                       cwd=PLUGIN, check=True, env={**os.environ, "CGO_ENABLED": "0"})
        tmp.rename(exe)
    return exe


def go_chunk(exe: Path, kind: str, port: int, stdin: str, calls: int, cpus: set[int],
             gap_ms: float) -> list[int]:
    args = [str(exe), "-kind", kind, "-addr", f"127.0.0.1:{port}", "-rounds", str(calls),
            "-gap", f"{gap_ms}ms"]
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            preexec_fn=lambda: os.sched_setaffinity(0, cpus))
    out, _ = proc.communicate(stdin, timeout=600)
    if proc.returncode:
        raise RuntimeError(f"scorebench {kind} :{port} failed ({proc.returncode})")
    ns: list[int] = json.loads(out)["ns"]
    return ns


def measure_size(n: int, trees: dict[str, tuple[Path, str]], policies: list[str],
                 args: argparse.Namespace, exe: Path, place: Placement,
                 log: TextIO) -> list[Row]:
    servers: list[Server] = []
    try:
        for tree, (root, python) in trees.items():
            for policy in policies:
                servers.append(Server.start(tree, root, python, policy, n))
        new_root, new_python = trees["new"]
        servers.append(Server.start("new", new_root, new_python, "noop", n))
        for s in servers:  # every serving thread on the server CPU (grpcio's threads too)
            set_process_affinity(s.pid, set(place.server))
        client_cpus = set(place.callers)
        stdin = _client_input(n)
        rows: dict[tuple[str, str], Row] = {}
        scorers = [s for s in servers if s.policy != "noop"]
        per = max(1, args.calls // args.chunks)
        for chunk in range(args.chunks):
            order = scorers if chunk % 2 == 0 else scorers[::-1]
            for s in order:  # in process: the server process times its own calls
                ns, settle = s.inprocess(per)
                r = rows.setdefault(("inprocess", s.label), Row("inprocess", n, s.label))
                r.ns += ns
                r.settle_ns += settle
                if args.filter:
                    f = rows.setdefault(("filter", s.label), Row("filter", n, s.label))
                    f.ns += s.filter(per)
            for api in ("grpc", "http"):
                for s in (servers if chunk % 2 == 0 else servers[::-1]):
                    port = s.grpc if api == "grpc" else s.http
                    r = rows.setdefault((api, s.label), Row(api, n, s.label))
                    try:
                        r.ns += go_chunk(exe, api, port, stdin, per, client_cpus, args.gap_ms)
                    except RuntimeError as exc:
                        raise RuntimeError(f"{s.label} at {n} nodes: {exc}") from None
            print(f"{n} nodes: chunk {chunk + 1}/{args.chunks}", file=log, flush=True)
        return list(rows.values())
    finally:
        for s in servers:
            s.stop()


def _client_input(n: int) -> str:
    """The Go client's requests: the same pods and candidate lists as bench/world.py."""
    from world import VARIANTS, ko, pod

    names = [nd["metadata"]["name"] for nd in ko.cluster(n)]
    cands = [names[k:] + names[:k] for k in ((i * 7919) % n for i in range(VARIANTS))]
    pods = [pod(i) for i in range(VARIANTS)]
    return json.dumps({
        "pods": [{"name": p["metadata"]["name"], "namespace": "default",
                  "uid": p["metadata"]["uid"],
                  "requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
                  "annotations": p["metadata"]["annotations"]} for p in pods],
        "node_lists": cands,
        "bodies": [json.dumps({"Pod": p, "Nodes": None, "NodeNames": c})
                   for p, c in zip(pods, cands, strict=True)],
    })


def report(rows: list[Row], args: argparse.Namespace, started: str, load: tuple[float, float]
           ) -> str:
    us = 1e6
    lines = [
        "# Score latency of the sidecar",
        "",
        f"Measured by `bench/latency.py --sizes {args.sizes} --policies {args.policies} "
        f"--calls {args.calls} --chunks {args.chunks} --gap-ms {args.gap_ms:g}"
        + (" --filter" if args.filter else "")
        + (" --base BASE" if args.base else "") + f"` ({started}, Python "
        f"{sys.version.split()[0]}, {os.cpu_count()} CPUs, 1-minute load average "
        f"{load[0]:.1f} before and {load[1]:.1f} after, counting the benchmark itself). "
        "Every serving process on the last CPU, the Go client on the other (the chart's "
        "`sidecar.exclusiveCpus: 1`); the rows of one cell take turns chunk by chunk. Times in "
        "microseconds, p50 / p99 as the caller sees them; in process, `settle` is the mean of "
        "the post-reply work (the assumption and the scorer's preparation for the next pod) "
        "that the servers run after each reply.",
        "",
    ]
    if args.base:
        lines += ["`new:` is this tree; `base:` the checkout given with `--base`, served by "
                  "its own code in its own processes, measured in the same run.", ""]
    lines += ["## Budgets", "", "| cell | budget | row | p99 | verdict |", "|---|---|---|---|---|"]
    for (api, n), budget in BUDGETS.items():
        for r in rows:
            if r.api == api and r.n == n and r.label.endswith(":dsan"):
                p99 = r.q(99)
                lines.append(f"| {api}, {n} nodes | p99 <= {budget * us:,.0f} us | {r.label} "
                             f"| {p99 * us:,.0f} us | {'meets' if p99 <= budget else 'misses'} |")
    for api in ("inprocess", "grpc", "http", "filter"):
        sizes = sorted({r.n for r in rows if r.api == api})
        if not sizes:
            continue
        labels = sorted({r.label for r in rows if r.api == api},
                        key=lambda x: (x != "noop", x.split(":")[-1], x))
        pace = (f"calls {args.gap_ms:g} ms apart" if args.gap_ms > 0 else "back to back")
        title = {"inprocess": "In process (`ScoringService.score`)",
                 "grpc": f"gRPC `Score`, Go client (the DSANScore plugin's stubs), {pace}",
                 "http": f"HTTP extender, Go net/http client, {pace}",
                 "filter": "Filter in process (`ScoringEngine.filter`, an elastic pod, every "
                           "node)"}[api]
        lines += ["", f"## {title}", "", "| row | " + " | ".join(
            f"{n} nodes" for n in sizes) + " |", "|---|" + "---|" * len(sizes)]
        for label in labels:
            cells = []
            for n in sizes:
                got = next((x for x in rows if x.api == api and x.n == n and x.label == label),
                           None)
                if got is None:
                    cells.append("")
                    continue
                cell = f"{got.q(50) * us:,.0f} / {got.q(99) * us:,.0f}"
                if got.settle_ns:
                    cell += f" (settle {np.mean(got.settle_ns) / 1e3:,.0f})"
                cells.append(cell)
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        if args.base:
            lines += ["", "p99 of `new:` over `base:`: " + ", ".join(
                f"{pol} at {n}: {_ratio(rows, api, n, pol):.2f}x"
                for n in sizes for pol in args.policies.split(",")
                if _ratio(rows, api, n, pol) == _ratio(rows, api, n, pol)) + "."]
    return "\n".join(lines) + "\n"


def _ratio(rows: list[Row], api: str, n: int, policy: str) -> float:
    got = {r.label: r for r in rows if r.api == api and r.n == n}
    a, b = got.get(f"new:{policy}"), got.get(f"base:{policy}")
    return a.q(99) / b.q(99) if a and b else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="100,1000,5000")
    ap.add_argument("--policies", default="dsan,fgd,k8s-default")
    ap.add_argument("--calls", type=int, default=2000, help="calls per row and cell")
    ap.add_argument("--chunks", type=int, default=8)
    ap.add_argument("--gap-ms", type=float, default=2.0,
                    help="pause between a client's calls, off the clock (0: back to back)")
    ap.add_argument("--python", default=sys.executable, help="this tree's interpreter")
    ap.add_argument("--base", type=Path, default=None, help="another checkout, side by side")
    ap.add_argument("--base-python", default=sys.executable)
    ap.add_argument("--filter", action="store_true", help="also time the filter path")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    trees = {"new": (ROOT, args.python)}
    if args.base:
        trees["base"] = (args.base.resolve(), args.base_python)
    exe = go_client()
    place = Placement.split()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load0 = os.getloadavg()[0]
    rows: list[Row] = []
    for n in (int(s) for s in args.sizes.split(",")):
        rows += measure_size(n, trees, args.policies.split(","), args, exe, place, sys.stderr)
    text = report(rows, args, started, (load0, os.getloadavg()[0]))
    print(text)
    if args.out:
        args.out.write_text(text)
    if args.json:
        args.json.write_text(json.dumps([r.__dict__ for r in rows]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
