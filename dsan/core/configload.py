"""YAML mapping -> typed config dataclass, by the fields' type hints: one loader for all configs.

Bad keys and values are refused with the key's dotted path (``cluster.node_groups[0].count``).
YAML's typing is narrowed: an int may stand for a float but a bool never for a number, a list
for a tuple or frozenset, a non-empty string for a Path. Range checks stay in each config.
"""

from __future__ import annotations

import dataclasses
import reprlib
import types
import typing
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

#: Scalar field types: which YAML values stand for them, and what a message says was expected.
_SCALARS: dict[Any, tuple[Callable[[Any], bool], str]] = {
    bool: (lambda v: isinstance(v, bool), "true or false"),
    int: (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    float: (lambda v: isinstance(v, int | float) and not isinstance(v, bool), "a number"),
    str: (lambda v: isinstance(v, str), "a string"),
    Path: (lambda v: isinstance(v, str) and v != "", "a non-empty path"),
}


class _Bad(Exception):
    def __init__(self, path: str, why: str) -> None:
        super().__init__(path, why)
        self.path, self.why = path, why


def build(cls: type[T], data: Any, *, what: str, error: type[Exception] = ValueError,
          overrides: Mapping[str, Any] | None = None) -> T:
    """Build dataclass ``cls`` from the YAML mapping ``data``, then let ``overrides`` (already
    typed, e.g. command-line flags) replace fields. A bad value raises ``error`` with a message
    ``"<what>: <dotted.key>: <why>"``; the dataclass's own checks run as it is constructed."""
    overrides = overrides or {}
    try:
        kwargs = _kwargs(cls, data, "", preset=overrides)
    except _Bad as bad:
        raise error(": ".join(p for p in (what, bad.path, bad.why) if p)) from None
    return cls(**{**kwargs, **overrides})


def _kwargs(cls: Any, data: Any, path: str, preset: Collection[str] = ()) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise _Bad(path, f"expected a mapping, got {reprlib.repr(data)}")
    fields = dataclasses.fields(cls)
    known = [f.name for f in fields]
    unknown = sorted(str(k) for k in data if k not in known)
    if unknown:
        raise _Bad(path, f"unknown keys {unknown}; known: {known}")
    missing = [f.name for f in fields if f.name not in data and f.name not in preset
               and f.default is f.default_factory is dataclasses.MISSING]
    if missing:
        raise _Bad(path, f"missing keys {missing}")
    hints = typing.get_type_hints(cls)
    return {k: _coerce(hints[k], v, f"{path}.{k}" if path else k) for k, v in data.items()}


def _coerce(tp: Any, value: Any, path: str) -> Any:
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return tp(**_kwargs(tp, value, path))
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType) and len(args) == 2 and type(None) in args:
        inner = args[0] if args[1] is type(None) else args[1]  # `X | None`, an optional X
        return None if value is None else _coerce(inner, value, path)
    if origin is dict:
        if not isinstance(value, dict):
            raise _Bad(path, f"expected a mapping, got {reprlib.repr(value)}")
        kt, vt = args
        return {str(k) if kt is str else _coerce(kt, k, path): _coerce(vt, v, f"{path}.{k}")
                for k, v in value.items()}
    if origin in (tuple, list, frozenset):
        if not isinstance(value, list | tuple):
            raise _Bad(path, f"expected a list, got {reprlib.repr(value)}")
        if origin is tuple and args[-1] is not Ellipsis:  # fixed length, e.g. tuple[int, int]
            if len(value) != len(args):
                raise _Bad(path, f"expected a list of {len(args)}, got {reprlib.repr(value)}")
            pairs = enumerate(zip(args, value, strict=True))
            return tuple(_coerce(t, v, f"{path}[{i}]") for i, (t, v) in pairs)
        return origin(_coerce(args[0], v, f"{path}[{i}]") for i, v in enumerate(value))
    if tp in _SCALARS:
        accepts, want = _SCALARS[tp]
        if not accepts(value):
            raise _Bad(path, f"expected {want}, got {reprlib.repr(value)}")
        return tp(value)
    raise TypeError(f"{path}: a config field of type {tp} is not supported")
