"""Availability of the extender's HTTP server under load: 50 keep-alive clients and bursts of
200 new connections, against `dsan serve` and against the no-op server in the same run.

    .venv/bin/python -m bench.http_load --seconds 30 --out docs/results/http_load.md

Each server runs as a process of its own: `dsan serve` (``--policy``, fgd by default) synced
from a stand-in apiserver (tests/support/fakeapiserver.py) holding ``--nodes`` nodes, and the
no-op server: the same ``ExtenderServer`` (same backlog, framing and reply encoding) with
``NoopExtenderApp`` (``bench/latency_server.py``), which parses the request and answers every
score 0. The load generator
(this process, asyncio) keeps ``--clients`` keep-alive connections busy back to back, each
sending ExtenderArgs with ``--names`` candidate names, and every ``--burst-every`` seconds
opens ``--burst`` new connections at once, each sending one request with ``Connection:
close`` (from a second process, so that the keep-alive traffic's event loop does not delay
them). The servers alternate in slices (no-op, dsan, no-op, dsan, ...) so that both see the
same machine. Reported per server: requests answered 200, errors (any other status, a
timeout at 10 s), resets (a connection reset or refused), and latency percentiles of the
keep-alive requests and of the burst requests (connect to last byte).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: repo importable

from tests.support import kubeobjects as ko
from tests.support.fakeapiserver import FakeApiServer

TIMEOUT_S = 10.0


def listen_drops() -> int:
    """The kernel's count of connections dropped at a full listen queue (ListenDrops, all
    sockets of the machine), 0 where /proc/net/netstat is absent."""
    try:
        lines = Path("/proc/net/netstat").read_text().splitlines()
    except OSError:
        return 0
    for head, values in zip(lines[::2], lines[1::2], strict=False):
        names, nums = head.split(), values.split()
        if "ListenDrops" in names:
            return int(nums[names.index("ListenDrops")])
    return 0


@dataclass
class Tally:
    ok: int = 0
    errors: int = 0
    resets: int = 0
    listen_drops: int = 0
    keepalive_s: list[float] = field(default_factory=list)
    burst_s: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)

    def pct(self, which: list[float], q: float) -> float:
        if not which:
            return float("nan")
        s = sorted(which)
        return s[min(len(s) - 1, int(q * len(s)))]


def request_bytes(names: int, close: bool) -> bytes:
    body = json.dumps({"Pod": ko.pod("load", cpu="1", gpus=1), "Nodes": None,
                       "NodeNames": [f"node-{i:05d}" for i in range(names)]}).encode()
    head = (f"POST /dsan/prioritize HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            + ("Connection: close\r\n" if close else "") + "\r\n")
    return head.encode() + body


async def read_reply(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    await reader.readexactly(length)
    return status


def _count(tally: Tally, exc: BaseException) -> None:
    if isinstance(exc, ConnectionResetError | ConnectionRefusedError | BrokenPipeError
                  | asyncio.IncompleteReadError):
        tally.resets += 1
    else:
        tally.errors += 1


async def keepalive_client(port: int, data: bytes, until: float, tally: Tally) -> None:
    conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
    while time.monotonic() < until:
        t0 = time.perf_counter()
        try:
            if conn is None:
                conn = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port),
                                              TIMEOUT_S)
            reader, writer = conn
            writer.write(data)
            status = await asyncio.wait_for(read_reply(reader), TIMEOUT_S)
        except (OSError, asyncio.IncompleteReadError, TimeoutError) as exc:
            _count(tally, exc)
            if conn is not None:
                conn[1].close()
            conn = None
            continue
        tally.statuses[status] = tally.statuses.get(status, 0) + 1
        if status == 200:
            tally.ok += 1
            tally.keepalive_s.append(time.perf_counter() - t0)
        else:
            tally.errors += 1
    if conn is not None:
        conn[1].close()


async def one_shot(port: int, data: bytes, tally: Tally) -> None:
    t0 = time.perf_counter()
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port),
                                                TIMEOUT_S)
        writer.write(data)
        status = await asyncio.wait_for(read_reply(reader), TIMEOUT_S)
        writer.close()
    except (OSError, asyncio.IncompleteReadError, TimeoutError) as exc:
        _count(tally, exc)
        return
    tally.statuses[status] = tally.statuses.get(status, 0) + 1
    if status == 200:
        tally.ok += 1
        tally.burst_s.append(time.perf_counter() - t0)
    else:
        tally.errors += 1


async def keepalive_load(port: int, seconds: float, args: argparse.Namespace,
                         tally: Tally) -> None:
    until = time.monotonic() + seconds
    data = request_bytes(args.names, close=False)
    await asyncio.gather(*(keepalive_client(port, data, until, tally)
                           for _ in range(args.clients)))


async def burst_load(port: int, seconds: float, args: argparse.Namespace, tally: Tally) -> None:
    until = time.monotonic() + seconds
    data = request_bytes(args.names, close=True)
    bursts = []
    while time.monotonic() < until:
        bursts.append(asyncio.gather(*(one_shot(port, data, tally) for _ in range(args.burst))))
        await asyncio.sleep(args.burst_every)
    await asyncio.gather(*bursts)


def _bursts_in_child(port: int, seconds: float, args: argparse.Namespace, out: Any) -> None:
    tally = Tally()
    asyncio.run(burst_load(port, seconds, args, tally))
    out.send(tally)


def load(port: int, seconds: float, args: argparse.Namespace, tally: Tally) -> None:
    """Keep-alive clients here, bursts from a process of their own: one event loop busy
    with the keep-alive traffic would delay the burst's connections itself."""
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_bursts_in_child, args=(port, seconds, args, send))
    child.start()
    asyncio.run(keepalive_load(port, seconds, args, tally))
    bursts: Tally = recv.recv()
    child.join(30)
    tally.ok += bursts.ok
    tally.errors += bursts.errors
    tally.resets += bursts.resets
    tally.burst_s += bursts.burst_s
    for k, v in bursts.statuses.items():
        tally.statuses[k] = tally.statuses.get(k, 0) + v


