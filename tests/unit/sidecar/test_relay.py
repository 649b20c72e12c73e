"""The Score relay's framing and error handling (sidecar/relay.py), on a real unix socket with
a fake handler; tests/integration/sidecar/test_servers.py runs the real handler behind the
real score-gateway."""

from __future__ import annotations

import os
import socket
import struct
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sidecar.relay import NODE_TABLE, READY, SCORE, RelayServer
from sidecar.service import RequestError

HDR = struct.Struct("<IB")


class FakeHandler:
    def __init__(self) -> None:
        self.is_ready = True
        self.after = 0
        #: What ``waiting()`` said after each Score reply.
        self.waited: list[bool | None] = []

    def score_bytes(self, raw: bytes) -> bytes:
        if raw == b"bad":
            raise RequestError("bad_protobuf", "request is not a dsan.scorer.v1.ScoreRequest")
        if raw == b"bug":
            raise ZeroDivisionError("oops")
        return b"scored:" + raw

    def node_table_bytes(self, raw: bytes) -> bytes:
        return b"table"

    def ready(self) -> bool:
        return self.is_ready

    def after_reply(self, waiting: Callable[[], bool] | None = None) -> None:
        self.after += 1
        self.waited.append(None if waiting is None else waiting())
        if self.after == 1 and getattr(self, "fail_after", False):
            raise RuntimeError("settle failed")


@pytest.fixture
def relay() -> Iterator[tuple[RelayServer, FakeHandler]]:
    d = tempfile.mkdtemp(prefix="dsan-relay-")
    h = FakeHandler()
    srv = RelayServer(f"{d}/r.sock", h, max_frame_bytes=1024)
    srv.start()
    yield srv, h
    srv.stop()
    os.rmdir(d)


def eventually(probe: Callable[[], bool], timeout: float = 5.0) -> None:
    """The relay's post-reply work runs after the reply is out: wait for it."""
    deadline = time.monotonic() + timeout
    while not probe():
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.005)


def connect(srv: RelayServer) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(srv.path)
    return s


def call(s: socket.socket, kind: int, payload: bytes) -> tuple[int, bytes]:
    s.sendall(HDR.pack(len(payload), kind) + payload)
    return read_reply(s)


def read_reply(s: socket.socket) -> tuple[int, bytes]:
    hdr = s.recv(HDR.size, socket.MSG_WAITALL)
    assert len(hdr) == HDR.size, "connection closed instead of a reply"
    n, code = HDR.unpack(hdr)
    body = s.recv(n, socket.MSG_WAITALL) if n else b""
    return code, body


def test_methods_answer_on_one_connection_and_settle_after_each_score(
        relay: tuple[RelayServer, FakeHandler]) -> None:
    srv, h = relay
    with connect(srv) as s:
        assert call(s, SCORE, b"abc") == (0, b"scored:abc")
        assert call(s, NODE_TABLE, b"") == (0, b"table")
        assert call(s, READY, b"") == (0, b"")
        h.is_ready = False
        assert call(s, READY, b"") == (14, b"the sidecar's informers have not synced yet")
        assert call(s, SCORE, b"x" * 1000)[1] == b"scored:" + b"x" * 1000
    eventually(lambda: h.after == 2)  # after each answered Score only


def test_refusals_and_bugs_are_error_frames_and_the_connection_keeps_serving(
        relay: tuple[RelayServer, FakeHandler]) -> None:
    srv, h = relay
    with connect(srv) as s:
        assert call(s, SCORE, b"bad") == (3, b"request is not a dsan.scorer.v1.ScoreRequest")
        code, body = call(s, SCORE, b"bug")
        assert code == 13 and body.startswith(b"internal error: ZeroDivisionError")
        assert call(s, 99, b"?") == (12, b"unknown relay frame kind 99")
        assert call(s, SCORE, b"ok") == (0, b"scored:ok")
    eventually(lambda: h.after == 1)
    time.sleep(0.05)
    assert h.after == 1  # the refused calls ran none


