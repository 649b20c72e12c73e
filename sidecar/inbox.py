"""Whether a connection already holds its client's next request.

The servers run a reply's deferred work (``ScoringService.settle``) on the connection's own
thread after the reply is written, and end it with an optional replay of the reply that
only warms the CPU caches for the next one (``ScoringEngine.warm``). When the client's next
request has already arrived, that replay would only delay it: the servers ask an
:class:`Inbox` first. A zero-timeout ``poll`` on the socket (``select.poll``, which, unlike
``select.select``, takes descriptors past 1024) costs about a microsecond. It sees the
socket, not a reader's buffer: a request a pipelining client sent along with the previous one
is already in the HTTP server's read buffer and goes unseen (the replay then runs;
kube-scheduler's net/http client does not pipeline, and the relay reads exact frames).
"""

from __future__ import annotations

import select
import socket

__all__ = ["Inbox"]


class Inbox:
    """``waiting()``: True when ``sock`` has bytes to read (or was closed by the peer)."""

    __slots__ = ("_poll",)

    def __init__(self, sock: socket.socket) -> None:
        self._poll = select.poll()
        self._poll.register(sock.fileno(), select.POLLIN)

    def waiting(self) -> bool:
        return bool(self._poll.poll(0))
