"""Kubernetes resource quantities ("500m", "2Gi", "1e3"), read as apimachinery reads them.

The grammar is ``resource.Quantity``'s (k8s.io/apimachinery/pkg/api/resource/quantity.go)::

    <quantity>        ::= <signedNumber><suffix>
    <signedNumber>    ::= <number> | <sign><number>
    <sign>            ::= "+" | "-"
    <number>          ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
    <digits>          ::= one or more of the ASCII digits 0..9
    <suffix>          ::= <binarySI> | <decimalExponent> | <decimalSI>
    <binarySI>        ::= Ki | Mi | Gi | Ti | Pi | Ei
    <decimalSI>       ::= n | u | m | "" | k | M | G | T | P | E
    <decimalExponent> ::= "e" <integer> | "E" <integer>     (an optionally signed integer)

Nothing else (no spaces, ``_``, non-ASCII digits or ``inf``); a non-zero value finer than a
nano unit rounds up to one, as in apimachinery. Two bounds apimachinery lacks keep every parse
to microseconds: :data:`MAX_LENGTH` characters and :data:`MAX_VALUE` base units (where
kube-scheduler's int64 accounting ends). JSON numbers are accepted, as
``Quantity.UnmarshalJSON`` does; every refusal is a :class:`QuantityError` naming the field.
"""

from __future__ import annotations

import functools
import re
from decimal import Decimal
from typing import Any, Final

#: Longest quantity string read; anything longer is refused before it is looked at.
MAX_LENGTH: Final = 64
#: Largest magnitude, in base units (cores, bytes, devices).
MAX_VALUE: Final = 2**63 - 1
_NANO: Final = 10**9
_MAX_NANO: Final = MAX_VALUE * _NANO
#: A non-zero mantissa times 10^28 nano units is past MAX_VALUE (~9.2e18 units).
_MAX_SCALE: Final = 28

_GRAMMAR = re.compile(
    r"([+-]?)([0-9]*)(?:\.([0-9]*))?"
    r"(?:(Ki|Mi|Gi|Ti|Pi|Ei)|([numkMGTPE])|[eE]([+-]?[0-9]+))?")
_DECIMAL_SI: Final = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15,
                      "E": 18}
_BINARY_SI: Final = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}


class QuantityError(ValueError):
    """A value that is not a Kubernetes quantity within bounds; the message names the field."""

    def __init__(self, field: str, value: Any, why: str) -> None:
        super().__init__(f"{field}: {_show(value)} {why}")
        self.field = field


def parse_quantity(value: Any, field: str) -> Decimal:
    """The quantity ``value`` (a string, or a JSON number) as an exact Decimal in base units;
    :class:`QuantityError` naming ``field`` otherwise. Negative values are quantities too:
    callers that need a request or a capacity refuse them."""
    if isinstance(value, str):
        got = _parse_text(value)
    elif isinstance(value, bool):
        raise QuantityError(field, value, "is not a quantity")
    elif isinstance(value, int):
        if -MAX_VALUE <= value <= MAX_VALUE:
            return Decimal(value)
        got = "is out of range (at most 2^63-1)"
    elif isinstance(value, float):
        got = _parse_text(repr(value))  # the JSON number's text; "inf" and "nan" fail
    else:
        raise QuantityError(field, value, "is not a quantity")
    if isinstance(got, Decimal):
        return got
    raise QuantityError(field, value, got)


@functools.lru_cache(maxsize=4096)
def _parse_text(text: str) -> Decimal | str:
    """The value, or why not (an error string: lru_cache does not keep exceptions)."""
    if len(text) > MAX_LENGTH:
        return f"is longer than {MAX_LENGTH} characters"
    m = _GRAMMAR.fullmatch(text)
    if m is None or not (m[2] or m[3]):
        return "is not a Kubernetes quantity (such as 500m, 2Gi or 1e3)"
    sign, whole, frac, binary, decimal, exponent = m.groups()
    frac = frac or ""
    mantissa = int(whole + frac)  # at most MAX_LENGTH digits
    if mantissa == 0:
        return Decimal(0)
    if binary is not None:
        # mantissa * 2^k / 10^len(frac), in nano units, rounded up; small numbers all.
        nano = -(-mantissa * (2 ** _BINARY_SI[binary]) * _NANO // 10 ** len(frac))
    else:
        exp10 = _DECIMAL_SI[decimal] if decimal is not None else 0
        if exponent is not None:
            if len(exponent.lstrip("+-").lstrip("0")) > 6:  # past 999,999: no int() of it
                return "is out of range (at most 2^63-1)" if exponent[0] != "-" else \
                    "is out of range (exponent too small)"
            exp10 = int(exponent)
        scale = exp10 - len(frac) + 9  # the value is mantissa * 10^scale nano units
        if scale > _MAX_SCALE:
            return "is out of range (at most 2^63-1)"
        if scale >= 0:
            nano = mantissa * 10**scale
        elif -scale > len(str(mantissa)):
            nano = 1  # below one nano unit: rounds up to it, as apimachinery does
        else:
            nano = -(-mantissa // 10**-scale)
    if nano > _MAX_NANO:
        return "is out of range (at most 2^63-1)"
    if sign == "-":
        nano = -nano
    units, rest = divmod(nano, _NANO)
    return Decimal(units) if rest == 0 else Decimal(nano).scaleb(-9)


def _show(value: Any) -> str:
    """``repr(value)``, cut short: an error message must not echo a megabyte back."""
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else repr(value[:37]) + "..."
    if isinstance(value, int) and not -MAX_VALUE <= value <= MAX_VALUE:
        return f"an integer of {value.bit_length()} bits"
    if isinstance(value, bool | int | float) or value is None:
        return repr(value)
    return f"a JSON {type(value).__name__}"
