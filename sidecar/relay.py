"""The Score relay: the gRPC Score service's methods on a unix socket, behind score-gateway.

grpcio's Python server hands every call from its poller thread to a worker and back (three
thread hand-offs under the GIL); on a quiet 16-core host its no-op p99 alone is ~1 ms at
1,000 nodes, the whole gRPC budget. ``score-gateway`` (scheduler-plugin/cmd/score-gateway)
serves the same ``dsan.scorer.v1.Scorer`` service from Go and forwards each call's protobuf
bytes here unchanged, one call at a time per connection; the thread that reads a frame
answers it. The framing is defined once in ``proto/scorer/v1/relay.md``:

    frame = length (uint32, little-endian) . kind (uint8) . payload (length bytes)

A request's kind is the method (:data:`SCORE`, :data:`NODE_TABLE`, :data:`READY`); a reply's
kind is a gRPC status code, with the response message as payload when it is 0 (OK) and the
error message (UTF-8) otherwise. Bad input costs the caller an error frame, never the
connection, except a frame longer than the limit, which cannot be skipped cheaply: its
connection is closed after the error frame (the gateway redials).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import stat
import struct
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import grpc

from sidecar.inbox import Inbox
from sidecar.service import RequestError

log = logging.getLogger("dsan.sidecar")

SCORE, NODE_TABLE, READY = 1, 2, 3
OK = 0
_HEADER = struct.Struct("<IB")
_CODE = {c.name: c.value[0] for c in grpc.StatusCode}


class RelayHandler(Protocol):
    """What the relay serves: the gRPC handler's methods on bytes (see ScoreHandler)."""

    def score_bytes(self, raw: bytes) -> bytes: ...

    def node_table_bytes(self, raw: bytes) -> bytes: ...

    def ready(self) -> bool: ...

    def after_reply(self, waiting: Callable[[], bool] | None = None) -> None: ...


class RelayServer:
    """Listens on ``path``; one thread per connection reads a frame, answers it, then runs
    the handler's post-reply work (the deferred assumption) before reading the next."""

    def __init__(self, path: str, handler: RelayHandler, max_frame_bytes: int,
                 mode: int = 0o660, max_connections: int = 64) -> None:
        self.path = path
        self.handler = handler
        self.max_frame_bytes = max_frame_bytes
        #: Connections (threads) served at once; more are closed at accept. The gateway
        #: keeps a handful (its -conns), so this only bounds a misbehaving client.
        self.max_connections = max_connections
        self.refused = 0
        _remove_stale_socket(path)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._listener.bind(path)
            os.chmod(path, mode)
            self._listener.listen(64)
        except OSError as exc:
            self._listener.close()
            raise OSError(f"score relay cannot listen on {path}: {exc}") from None
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="relay-accept", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        # shutdown() wakes the accept() and recv() calls blocked in other threads.
        for s in (self._listener, *self._snapshot()):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._thread.join(2.0)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    @property
    def connections(self) -> int:
        return len(self._snapshot())

    def _snapshot(self) -> list[socket.socket]:
        with self._lock:
            return list(self._conns)

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                if self._stopped.is_set():
                    return
                log.exception("score relay: accept failed")
                continue
            with self._lock:
                full = len(self._conns) >= self.max_connections
                if not full:
                    self._conns.add(conn)
            if full:
                conn.close()
                self.refused += 1
                if self.refused == 1 or self.refused % 1000 == 0:
                    log.warning("score relay: %d connections open, refused one (%d so far)",
                                self.max_connections, self.refused)
                continue
            threading.Thread(target=self._serve, args=(conn,), name="relay-conn",
                             daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            self._loop(conn)
        except OSError:
            pass  # the gateway went away or the server stops: nothing to answer
        finally:
            with self._lock:
                self._conns.discard(conn)
            conn.close()

    def _loop(self, conn: socket.socket) -> None:
        header = bytearray(_HEADER.size)
        view = memoryview(header)
        handler = self.handler
        inbox = Inbox(conn)
        while True:
            if not _read_into(conn, view):
                return
            length, kind = _HEADER.unpack(header)
            if length > self.max_frame_bytes:
                _send(conn, _CODE["RESOURCE_EXHAUSTED"],
                      f"relay frame of {length} bytes is over the limit of "
                      f"{self.max_frame_bytes}".encode())
                return
            payload = bytearray(length)
            if length and not _read_into(conn, memoryview(payload)):
                return
            code, body = self._dispatch(kind, bytes(payload))
            _send(conn, code, body)
            if code == OK and kind == SCORE:
                try:
                    handler.after_reply(inbox.waiting)
                except Exception:  # post-reply work only; the connection keeps serving
                    log.exception("score relay: post-reply work failed")

    def _dispatch(self, kind: int, raw: bytes) -> tuple[int, bytes]:
        try:
            if kind == SCORE:
                return OK, self.handler.score_bytes(raw)
            if kind == NODE_TABLE:
                return OK, self.handler.node_table_bytes(raw)
            if kind == READY:
                if self.handler.ready():
                    return OK, b""
                return _CODE["UNAVAILABLE"], b"the sidecar's informers have not synced yet"
            return _CODE["UNIMPLEMENTED"], f"unknown relay frame kind {kind}".encode()
        except RequestError as err:  # already counted by the handler
            return _CODE[err.grpc_code], err.message.encode()
        except Exception as exc:  # a bug: answer it, keep the connection serving
            log.exception("score relay: kind %d failed", kind)
            return _CODE["INTERNAL"], f"internal error: {type(exc).__name__}: {exc}".encode()


def _read_into(conn: socket.socket, view: memoryview) -> bool:
    """Fill ``view``; False on a clean end of stream before its first byte."""
    got = 0
    while got < len(view):
        n = conn.recv_into(view[got:])
        if n == 0:
            if got:
                raise ConnectionError("relay frame cut short")
            return False
        got += n
    return True


def _send(conn: socket.socket, code: int, body: bytes) -> None:
    conn.sendall(_HEADER.pack(len(body), code) + body)


def _remove_stale_socket(path: str) -> None:
    """A socket file left by a previous run would make bind() fail. A live one (another
    sidecar answers on it) or anything that is not a socket is not ours to delete."""
    p = Path(path)
    try:
        mode = p.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise OSError(f"score relay: {path} exists and is not a socket")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except OSError:
        p.unlink()  # nobody listens: left over
        return
    finally:
        probe.close()
    raise OSError(f"score relay: another process is serving on {path}")
