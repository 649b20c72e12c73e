"""Config dataclass -> JSON Schema (the Helm chart's values.schema.json), by the fields' type
hints, with :mod:`dsan.core.configload`'s narrowing of YAML's types, so a value the schema
accepts is one ``configload.build`` accepts too. Each property carries the field's default and,
as its description, the ``#:`` comment above the field.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import types
import typing
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

_SCALARS: dict[Any, dict[str, Any]] = {
    bool: {"type": "boolean"},
    int: {"type": "integer"},
    float: {"type": "number"},
    str: {"type": "string"},
    Path: {"type": "string", "minLength": 1},
}
_FIELD = re.compile(r"^\s*(\w+)\s*:")


def type_schema(hint: Any) -> dict[str, Any]:
    """The JSON Schema of one field type (scalars, ``X | None``, ``tuple[X, ...]``,
    ``frozenset[X]``); anything else is a :class:`TypeError`."""
    if hint in _SCALARS:
        return dict(_SCALARS[hint])
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
