"""Kubernetes resource quantities ("500m", "4", "8Gi", "1e3") as exact integers.

The grammar is Kubernetes' own (``k8s.io/apimachinery/pkg/api/resource``): a signed decimal
number followed by nothing, a binary suffix (Ki Mi Gi Ti Pi Ei), a decimal suffix
(n u m k M G T P E) or an exponent (e3, E-2). Values are parsed into a :class:`Fraction`
so that no quantity goes through a float; the conversions then round to the integer unit
the core works in.

Rounding follows what keeps the simulator on the safe side: a request is rounded up (a pod
asking 1.5 MiB takes 2, as kube-scheduler rounds CPU up to whole milli) and a capacity is
rounded down (a node offering 1.5 MiB offers 1), so a pod never fits in kgpu where it
would not fit in Kubernetes.
"""

from __future__ import annotations

import json
import math
import re
from fractions import Fraction
from typing import Final

from kgpu.model.units import MIB, MILLI_PER_CPU

_BINARY: Final = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL: Final = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
# The exponent alternative comes first so that "1E3" is 1000 while a bare "1E" is one exa.
_QUANTITY: Final = re.compile(
    r"(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:[eE](?P<exp>[+-]?[0-9]+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)"
)
# Kubernetes keeps quantities in an int64 of the smallest unit; beyond that nothing is real.
_LIMIT: Final = 2**63
_MAX_EXPONENT: Final = 30
# Every quantity below 2^63 is written in far fewer characters; a longer text is refused
# before Python turns its digits into an integer (which it refuses past 4,300 digits).
_MAX_TEXT: Final = 64

EXPECTED: Final = "a quantity such as 500m, 4, 1.5, 8Gi or 1e3"


class QuantityError(ValueError):
    """A value that is not a usable quantity; ``expected`` says what would have been."""

    def __init__(self, value: object, expected: str) -> None:
        self.value = value
        self.expected = expected
        shown = json.dumps(value, default=str)
        super().__init__(f"quantity {shown} is not usable, expected {expected}")


Quantity = str | int | float | Fraction


def parse_quantity(value: Quantity) -> Fraction:
    """The exact value of a quantity in its base unit (cores, bytes, count).

    YAML turns an unquoted ``cpu: 2`` or ``cpu: 0.5`` into a number; those are read as the
    decimal they were written as, never as a binary float.
    """
    if isinstance(value, Fraction):
        return value
    if isinstance(value, bool):
        raise QuantityError(value, EXPECTED)
    if isinstance(value, int):
        text = str(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(value, EXPECTED)
        text = repr(value)  # the shortest decimal that reads back as this float
    elif isinstance(value, str):
        known = _PARSED.get(value)
        if known is not None:
            return known
        text = value
    else:
        raise QuantityError(value, EXPECTED)
    number = _parse_text(value, text)
    if isinstance(value, str) and len(_PARSED) < _PARSED_MAX:
        _PARSED[value] = number
    return number


# Texts already read, and what they read as (a Fraction is immutable): a cluster's pods
# and nodes write the same few quantities ("1", "2Gi", "8") thousands of times, and reading
# one (a regular expression, Fractions) was the largest part of reading a new pod in the
# live scheduler's snapshot. Bounded, so odd texts cannot grow it without end; errors are
# never kept (each raises again).
_PARSED: dict[str, Fraction] = {}
_PARSED_MAX: Final = 4096


def _parse_text(value: Quantity, text: str) -> Fraction:
    if len(text) > _MAX_TEXT:
        raise QuantityError(value, f"a quantity of at most {_MAX_TEXT} characters")
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise QuantityError(value, EXPECTED)
    number = Fraction(match["number"])
    if match["exp"] is not None:
        exponent = int(match["exp"])
        if abs(exponent) > _MAX_EXPONENT:
            raise QuantityError(value, f"an exponent between -{_MAX_EXPONENT} and {_MAX_EXPONENT}")
        number *= Fraction(10) ** exponent
    else:
        suffix = match["suffix"] or ""
        number *= _BINARY[suffix] if suffix in _BINARY else _DECIMAL[suffix]
    if match["sign"] == "-":
        number = -number
    if abs(number) >= _LIMIT:
        raise QuantityError(value, "a quantity below 2^63")
    return number


def non_negative(value: Quantity) -> Fraction:
    """A quantity that may be a request or a capacity: zero or more."""
    quantity = parse_quantity(value)
    if quantity < 0:
        raise QuantityError(value, "a quantity of at least 0")
    return quantity


def _round(quantity: Fraction, round_up: bool) -> int:
    return math.ceil(quantity) if round_up else math.floor(quantity)


def cpu_milli(value: Quantity, *, round_up: bool = True) -> int:
    """CPU in milli-cores: "500m" → 500, "2" → 2000, "0.1" → 100."""
    return _round(non_negative(value) * MILLI_PER_CPU, round_up)


def memory_mib(value: Quantity, *, round_up: bool = True) -> int:
    """Memory in MiB: "8Gi" → 8192, "16G" → 15259 (rounded up), "100Ki" → 1 (rounded up)."""
    return _round(non_negative(value) / MIB, round_up)


def whole_number(value: Quantity) -> int:
    """A whole number of things (pods, GPUs): "8" → 8, "1e1" → 10; "1.5" is an error."""
    quantity = non_negative(value)
    if quantity.denominator != 1:
        raise QuantityError(value, "a whole number")
    return int(quantity)
