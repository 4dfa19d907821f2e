"""Kubernetes quantities to exact integers: the grammar, the units and the rounding."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import pytest

from kgpu.model.quantity import (
    Quantity,
    QuantityError,
    cpu_milli,
    memory_mib,
    parse_quantity,
    whole_number,
)

PARSED = [
    ("plain", "4", Fraction(4)),
    ("milli", "500m", Fraction(1, 2)),
    ("decimal", "1.5", Fraction(3, 2)),
    ("leading dot", ".5", Fraction(1, 2)),
    ("trailing dot", "5.", Fraction(5)),
    ("plus sign", "+2", Fraction(2)),
    ("minus sign", "-2", Fraction(-2)),
    ("nano", "250n", Fraction(1, 4_000_000)),
    ("micro", "3u", Fraction(3, 1_000_000)),
    ("kilo", "2k", Fraction(2000)),
    ("mega", "16M", Fraction(16_000_000)),
    ("giga", "16G", Fraction(16_000_000_000)),
    ("tera", "1T", Fraction(10**12)),
    ("peta", "1P", Fraction(10**15)),
    ("exa is a bare E", "1E", Fraction(10**18)),
    ("kibi", "100Ki", Fraction(102_400)),
    ("mebi", "1Mi", Fraction(2**20)),
    ("gibi", "8Gi", Fraction(8 * 2**30)),
    ("fractional gibi", "1.5Gi", Fraction(3 * 2**29)),
    ("tebi", "1Ti", Fraction(2**40)),
    ("exponent", "1e3", Fraction(1000)),
    ("capital exponent", "1E3", Fraction(1000)),
    ("negative exponent", "25e-2", Fraction(1, 4)),
    ("YAML integer", 4, Fraction(4)),
    ("YAML float is read as written", 0.1, Fraction(1, 10)),
    ("already exact", Fraction(7, 3), Fraction(7, 3)),
]


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in PARSED], ids=[c[0] for c in PARSED])
def test_parse_quantity(text: Quantity, expected: Fraction) -> None:
    assert parse_quantity(text) == expected


CONVERTED = [
    # name, function, value, expected
    ("cpu milli", cpu_milli, "500m", 500),
    ("cpu cores", cpu_milli, "4", 4000),
    ("cpu decimal", cpu_milli, "0.1", 100),
    ("cpu below a milli rounds up", cpu_milli, "100u", 1),
    ("cpu exponent", cpu_milli, "1e3", 1_000_000),
    ("memory Gi", memory_mib, "8Gi", 8192),
    ("memory G rounds up", memory_mib, "16G", 15259),
    ("memory Ki rounds up", memory_mib, "100Ki", 1),
    ("memory plain bytes", memory_mib, "1048576", 1),
    ("memory zero", memory_mib, "0", 0),
    ("count", whole_number, "8", 8),
    ("count exponent", whole_number, "1e1", 10),
    ("count kilo", whole_number, "2k", 2000),
]


@pytest.mark.parametrize(
    ("convert", "value", "expected"), [c[1:] for c in CONVERTED], ids=[c[0] for c in CONVERTED]
)
def test_conversion(convert: Callable[[Quantity], int], value: Quantity, expected: int) -> None:
    assert convert(value) == expected


def test_capacities_round_down() -> None:
    assert memory_mib("16G", round_up=False) == 15258
    assert cpu_milli("100u", round_up=False) == 0


BAD = [
    (
        "word",
        "abc",
        'quantity "abc" is not usable, expected a quantity such as 500m, 4, 1.5, 8Gi or 1e3',
    ),
    (
        "empty",
        "",
        'quantity "" is not usable, expected a quantity such as 500m, 4, 1.5, 8Gi or 1e3',
    ),
    (
        "space",
        " 1",
        'quantity " 1" is not usable, expected a quantity such as 500m, 4, 1.5, 8Gi or 1e3',
    ),
    (
        "two dots",
        "1.2.3",
        'quantity "1.2.3" is not usable, expected a quantity such as 500m, 4, 1.5, 8Gi or 1e3',
    ),
    (
        "lower-case kibi",
        "1ki",
        'quantity "1ki" is not usable, expected a quantity such as 500m, 4, 1.5, 8Gi or 1e3',
    ),
    (
        "unit word",
        "1GB",
        'quantity "1GB" is not usable, expected a quantity such as 500m, 4, 1.5, 8Gi or 1e3',
    ),
    (
        "boolean",
        True,
        "quantity true is not usable, expected a quantity such as 500m, 4, 1.5, 8Gi or 1e3",
    ),
    (
        "huge exponent",
        "1e100",
        'quantity "1e100" is not usable, expected an exponent between -30 and 30',
    ),
    ("past int64", "9Ei", 'quantity "9Ei" is not usable, expected a quantity below 2^63'),
    ("negative", "-1", 'quantity "-1" is not usable, expected a quantity of at least 0'),
    (
        "infinite",
        float("inf"),
        "quantity Infinity is not usable, expected a quantity such as 500m, 4, 1.5, 8Gi or 1e3",
    ),
]


@pytest.mark.parametrize(("value", "message"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_quantity_is_rejected_with_its_value(value: Quantity, message: str) -> None:
    with pytest.raises(QuantityError) as info:
        cpu_milli(value)
    assert str(info.value) == message


def test_fractional_count_is_rejected() -> None:
    with pytest.raises(
        QuantityError, match=r'quantity "1\.5" is not usable, expected a whole number'
    ):
        whole_number("1.5")
