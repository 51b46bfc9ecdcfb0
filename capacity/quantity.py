"""Kubernetes quantities ("750m", "4Gi", "1e3", "+2") read as apimachinery's
``resource.Quantity`` reads them, into exact fractions (cpu in cores, memory in bytes).

PURE. One parser for the settings' resource requests and the NodePools' limits and usage.
The grammar is apimachinery's (``pkg/api/resource/quantity.go``):

    <quantity>        ::= <signedNumber><suffix>
    <signedNumber>    ::= <number> | <sign><number>          <sign> ::= "+" | "-"
    <number>          ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
    <suffix>          ::= <binarySI> | <decimalExponent> | <decimalSI>
    <binarySI>        ::= Ki | Mi | Gi | Ti | Pi | Ei
    <decimalSI>       ::= n | u | m | "" | k | M | G | T | P | E
    <decimalExponent> ::= "e" <signedDigits> | "E" <signedDigits>

"1E" is 10^18 (the exa suffix), "1E3" is 1000. The exponent is a signed whole number (Go's
scanner refuses "1e1.5", though the grammar's comment says <signedNumber>). Surrounding
whitespace is ignored, as Kubernetes' JSON decoding trims it.

Where this differs from apimachinery, on inputs no one writes: a sign or a point alone
("+", ".") is refused (Go reads 0); an exponent beyond ±MAX_EXPONENT is refused (the exact
fraction of 1e999999999 would not fit in memory); values stay exact (Go rounds a non-zero value
below 1n up to 1n and caps binary-SI values at 2^63-1).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Final

MAX_EXPONENT: Final = 100

_BINARY_SI: Final = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_SI: Final = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}

_NUMBER: Final = r"[0-9]+\.?[0-9]*|\.[0-9]+"
# The exponent before the SI suffixes, so "1E3" is an exponent and "1E" the exa suffix.
_SUFFIX: Final = r"Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+|[numkMGTPE]?"
PATTERN: Final = rf"^([+-]?(?:{_NUMBER}))({_SUFFIX})$"
"""The grammar as a regular expression (ECMA-262 and RE2 compatible, for JSON schemas)."""
UNSIGNED_PATTERN: Final = rf"^(\+?(?:{_NUMBER}))({_SUFFIX})$"
"""The grammar without a minus sign, for amounts that cannot be negative (the chart's
schema)."""

_QUANTITY: Final = re.compile(PATTERN, re.ASCII)


@dataclass(frozen=True)
class Quantity:
    """One parsed quantity: its exact value and how it was written."""

    value: Fraction
    si: str = ""  # the SI suffix as written ("", "m", "Ki", …); "" with an exponent
    exponent: int = 0  # the decimal exponent as written ("1e3": 3)


def parse(value: object) -> Quantity:
    """A quantity from a string or a number (YAML and JSON give both); ValueError
    ``invalid quantity …`` when it is not one."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"invalid quantity {value!r}")
    match = _QUANTITY.fullmatch(str(value).strip())
    if match is None:
        raise ValueError(f"invalid quantity {value!r}")
    number, suffix = Fraction(Decimal(match.group(1))), match.group(2)
    if suffix in _BINARY_SI:
        return Quantity(number * 2 ** _BINARY_SI[suffix], si=suffix)
    if suffix[:1] in ("e", "E") and len(suffix) > 1:
        exponent = int(suffix[1:])
        if abs(exponent) > MAX_EXPONENT:
            raise ValueError(f"invalid quantity {value!r} (exponent beyond ±{MAX_EXPONENT})")
        return Quantity(number * Fraction(10) ** exponent, exponent=exponent)
    return Quantity(number * Fraction(10) ** _DECIMAL_SI[suffix], si=suffix)


def parse_quantity(value: object) -> Fraction:
    """The exact value of a quantity ("900m" twice is exactly "1800m")."""
    return parse(value).value
