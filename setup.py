"""Build lines of the compiled twins; everything else is in pyproject.toml.

``dsan._rowkernel`` (dsan/_rowkernel.c, its row writer in dsan/_rowtail.h) is the C twin of
:func:`dsan.rowkernel.fill_py` and :func:`dsan.rowkernel.fill_rows_py`,
``dsan._headscan`` (dsan/_headscan.c, its request-row and MLP passes in dsan/_headrows.h)
of the numpy passes in :mod:`dsan.model.headscan`,
``dsan._classrows`` (dsan/_classrows.c) of :func:`dsan.model.classrows.store_py` and
:func:`~dsan.model.classrows.first_py` (the few-row first layer, dsan/_firstsum.h),
``dsan._logitscale`` (dsan/_logitscale.c) of :func:`dsan.policies.logitscale.scale_py`,
``dsan._rowscale`` (dsan/_rowscale.c) of :func:`dsan.policies.rowscale.scale_rows_py`,
``dsan._heldreply`` (dsan/_heldreply.c) of :func:`dsan.model.heldreply.held_py`,
``dsan._memorows`` (dsan/_memorows.c, sharing the row writer, the sum and the store) of
:func:`dsan.model.memorows.update_py`, ``dsan._rowsync`` (dsan/_rowsync.c) of
:func:`dsan.rowsync.sync_rows_py`, ``dsan._tiebreak`` (dsan/_tiebreak.c) of
:func:`sidecar.tiebreak.lowest_name_wins_py`, ``dsan._namerows`` (dsan/_namerows.c) of
:func:`sidecar.candidates.name_rows_py`, ``dsan._rowcharge`` (dsan/_rowcharge.c) of
:func:`sidecar.rowcharge.charge_py`, :func:`~sidecar.rowcharge.uncharge_py` and
:func:`~sidecar.rowcharge.copy_rows_py`.
All are optional: without a C compiler the build skips them and the Python twins serve
(same bits). ``-ffp-contract=off``: no fused multiply-adds, which would round differently
from the Python twins.
"""

from setuptools import Extension, setup


def _twin(name: str) -> Extension:
    # depends: a change to the shared buffer helpers (or to the row writer, dsan/_rowtail.h,
    # the few-row sum, the store or the head's row passes) rebuilds the twins that include them
    headers = ["dsan/_buffer.h",
               *(["dsan/_rowtail.h"] if name in ("_rowkernel", "_memorows") else []),
               *(["dsan/_memowalk.h"] if name == "_memorows" else []),
               *(["dsan/_headrows.h"] if name == "_headscan" else []),
               *(["dsan/_firstsum.h", "dsan/_storerows.h"]
                 if name in ("_classrows", "_memorows") else [])]
    return Extension(f"dsan.{name}", [f"dsan/{name}.c"], depends=headers,
                     extra_compile_args=["-O2", "-ffp-contract=off"], optional=True)


setup(ext_modules=[_twin(n) for n in ("_rowkernel", "_headscan", "_classrows", "_logitscale",
                                     "_rowscale", "_heldreply", "_memorows", "_rowsync",
                                     "_tiebreak", "_namerows", "_rowcharge")])
