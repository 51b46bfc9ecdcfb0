"""Kubernetes quantities (``capacity.quantity``): apimachinery's grammar, exact values, the
regular expression the chart's schema uses, and the two callers (settings requests, NodePool
limits) on values they read before the parser was shared."""

from __future__ import annotations

import re
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from capacity.nodepools import nodepool_from
from capacity.quantity import (
    MAX_EXPONENT,
    PATTERN,
    UNSIGNED_PATTERN,
    Quantity,
    parse,
    parse_quantity,
)
from capacity.settings_values import check_quantity

_SI = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}


@pytest.mark.parametrize(
    ("text", "value"),
    [
        # The NodePool parser's cases before the parser was shared.
        ("900m", Fraction(9, 10)),
        ("2", Fraction(2)),
        ("1.5", Fraction(3, 2)),
        ("4Gi", Fraction(4 * 2**30)),
        ("1k", Fraction(1000)),
        ("2e3", Fraction(2000)),
        (3, Fraction(3)),
        ("0", Fraction(0)),
        # The grammar's corners.
        ("1E", Fraction(10**18)),  # the exa suffix ...
        ("1E3", Fraction(1000)),  # ... and an exponent
        ("1e-3", Fraction(1, 1000)),
        ("1e+3", Fraction(1000)),
        ("1.e3", Fraction(1000)),
        ("100n", Fraction(1, 10**7)),
        ("5u", Fraction(1, 200_000)),
        ("1.", Fraction(1)),
        (".5", Fraction(1, 2)),
        ("1.G", Fraction(10**9)),  # "<digits>." takes a suffix too
        ("+2", Fraction(2)),
        ("-2Ki", Fraction(-2048)),
        ("007", Fraction(7)),
        (" 2 ", Fraction(2)),  # Kubernetes' JSON decoding trims
        (0.5, Fraction(1, 2)),
        (1e-05, Fraction(1, 100_000)),  # str() of a small YAML float is an exponent form
        ("0.1Gi", Fraction(2**30, 10)),
    ],
)
def test_parse_quantity(text: object, value: Fraction) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize(
    "text",
    [
        # The NodePool parser's refusals before the parser was shared.
        "", "1x", "Gi", "1.2.3", True, None, "1 Gi",
        # The grammar's.
        "+", ".", "-", "1e", "1Ki3", "1e1.5", "1ki", "1K", "1mi", "e3", "1e3k", "--1",
        "nan", float("inf"), "\u0663",  # an Arabic-Indic three: digits are ASCII only
        f"1e{MAX_EXPONENT + 1}", [1],
    ],
)  # fmt: skip
def test_parse_quantity_refuses(text: object) -> None:
    with pytest.raises(ValueError, match="invalid quantity"):
        parse_quantity(text)


def test_quantities_are_exact() -> None:
    assert parse_quantity("900m") * 2 == parse_quantity("1800m")
    assert parse_quantity("0.1") * 3 == parse_quantity("300m")


def test_how_it_was_written() -> None:
    assert parse("750m") == Quantity(Fraction(3, 4), si="m")
    assert parse("2e3") == Quantity(Fraction(2000), exponent=3)
    assert parse("16Gi") == Quantity(Fraction(16 * 2**30), si="Gi")


# --- the grammar, generated ---------------------------------------------------------------

_digits = st.text("0123456789", min_size=1, max_size=12)


@st.composite
def quantities(draw: st.DrawFn) -> tuple[str, Fraction]:
    """A quantity written by the grammar, and its value computed independently."""
    sign = draw(st.sampled_from(["", "+", "-"]))
    whole, fraction = draw(_digits), draw(_digits)
    number = draw(st.sampled_from([whole, f"{whole}.{fraction}", f"{whole}.", f".{fraction}"]))
    kind = draw(st.sampled_from(["si", "binary", "exponent"]))
    magnitude = Fraction(Decimal(number))
    if kind == "si":
        suffix = draw(st.sampled_from(sorted(_SI)))
        value = magnitude * Fraction(10) ** _SI[suffix]
    elif kind == "binary":
        suffix = draw(st.sampled_from(sorted(_BINARY)))
        value = magnitude * 1024 ** _BINARY[suffix]
    else:
        exponent = draw(st.integers(-MAX_EXPONENT, MAX_EXPONENT))
        letter, plus = draw(st.sampled_from("eE")), draw(st.sampled_from(["", "+"]))
        suffix = f"{letter}{plus if exponent >= 0 else ''}{exponent}"
        value = magnitude * Fraction(10) ** exponent
    return f"{sign}{number}{suffix}", -value if sign == "-" else value


