"""dsan.twins: which twin serves. A missing extension and DSAN_PURE_PYTHON both give the
Python twin (None); a built one is returned as the module."""

from __future__ import annotations

import pytest

from dsan.twins import compiled_twin


def test_an_extension_that_was_not_built_gives_none() -> None:
    assert compiled_twin("dsan._no_such_twin") is None


def test_pure_python_wins_over_a_built_extension(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DSAN_PURE_PYTHON", raising=False)
    assert compiled_twin("json") is not None  # any importable module stands in for a twin
    monkeypatch.setenv("DSAN_PURE_PYTHON", "1")
    assert compiled_twin("json") is None