def test_an_oversized_frame_is_refused_then_its_connection_closed(
        relay: tuple[RelayServer, FakeHandler]) -> None:
    srv, _ = relay
    with connect(srv) as s:
        s.sendall(HDR.pack(1_000_000, SCORE))
        code, body = read_reply(s)
        assert code == 8 and b"over the limit of 1024" in body
        assert s.recv(1) == b""  # closed: the rest of the frame cannot be skipped cheaply
    with connect(srv) as s:  # other connections are unaffected
        assert call(s, SCORE, b"a") == (0, b"scored:a")


def test_a_frame_cut_short_or_garbage_never_stops_the_server(
        relay: tuple[RelayServer, FakeHandler]) -> None:
    srv, _ = relay
    for junk in (b"\x05", HDR.pack(10, SCORE) + b"abc", os.urandom(3)):
        with connect(srv) as s:
            s.sendall(junk)
    with connect(srv) as s:
        assert call(s, SCORE, b"still") == (0, b"scored:still")


def test_socket_path_rules() -> None:
    d = Path(tempfile.mkdtemp(prefix="dsan-relay-"))
    h = FakeHandler()
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(d / "s.sock"))
    stale.close()  # a socket file nobody listens on: left over, replaced
    srv = RelayServer(str(d / "s.sock"), h, 1024)
    srv.start()
    with pytest.raises(OSError, match="another process is serving"):
        RelayServer(str(d / "s.sock"), h, 1024)
    assert oct((d / "s.sock").stat().st_mode & 0o777) == "0o660"
    srv.stop()
    assert not (d / "s.sock").exists()
    (d / "file").write_text("not a socket")
    with pytest.raises(OSError, match="is not a socket"):
        RelayServer(str(d / "file"), h, 1024)
    with pytest.raises(OSError, match="cannot listen"):
        RelayServer(str(d / "missing-dir" / "s.sock"), h, 1024)
    (d / "file").unlink()
    d.rmdir()


def test_stop_ends_open_connections(relay: tuple[RelayServer, FakeHandler]) -> None:
    srv, _ = relay
    s = connect(srv)
    assert call(s, SCORE, b"a")[0] == 0
    srv.stop()
    assert s.recv(1) == b""
    s.close()
    eventually(lambda: srv.connections == 0)


def test_connections_past_the_limit_are_closed_and_the_others_keep_serving() -> None:
    d = tempfile.mkdtemp(prefix="dsan-relay-")
    srv = RelayServer(f"{d}/r.sock", FakeHandler(), 1024, max_connections=2)
    srv.start()
    a, b = connect(srv), connect(srv)
    assert call(a, SCORE, b"a")[0] == 0 and call(b, SCORE, b"b")[0] == 0
    c = connect(srv)
    assert c.recv(1) == b""  # closed at accept
    eventually(lambda: srv.refused == 1)
    assert call(a, SCORE, b"still")[1] == b"scored:still"
    a.close()
    eventually(lambda: srv.connections == 1)
    with connect(srv) as again:  # a slot came free
        assert call(again, SCORE, b"x") == (0, b"scored:x")
    for s in (b, c):
        s.close()
    srv.stop()
    os.rmdir(d)


def test_a_failing_post_reply_step_does_not_end_the_connection(
        relay: tuple[RelayServer, FakeHandler]) -> None:
    srv, h = relay
    h.fail_after = True  # type: ignore[attr-defined]
    with connect(srv) as s:
        assert call(s, SCORE, b"a") == (0, b"scored:a")
        assert call(s, SCORE, b"b") == (0, b"scored:b")
    eventually(lambda: h.after == 2)


def test_the_post_reply_step_is_told_whether_the_next_frame_is_already_there(
        relay: tuple[RelayServer, FakeHandler]) -> None:
    """Two Score frames sent at once: after the first reply the second is already in the
    socket (the settle then skips its replay); after the second, nothing is."""
    srv, h = relay
    with connect(srv) as s:
        s.sendall(HDR.pack(1, SCORE) + b"a" + HDR.pack(1, SCORE) + b"b")
        assert read_reply(s) == (0, b"scored:a") and read_reply(s) == (0, b"scored:b")
        eventually(lambda: h.after == 2)
    assert h.waited == [True, False]
