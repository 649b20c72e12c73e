"""Kubernetes quantities: apimachinery's grammar, exact values, bounded work."""

from __future__ import annotations

import contextlib
import math
import time
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsan.api.quantity import MAX_LENGTH, MAX_VALUE, QuantityError, parse_quantity


@pytest.mark.parametrize(
    ("text", "value"),
    [("0", 0), ("-0", 0), ("500m", Decimal("0.5")), ("2", 2), ("+2", 2), ("-2", -2),
     ("1Gi", 2**30), ("1.5Gi", 3 * 2**29), ("0.5Ki", 512), ("1e3", 1000), ("1E3", 1000),
     ("1e+3", 1000), ("1e-3", Decimal("0.001")), ("1E", 10**18), ("1k", 1000),
     ("1.", 1), (".5", Decimal("0.5")), ("100n", Decimal("1e-7")), ("12u", Decimal("12e-6")),
     ("0.1n", Decimal("1e-9")), ("1e-999999", Decimal("1e-9")), ("-0.1n", Decimal("-1e-9")),
     ("9223372036854775807", MAX_VALUE), ("7Ei", 7 * 2**60), ("1e0000000000000000003", 1000),
     (3, 3), (1.5, Decimal("1.5")), (2.0e3, 2000)],
)
def test_kubernetes_quantities_parse_to_exact_values(text: object, value: object) -> None:
    assert parse_quantity(text, "f") == Decimal(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text",
    # grammar: separators, non-ASCII digits, spaces, bare signs and points, unknown suffixes
    ["", "1_000", "١", "١٠", "1 ", " 1", "1\n", "+", "-", ".", "+.", "1e", "1e+", "1K", "1ki",
     "1KI", "1m5", "1Mi5", "1.5.5", "--1", "1ee3", "0x10", "1e3.5", "inf", "NaN", "Infinity",
     "1,000", "１",
     # bounds: magnitude past 2^63-1, exponents of any length, long strings
     "1e999999", "1e999998", "9223372036854775808", "8Ei", "10Ei", "1e19",
     "1e99999999999999999999999999999", "1" * (MAX_LENGTH + 1)],
)
def test_everything_else_is_refused_naming_the_field(text: str) -> None:
    with pytest.raises(QuantityError, match=r"^Pod\.spec\.x\[cpu\]: ") as err:
        parse_quantity(text, "Pod.spec.x[cpu]")
    assert err.value.field == "Pod.spec.x[cpu]"
    assert len(str(err.value)) < 200


@pytest.mark.parametrize("value", [None, True, [1], {"a": 1}, 10**30, -(10**30), 2**20000,
                                   float("inf"), float("nan"), 1e300],
                         ids=lambda v: type(v).__name__)
def test_non_string_values_are_quantities_only_as_json_numbers_in_range(value: object) -> None:
    with pytest.raises(QuantityError, match=r"^f: "):
        parse_quantity(value, "f")


def test_refusals_take_microseconds_whatever_the_exponent() -> None:
    """The values that froze the sidecar for ~31 s (an int() of a million-digit number)."""
    hostile = ["1e999998", "1e999999", "1e300000", "9e999999Ki", "1E999999", "-1e999999",
               "1e-999999", "1" * MAX_LENGTH, "1" * 10_000, "1e" + "9" * 60]
    t0 = time.process_time()
    for i in range(200):
        for text in hostile:
            with contextlib.suppress(QuantityError):
                parse_quantity(text + "0" * (i % 2), "f")  # half of them not cached
    per_parse = (time.process_time() - t0) / (200 * len(hostile))
    assert per_parse < 200e-6, f"{per_parse * 1e6:.0f} us per parse"


_SUFFIX = {"": Fraction(1), "n": Fraction(1, 10**9), "u": Fraction(1, 10**6),
           "m": Fraction(1, 1000), "k": Fraction(10**3), "M": Fraction(10**6),
           "G": Fraction(10**9), "T": Fraction(10**12), "P": Fraction(10**15),
           "E": Fraction(10**18), "Ki": Fraction(2**10), "Mi": Fraction(2**20),
           "Gi": Fraction(2**30), "Ti": Fraction(2**40), "Pi": Fraction(2**50),
           "Ei": Fraction(2**60)}


@st.composite
def quantities(draw: st.DrawFn) -> tuple[str, Fraction]:
    sign = draw(st.sampled_from(["", "+", "-"]))
    whole = draw(st.text("0123456789", max_size=8))
    frac = draw(st.none() | st.text("0123456789", max_size=12))
    if not whole and not frac:
        whole = "1"
    if draw(st.booleans()):
        exp = draw(st.integers(-30, 30))
        suffix, mult = f"{draw(st.sampled_from('eE'))}{exp}", Fraction(10) ** exp
    else:
        suffix = draw(st.sampled_from(sorted(_SUFFIX)))
        mult = _SUFFIX[suffix]
    text = sign + whole + ("" if frac is None else "." + frac) + suffix
    value = Fraction(int(whole or "0") * 10 ** len(frac or "") + int(frac or "0"),
                     10 ** len(frac or "")) * mult
    return text, -value if sign == "-" else value


@settings(max_examples=500, deadline=None)
@given(q=quantities())
def test_values_are_exact_rounded_up_to_nano_units(q: tuple[str, Fraction]) -> None:
    text, value = q
    nano = value * 10**9
    want = math.ceil(abs(nano)) * (1 if nano >= 0 else -1)  # away from zero, as apimachinery
    if abs(want) > MAX_VALUE * 10**9:
        with pytest.raises(QuantityError, match="out of range"):
            parse_quantity(text, "f")
    else:
        assert parse_quantity(text, "f") == Decimal(want) / 10**9


@settings(max_examples=500, deadline=None)
@given(text=st.text(alphabet=st.sampled_from("0123456789+-.eEKMGTPinumk _١\n"), max_size=20)
       | st.text(max_size=12))
def test_any_text_parses_or_is_refused_with_a_quantity_error(text: str) -> None:
    try:
        out = parse_quantity(text, "f")
    except QuantityError:
        return
    assert out.is_finite() and abs(out) <= MAX_VALUE
    assert text.isascii() and " " not in text and "_" not in text
