"""dsan.core.configload.dataclass_schema: a config dataclass's JSON Schema follows its type
hints, defaults and ``#:`` comments, and refuses what it cannot describe."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from dsan.core.configload import dataclass_schema, field_docs, type_schema


@dataclass(frozen=True)
class Example:
    #: Where to listen.
    #: Two lines of it.
    port: int = 8080
    ratio: float = 0.5
    name: str | None = None
    path: Path = Path("/var/lib/x")
    modes: tuple[str, ...] = ("a", "b")
    codes: frozenset[int] = frozenset({3, 1})
    on: bool = True
    made: list[int] = field(default_factory=lambda: [1])  # no schema: refused unless excluded


def test_each_field_type_becomes_its_schema_with_default_and_comment() -> None:
    s = dataclass_schema(Example, exclude={"made"}, extra={"port": {"maximum": 65535}},
                         defaults={"ratio": 0.25})
    assert s["additionalProperties"] is False
    p = s["properties"]
    assert p["port"] == {"type": "integer", "default": 8080, "maximum": 65535,
                         "description": "Where to listen. Two lines of it."}
    assert p["ratio"] == {"type": "number", "default": 0.25}
    assert p["name"] == {"type": ["string", "null"], "default": None}
    assert p["path"] == {"type": "string", "minLength": 1, "default": "/var/lib/x"}
    assert p["modes"] == {"type": "array", "items": {"type": "string"}, "default": ["a", "b"]}
    assert p["codes"] == {"type": "array", "items": {"type": "integer"}, "uniqueItems": True,
                          "default": [1, 3]}
    assert p["on"] == {"type": "boolean", "default": True}
    assert "made" not in p


def test_unknown_types_and_unknown_fields_are_refused() -> None:
    with pytest.raises(TypeError, match="list"):
        dataclass_schema(Example)
    with pytest.raises(TypeError):
        type_schema(dict[str, int])
    with pytest.raises(KeyError, match="prot"):
        dataclass_schema(Example, exclude={"made"}, extra={"prot": {}})


def test_docs_belong_to_the_field_right_below_them() -> None:
    assert field_docs(Example) == {"port": "Where to listen. Two lines of it."}
