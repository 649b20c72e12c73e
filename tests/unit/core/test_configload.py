"""The shared YAML -> config dataclass loader: types from the hints, bad input named by path."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from dsan.core.configload import build


class Bad(ValueError):
    pass


@dataclass(frozen=True)
class Group:
    count: int
    cost: float = 0.0


@dataclass(frozen=True)
class Config:
    name: str = "x"
    rate: float = 1.0
    on: bool = False
    n: int = 1
    where: Path = Path("/tmp")
    kubeconfig: str | None = None
    sizes: tuple[float, ...] = ()
    span: tuple[int, int] = (1, 2)
    points: list[float] = field(default_factory=list)
    xids: frozenset[int] = frozenset()
    probs: dict[str, float] = field(default_factory=dict)
    groups: tuple[Group, ...] = ()
    group: Group = Group(count=1)

    def __post_init__(self) -> None:
        if self.n < 0:
            raise Bad("n must be >= 0")


def load(data: object, **overrides: object) -> Config:
    return build(Config, data, what="test config", error=Bad, overrides=overrides)


def test_every_kind_of_field_is_built_from_yaml_values() -> None:
    cfg = load({"name": "a", "rate": 2, "on": True, "n": 3, "where": "/var/x", "kubeconfig": "/k",
                "sizes": [1, 2.5], "span": [3, 4], "points": [0.5], "xids": [13, 13, 31],
                "probs": {1: 0.25, "2": 1}, "groups": [{"count": 2, "cost": 1}],
                "group": {"count": 5}})
    assert cfg == Config(name="a", rate=2.0, on=True, n=3, where=Path("/var/x"), kubeconfig="/k",
                         sizes=(1.0, 2.5), span=(3, 4), points=[0.5], xids=frozenset({13, 31}),
                         probs={"1": 0.25, "2": 1.0}, groups=(Group(2, 1.0),), group=Group(5))
    # Ints stand for floats and become floats (also inside containers); YAML keys become strings.
    assert isinstance(cfg.rate, float) and all(isinstance(s, float) for s in cfg.sizes)
    assert isinstance(cfg.groups[0].cost, float) and isinstance(cfg.probs["2"], float)


def test_absent_keys_keep_their_defaults_and_null_clears_an_optional() -> None:
    assert load({}) == Config()
    assert load({"kubeconfig": None}).kubeconfig is None


def test_overrides_replace_fields_as_given_and_may_supply_required_ones() -> None:
    cfg = load({"n": 3, "name": "file"}, name="flag", xids=frozenset({1}))
    assert (cfg.n, cfg.name, cfg.xids) == (3, "flag", frozenset({1}))
    g = build(Group, {}, what="g", overrides={"count": 4})
    assert g == Group(4)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([1, 2], r"^test config: expected a mapping, got \[1, 2\]$"),
        ({"nmae": "a", "n": 1}, r"^test config: unknown keys \['nmae'\]; known: \['name', "),
        ({1: "a"}, r"unknown keys \['1'\]"),
        ({"rate": "fast"}, "^test config: rate: expected a number, got 'fast'$"),
        ({"rate": True}, "rate: expected a number, got True"),
        ({"rate": float("nan")}, "rate: expected a number, got nan"),
        ({"sizes": [1, float("-inf")]}, r"sizes\[1\]: expected a number, got -inf"),
        ({"n": True}, "n: expected an integer, got True"),
        ({"n": 2.0}, "n: expected an integer, got 2.0"),
        ({"n": "2"}, "n: expected an integer, got '2'"),
        ({"on": 1}, "on: expected true or false, got 1"),
        ({"on": "yes"}, "on: expected true or false, got 'yes'"),
        ({"name": 5}, "name: expected a string, got 5"),
        ({"name": None}, "name: expected a string, got None"),
        ({"kubeconfig": 5}, "kubeconfig: expected a string, got 5"),
        ({"where": ""}, "where: expected a non-empty path, got ''"),
        ({"sizes": 1.0}, "sizes: expected a list, got 1.0"),
        ({"sizes": [1, "x"]}, r"sizes\[1\]: expected a number, got 'x'"),
        ({"span": [1, 2, 3]}, r"span: expected a list of 2, got \[1, 2, 3\]"),
        ({"span": [1, 2.5]}, r"span\[1\]: expected an integer, got 2.5"),
        ({"points": {"a": 1}}, "points: expected a list"),
        ({"xids": [13, "x"]}, r"xids\[1\]: expected an integer, got 'x'"),
        ({"probs": [0.5]}, r"probs: expected a mapping, got \[0.5\]"),
        ({"probs": {"1": "half"}}, "probs.1: expected a number, got 'half'"),
        ({"groups": [{"count": 1}, {"cost": 1}]}, r"groups\[1\]: missing keys \['count'\]"),
        ({"groups": [{"count": 1, "size": 2}]}, r"groups\[0\]: unknown keys \['size'\]"),
        ({"group": 3}, "group: expected a mapping, got 3"),
        ({"group": {"count": "many"}}, "group.count: expected an integer, got 'many'"),
    ],
)
def test_bad_input_raises_the_given_error_naming_the_key(data: object, message: str) -> None:
    with pytest.raises(Bad, match=message):
        load(data)


def test_long_values_are_shortened_in_messages() -> None:
    with pytest.raises(Bad) as info:
        load({"n": list(range(1000))})
    assert len(str(info.value)) < 100 and "..." in str(info.value)


def test_the_default_error_is_value_error_and_the_dataclass_checks_still_run() -> None:
    with pytest.raises(ValueError, match=r"^g: count: expected an integer"):
        build(Group, {"count": "x"}, what="g")
    with pytest.raises(Bad, match="n must be >= 0"):
        load({"n": -1})


def test_an_unsupported_field_type_is_a_programming_error() -> None:
    @dataclass
    class Odd:
        either: int | str = 0

    with pytest.raises(TypeError, match="either"):
        build(Odd, {"either": 1}, what="odd")
