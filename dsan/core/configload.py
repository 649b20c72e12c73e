"""Typed config dataclasses, by their fields' type hints: one loader for all configs, and the
JSON Schema the Helm chart checks values against.

:func:`build` reads a YAML mapping. Bad keys and values are refused with the key's dotted path
(``cluster.node_groups[0].count``). YAML's typing is narrowed: an int may stand for a float but
a bool never for a number, a list for a tuple or frozenset, a non-empty string for a Path.
Range checks stay in each config.

:func:`dataclass_schema` writes the schema (values.schema.json) with the same narrowing, so a
value the schema accepts is one ``build`` accepts too. Each property carries the field's
default and, as its description, the ``#:`` comment above the field.

:func:`add_fields` and :func:`given` make the same dataclasses command-line flags and back
(the training tools' ``Args``), with no import of what the tools run.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import math
import re
import reprlib
import types
import typing
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

#: Scalar field types: which YAML values stand for them, what a message says was expected, and
#: their JSON Schema.
_SCALARS: dict[Any, tuple[Callable[[Any], bool], str, dict[str, Any]]] = {
    bool: (lambda v: isinstance(v, bool), "true or false", {"type": "boolean"}),
    int: (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer",
          {"type": "integer"}),
    # YAML's .nan and .inf are floats too; no config means them (a nan compares false with
    # every range check, an inf never ends a run).
    float: (lambda v: isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v),
            "a number", {"type": "number"}),
    str: (lambda v: isinstance(v, str), "a string", {"type": "string"}),
    Path: (lambda v: isinstance(v, str) and v != "", "a non-empty path",
           {"type": "string", "minLength": 1}),
}
_FIELD = re.compile(r"^\s*(\w+)\s*:")


class _Bad(Exception):
    """A bad value: its args are the dotted path and why."""


def build(cls: type[T], data: Any, *, what: str, error: type[Exception] = ValueError,
          overrides: Mapping[str, Any] | None = None) -> T:
    """Build dataclass ``cls`` from the YAML mapping ``data``, then let ``overrides`` (already
    typed, e.g. command-line flags) replace fields. A bad value raises ``error`` with a message
    ``"<what>: <dotted.key>: <why>"``; the dataclass's own checks run as it is constructed."""
    overrides = overrides or {}
    try:
        kwargs = _kwargs(cls, data, "", preset=overrides)
    except _Bad as bad:
        raise error(": ".join(p for p in (what, *bad.args) if p)) from None
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
        accepts, want, _ = _SCALARS[tp]
        if not accepts(value):
            raise _Bad(path, f"expected {want}, got {reprlib.repr(value)}")
        return tp(value)
    raise TypeError(f"{path}: a config field of type {tp} is not supported")


def type_schema(hint: Any) -> dict[str, Any]:
    """The JSON Schema of one field type (scalars, ``X | None``, ``tuple[X, ...]``,
    ``frozenset[X]``); anything else is a :class:`TypeError`."""
    if hint in _SCALARS:
        return dict(_SCALARS[hint][2])
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union) and type(None) in args:
        (inner,) = [a for a in args if a is not type(None)]
        schema = type_schema(inner)
        schema["type"] = [schema["type"], "null"]
        return schema
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return {"type": "array", "items": type_schema(args[0])}
    if origin is frozenset and len(args) == 1:
        return {"type": "array", "items": type_schema(args[0]), "uniqueItems": True}
    raise TypeError(f"no JSON Schema for config field type {hint!r}")


def json_value(value: Any) -> Any:
    """A field's default as JSON/YAML writes it (Path as a string, sets sorted)."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, frozenset):
        return sorted(value)
    if isinstance(value, tuple):
        return list(value)
    return value


def field_docs(cls: type) -> dict[str, str]:
    """The ``#:`` comment lines right above each field of ``cls``, joined."""
    docs: dict[str, str] = {}
    pending: list[str] = []
    for line in inspect.getsource(cls).splitlines():
        stripped = line.strip()
        if stripped.startswith("#:"):
            pending.append(stripped[2:].strip())
            continue
        m = _FIELD.match(line)
        if m and pending:
            docs[m.group(1)] = " ".join(pending)
        pending = []
    return docs


def dataclass_schema(cls: type, *, exclude: Collection[str] = (),
                     defaults: Mapping[str, Any] | None = None,
                     extra: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """An object schema with one property per field of ``cls`` (minus ``exclude``).
    ``defaults`` replaces a field's default; ``extra`` adds keywords (ranges, enums) so that
    ``helm install`` refuses a bad value before any pod starts."""
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    defaults, extra = defaults or {}, extra or {}
    unknown = (set(defaults) | set(extra)) - {f.name for f in dataclasses.fields(cls)}
    if unknown:
        raise KeyError(f"{cls.__name__} has no fields {sorted(unknown)}")
    props: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in exclude:
            continue
        schema = type_schema(hints[f.name])
        if f.name in docs:
            schema["description"] = docs[f.name]
        if f.name in defaults:
            schema["default"] = json_value(defaults[f.name])
        elif f.default is not dataclasses.MISSING:
            schema["default"] = json_value(f.default)
        elif f.default_factory is not dataclasses.MISSING:
            schema["default"] = json_value(f.default_factory())
        schema.update(extra.get(f.name, {}))
        props[f.name] = schema
    return {"type": "object", "additionalProperties": False, "properties": props}


def add_fields(
    p: argparse.ArgumentParser, classes: dict[str, type], skip: tuple[str, ...] = ()
) -> None:
    """One flag per field of the dataclasses ``classes`` (by label); a flag not given stays out
    of the namespace, so :func:`given` leaves the field its class's default."""
    defaults: dict[str, dict[str, Any]] = {}
    items: dict[str, type] = {}  # a tuple field's element type, from its annotation
    for label, cls in classes.items():
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if f.name not in skip:
                defaults.setdefault(f.name, {})[label] = f.default
                if isinstance(f.default, tuple):
                    items[f.name] = typing.get_args(hints[f.name])[0]
    for name, by_label in defaults.items():
        default = next(iter(by_label.values()))
        flag = "--" + name.replace("_", "-")
        shown = "; ".join(f"{k}: {v}" if k else str(v) for k, v in by_label.items())
        kw: dict[str, Any] = {"default": argparse.SUPPRESS, "help": f"default ({shown})"}
        if isinstance(default, bool):
            p.add_argument(flag, action=argparse.BooleanOptionalAction, **kw)
        elif isinstance(default, tuple):
            p.add_argument(flag, nargs="+", type=items[name], **kw)
        else:
            p.add_argument(flag, type=type(default), **kw)


def given(cls: type, ns: argparse.Namespace) -> dict[str, Any]:
    """The fields of ``cls`` given on the command line (tuples as tuples)."""
    kw = {f.name: getattr(ns, f.name) for f in dataclasses.fields(cls) if hasattr(ns, f.name)}
    return {k: tuple(v) if isinstance(v, list) else v for k, v in kw.items()}
