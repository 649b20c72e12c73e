"""sidecar.inbox: whether a connection already holds the client's next request, and the HTTP
server asking it after each reply (the relay's twin of this is in test_relay.py)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

from sidecar.extender import ExtenderServer
from sidecar.inbox import Inbox


def test_waiting_is_true_only_while_bytes_are_unread_or_the_peer_closed() -> None:
    a, b = socket.socketpair()
    with a, b:
        inbox = Inbox(a)
        assert not inbox.waiting()
        b.sendall(b"x")
        assert inbox.waiting()
        a.recv(1)
        assert not inbox.waiting()
        b.close()
        assert inbox.waiting()  # EOF is readable: the next read returns at once


class _App:
    """prioritize answers; settle records what ``waiting()`` said after each reply, the
    first time only after the client had time to send its next request."""

    def __init__(self) -> None:
        self.waited: list[bool] = []

    def prioritize(self, body: bytes) -> tuple[int, bytes]:
        return 200, b"[]"

    def settle(self, waiting: Callable[[], bool] | None = None) -> None:
        assert waiting is not None
        if not self.waited:
            time.sleep(0.3)  # the client reads the reply and sends the next request meanwhile
        self.waited.append(waiting())


def test_the_http_server_tells_settle_whether_the_next_request_is_already_there() -> None:
    """As kube-scheduler's keep-alive client does: each request sent once the previous
    reply is read (a pipelined request would sit in the server's read buffer, which the
    inbox does not see; Go's net/http does not pipeline)."""
    app = _App()
    srv = ExtenderServer("127.0.0.1", 0, "/dsan", app, max_body=1 << 16)  # type: ignore[arg-type]
    srv.start()
    req = b"POST /dsan/prioritize HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
    try:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
            for _ in range(2):
                s.sendall(req)
                got = b""
                while not got.endswith(b"[]"):
                    got += s.recv(4096)
            deadline = time.monotonic() + 5
            while len(app.waited) < 2:
                assert time.monotonic() < deadline
                time.sleep(0.005)
        assert app.waited == [True, False]
    finally:
        srv.stop()