@given(quantities())
def test_every_quantity_of_the_grammar_parses_to_its_value(case: tuple[str, Fraction]) -> None:
    text, value = case
    assert parse_quantity(text) == value
    assert re.fullmatch(PATTERN, text)
    assert bool(re.fullmatch(UNSIGNED_PATTERN, text)) == (not text.startswith("-"))


@example("0Ei")  # a binary suffix that starts like an exponent
@example("1E400")  # an exponent the parser bounds
@given(st.text("0123456789.+-eEKMGTPinumk", max_size=8))
def test_the_pattern_accepts_what_the_parser_accepts(text: str) -> None:
    """The chart's schema and the parser agree on every string, but for the exponents the
    parser bounds."""
    try:
        parse(text)
    except ValueError:
        accepted = False
    else:
        accepted = True
    match = re.fullmatch(PATTERN, text)
    suffix = match.group(2) if match else ""
    # An exponent is e/E and a signed integer; "Ei" (exbi) is a binary suffix, not one.
    exponent = re.fullmatch(r"[eE]([+-]?\d+)", suffix)
    bounded = exponent is not None and abs(int(exponent.group(1))) > MAX_EXPONENT
    assert accepted == (match is not None and not bounded), text


# --- the two callers ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("resource", "text"),
    [
        ("cpu", "4"),
        ("cpu", "750m"),
        ("cpu", 2),
        ("cpu", "1e3"),  # an exponent is a way to write the number, not a unit
        ("memory", "16Gi"),
        ("memory", "512Mi"),
        ("memory", "1e9"),
        ("ephemeral-storage", "100Gi"),
        ("nvidia.com/gpu", "1"),
        ("nvidia.com/gpu", 1),
        ("nvidia.com/gpu", "1e1"),
        ("cpu", "+2"),
    ],
)
def test_settings_accept_requests(resource: str, text: object) -> None:
    assert check_quantity(resource, text) == str(text).strip()


@pytest.mark.parametrize(
    ("resource", "text", "error"),
    [
        ("cpu", "lots", "invalid quantity 'lots' for cpu"),
        ("cpu", "2Gi", "invalid cpu quantity '2Gi' (use cores like '2' or '750m')"),
        ("cpu", "2k", "invalid cpu quantity '2k' (use cores like '2' or '750m')"),
        ("memory", "512m", "invalid memory quantity '512m' (did you mean 512Mi?)"),
        ("cpu", "0", "quantity for cpu must be more than 0, got '0'"),
        ("cpu", "-1", "quantity for cpu must be more than 0, got '-1'"),
        ("nvidia.com/gpu", "0.5", "extended resource nvidia.com/gpu needs a whole number"),
        ("nvidia.com/gpu", ".5", "extended resource nvidia.com/gpu needs a whole number"),
        ("memory", True, "invalid quantity True for memory"),
    ],
)
def test_settings_refuse_requests(resource: str, text: object, error: str) -> None:
    with pytest.raises(ValueError, match=re.escape(error)):
        check_quantity(resource, text)


def test_nodepool_limits_and_usage() -> None:
    """Limits and usage as Karpenter's NodePools carry them; an unreadable entry is left out
    (never guessed)."""
    pool = nodepool_from(
        {
            "metadata": {"name": "default"},
            "spec": {"limits": {"cpu": "1000", "memory": "1000Gi", "nvidia.com/gpu": "x"}},
            "status": {"resources": {"cpu": "2500m", "memory": "7905744Ki", "pods": "110"}},
        }
    )
    assert pool.limits == {"cpu": Fraction(1000), "memory": Fraction(1000 * 2**30)}
    assert pool.used == {
        "cpu": Fraction(5, 2),
        "memory": Fraction(7905744 * 1024),
        "pods": Fraction(110),
    }
