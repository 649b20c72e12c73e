"""The sidecar's compute thread pools: numpy's BLAS pool (and torch's intra-op pool).

Both libraries size their pools by the CPUs online, not the ones the sidecar may run on (one,
in the chart's latency deployment). DSAN's products are small: one thread is what they need,
and spinning BLAS threads on shared CPUs slow them several times over.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

log = logging.getLogger(__name__)


def limit_threads(torch_threads: int, blas_threads: int) -> Any:
    """Hold torch's intra-op pool (if torch is imported) and every loaded BLAS library to
    these sizes (0: as the library sized it). Returns threadpoolctl's limiter, or None when
    nothing was limited; a BLAS limit that cannot be applied is logged, not raised."""
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
    """The thread count of every loaded BLAS library; empty when threadpoolctl cannot tell."""
    try:
        from threadpoolctl import threadpool_info

        return [int(d["num_threads"]) for d in threadpool_info() if d.get("user_api") == "blas"]
    except Exception:
        return []


def pool_sizes() -> dict[str, int]:
    """``{"torch": intra-op threads, "blas": the largest BLAS pool}``, 0 for one not loaded."""
    torch = sys.modules.get("torch")
    return {"torch": int(torch.get_num_threads()) if torch is not None else 0,
            "blas": max(blas_threads(), default=0)}
