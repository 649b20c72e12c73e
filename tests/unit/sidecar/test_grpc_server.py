from __future__ import annotations

import threading

from sidecar.grpc_server import AfterReplyExecutor


def test_after_reply_work_runs_in_the_serving_thread_once_the_rpc_returned() -> None:
    pool = AfterReplyExecutor(2)
    log: list[tuple[str, str]] = []

    def rpc(k: int) -> int:
        assert pool.after_reply(lambda: log.append(("settle", threading.current_thread().name)))
        log.append(("reply", threading.current_thread().name))
        return k

    try:
        assert pool.submit(rpc, 7).result() == 7
        pool.submit(lambda: None).result()  # the same worker again: nothing left queued
    finally:
        pool.shutdown(wait=True)
    assert [what for what, _ in log] == ["reply", "settle"]
    assert log[0][1] == log[1][1] and log[0][1].startswith("grpc-worker")


def test_after_reply_outside_the_pool_is_refused() -> None:
    pool = AfterReplyExecutor(1)
    try:
        assert not pool.after_reply(lambda: None)
    finally:
        pool.shutdown(wait=True)


def test_a_failing_rpc_still_runs_its_after_reply_work() -> None:
    pool = AfterReplyExecutor(1)
    ran: list[int] = []

    def rpc() -> None:
        pool.after_reply(lambda: ran.append(1))
        raise RuntimeError("handler failed")

    try:
        fut = pool.submit(rpc)
        assert isinstance(fut.exception(), RuntimeError)
    finally:
        pool.shutdown(wait=True)
    assert ran == [1]
