"""The sidecar's compute thread pools: numpy's BLAS pool (and torch's intra-op pool, with the
TorchScript runtime).

Both libraries size their pools by the CPUs the kernel lists as online, not by the CPUs the
sidecar may run on. The chart's latency deployment gives the sidecar one CPU of its own
(``sidecar.exclusiveCpus: 1``, a CPU set of one); a node with 64 cores still shows 64 online.
Several threads on one CPU can only take turns, and a thread that waits for the CPU can wait
a whole scheduler time slice (milliseconds); DSAN's products are small, so one thread is what
they need, and OpenBLAS's spinning threads on shared CPUs slow them several times over.

Nothing here runs at import time; :func:`limit_threads` is called once at start
(:func:`sidecar.app.load_policies`, and the latency bench's worlds, as the sidecar does).
"""

from __future__ import annotations

import logging
import sys
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["blas_threads", "limit_threads", "pool_sizes"]


def limit_threads(torch_threads: int, blas_threads: int) -> Any:
    """Hold torch's intra-op pool (if torch is imported: only a torch policy imports it) to
    ``torch_threads`` and every BLAS library loaded in the process to ``blas_threads``; 0
    leaves a pool as its library sized it. Returns threadpoolctl's limiter (its
    ``restore_original_limits()`` undoes the BLAS limit), or None when nothing was limited:
    a BLAS limit that cannot be applied (threadpoolctl missing or failing) is logged, and
    the sidecar serves on."""
    if torch_threads and "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(torch_threads)
    if not blas_threads:
        return None
    try:
        from threadpoolctl import threadpool_limits

        limiter = threadpool_limits(limits=blas_threads, user_api="blas")
    except Exception as exc:  # an optional tuning: never a reason not to serve
        log.warning("cannot limit the BLAS threads to %d (%s); serving with the library's "
                    "own pool", blas_threads, exc)
        return None
    log.info("numpy's BLAS held to %d thread(s)", blas_threads)
    return limiter


def blas_threads() -> list[int]:
    """The thread count of every BLAS library loaded in the process (observability and
    tests); empty when threadpoolctl cannot tell."""
    try:
        from threadpoolctl import threadpool_info

        return [int(d["num_threads"]) for d in threadpool_info() if d.get("user_api") == "blas"]
    except Exception:
        return []


def pool_sizes() -> dict[str, int]:
    """``{"torch": intra-op threads, "blas": the largest BLAS pool}``, 0 for a library not
    loaded (or not readable), for the sidecar's metrics at start."""
    torch = sys.modules.get("torch")
    return {"torch": int(torch.get_num_threads()) if torch is not None else 0,
            "blas": max(blas_threads(), default=0)}
