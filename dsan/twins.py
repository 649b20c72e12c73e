"""Loading the compiled twins (``dsan/_*.c``, built by ``setup.py`` when a compiler is there).

Each module with a C twin (:mod:`dsan.rowkernel`, :mod:`dsan.model.headscan`,
:mod:`dsan.model.rowcache`, :mod:`dsan.model.heldreply`, :mod:`dsan.policies.logitscale`,
:mod:`dsan.policies.rowscale`, :mod:`sidecar.tiebreak`, :mod:`sidecar.candidates`,
:mod:`sidecar.rowcharge`) keeps a
Python twin as the reference and the fallback, and asks :func:`compiled_twin` once at import
which one serves: the extension, or None when it was not built or ``DSAN_PURE_PYTHON`` is set
(the tests run the model, sidecar and featurizer tiers both ways).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

__all__ = ["compiled_twin"]


def compiled_twin(name: str) -> ModuleType | None:
    """The extension module ``name`` (e.g. ``"dsan._headscan"``), or None when it was not
    built (no compiler at install time) or ``DSAN_PURE_PYTHON`` is set."""
    if os.environ.get("DSAN_PURE_PYTHON"):
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None