NOOP = """
import signal, sys, threading
sys.path.insert(0, "bench")
from latency_server import NoopExtenderApp
from sidecar.config import SidecarConfig
from sidecar.extender import ExtenderServer
cfg = SidecarConfig()
srv = ExtenderServer("127.0.0.1", int(sys.argv[1]), cfg.url_prefix, NoopExtenderApp(),
                     cfg.max_body_bytes, backlog=cfg.http_backlog)
srv.start()
print("ready", flush=True)
signal.sigwait({signal.SIGTERM})
srv.stop()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(port: int, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                if s.recv(64).startswith(b"HTTP/1.1 200"):
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{what} not ready in 120 s")


def render(args: argparse.Namespace, tallies: dict[str, Tally], load_avg: tuple[float, ...],
           rss_mib: float) -> str:
    def ms(v: float) -> str:
        return f"{v * 1e3:.1f}"

    cmd = ("bench/http_load.py " + " ".join(sys.argv[1:])).replace(" --out", " \\\n    --out")
    lines = [
        "# The extender's HTTP server under load: keep-alive clients and connection bursts",
        "",
        f"`.venv/bin/python {cmd}`",
        "",
        f"{args.clients} keep-alive clients back to back and, every {args.burst_every:g} s, "
        f"a burst of {args.burst} new connections (one request each, `Connection: close`); "
        f"{args.seconds:g} s per server in {args.slices} alternating slices; ExtenderArgs of "
        f"{args.names} candidate names; `dsan serve --policy {args.policy}` synced from a "
        f"stand-in apiserver with {args.nodes} nodes (tests/support/fakeapiserver.py), beside "
        "the no-op server (the same `ExtenderServer`, `NoopExtenderApp`). Load average "
        f"before/after: {load_avg[0]:.1f} / {load_avg[1]:.1f} (2 CPUs, shared); "
        f"`dsan serve` RSS at the end {rss_mib:.0f} MiB.",
        "",
        "| server | answered 200 | req/s | errors | resets | listen drops | "
        "keep-alive p50 / p99 ms | burst p50 / p99 / max ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, t in tallies.items():
        lines.append(
            f"| {name} | {t.ok:,} | {t.ok / args.seconds:,.0f} | {t.errors} | {t.resets} | "
            f"{t.listen_drops} | "
            f"{ms(t.pct(t.keepalive_s, 0.5))} / {ms(t.pct(t.keepalive_s, 0.99))} | "
            f"{ms(t.pct(t.burst_s, 0.5))} / {ms(t.pct(t.burst_s, 0.99))} / "
            f"{ms(max(t.burst_s, default=float('nan')))} |")
    lines += ["", "Latency is the client's: with the clients back to back, a request waits "
              "behind the others in the server, so p99 is mostly queueing (clients / "
              "throughput), and the burst's connections wait behind the keep-alive traffic. "
              "Listen drops: the kernel's ListenDrops counter over the server's slices "
              "(connections dropped at a full listen queue, then retried by the client after "
              "~1 s; the machine's, so another process's would count too).", ""]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=30.0, help="per server")
    ap.add_argument("--slices", type=int, default=2, help="alternating slices per server")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--burst", type=int, default=200)
    ap.add_argument("--burst-every", type=float, default=1.0)
    ap.add_argument("--names", type=int, default=100, help="candidate names per request")
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--policy", default="fgd")
    ap.add_argument("--out", type=Path, default=None, help="write the markdown table here")
    args = ap.parse_args()
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    tmp = Path(tempfile.mkdtemp(prefix="dsan-http-load-"))
    procs: list[subprocess.Popen[bytes]] = []
    load_before = os.getloadavg()
    with FakeApiServer(nodes=ko.cluster(args.nodes)) as api:
        try:
            dsan_port, noop_port = free_port(), free_port()
            log = (tmp / "serve.log").open("wb")
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "dsan.cli", "serve",
                 f"--kubeconfig={api.write_kubeconfig(tmp / 'kubeconfig')}",
                 f"--http-port={dsan_port}", "--grpc-port=-1", f"--policy={args.policy}"],
                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=repo))
            procs.append(subprocess.Popen([sys.executable, "-c", NOOP, str(noop_port)],
                                          stdout=subprocess.DEVNULL, env=env, cwd=repo))
            wait_ready(dsan_port, procs[0], "dsan serve")
            wait_ready(noop_port, procs[1], "the no-op server")
            tallies = {"no-op": Tally(), f"dsan serve ({args.policy})": Tally()}
            ports = dict(zip(tallies, (noop_port, dsan_port), strict=True))
            for _ in range(args.slices):
                for name, tally in tallies.items():
                    drops = listen_drops()
                    load(ports[name], args.seconds / args.slices, args, tally)
                    tally.listen_drops += listen_drops() - drops
            with open(f"/proc/{procs[0].pid}/status") as f:
                rss_kib = next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))
        finally:
            for p in procs:
                p.send_signal(signal.SIGTERM)
            for p in procs:
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()
    text = render(args, tallies, (load_before[0], os.getloadavg()[0]), rss_kib / 1024)
    print(text)
    if args.out is not None:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
