"""Device selectors in CEL, evaluated with the ``cel`` library (common-expression-language,
Rust's ``cel`` crate behind Python bindings), not by an evaluator of our own.

What an expression sees, as in Kubernetes' DRA CEL environment:

- ``device.driver``: the driver's name;
- ``device.attributes["domain"].name``: an attribute, bool, int or string; a ``version``
  attribute reads as its text (compare it with ``.compareTo(semver("1.2.3"))``,
  ``.isGreaterThan``, ``.isLessThan``);
- ``device.capacity["domain"].name``: a capacity as a number in its base unit (bytes,
  count): an integer where it is whole, which every capacity NVIDIA's driver publishes is.
  ``quantity("40Gi")`` reads as the same number, so both ``capacity >= quantity("40Gi")``
  and Kubernetes' ``capacity.compareTo(quantity("40Gi")) >= 0`` work; so do
  ``.isGreaterThan(q)``, ``.isLessThan(q)`` and ``.asInteger()``.

The subset, against Kubernetes: quantities are numbers, not a type of their own (so
``.add``/``.sub`` and ``.sign`` are absent, ``quantity(...) == 1024`` is true); a missing
attribute or domain is an error, not ``false`` (guard it with ``"name" in ...`` or
``has(...)``). Cost is bounded before evaluation rather than measured during it: an
expression of at most 10 KiB (Kubernetes' limit) with at most one comprehension macro
(``all``, ``exists``, ``exists_one``, ``map``, ``filter``), over a device's 32 attributes
and capacities at most, does a bounded amount of work.

An expression that does not compile is the object's error (its claim or class cannot be
allocated); one that fails on a device, or gives no bool, means that device does not match,
with the error kept for ``explain``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Final

from kgpu.model.dra import MAX_CEL_LENGTH, Device, SemVer, SemVerError, parse_semver
from kgpu.model.quantity import QuantityError, parse_quantity

if TYPE_CHECKING:
    import cel

MAX_MACROS: Final = 1
# Programs kept compiled, by expression: a cluster has a few classes and claim shapes.
MAX_CACHED: Final = 4096
_MACRO: Final = re.compile(r"\.\s*(all|exists|exists_one|map|filter)\s*\(")


class SelectorError(ValueError):
    """An expression kgpu will not evaluate: too long, too costly, or not CEL."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """A selector's answer on one device: matched, or why not (``error`` when it failed)."""

    matched: bool
    error: str = ""


Number = int | float


def _number(value: Fraction) -> Number:
    return int(value) if value.denominator == 1 else float(value)


def _quantity(text: object) -> Number:
    if not isinstance(text, str):
        raise TypeError(f"quantity() takes a string, got {text!r}")
    try:
        return _number(parse_quantity(text))
    except QuantityError as exc:
        raise ValueError(str(exc)) from None


def _semver(text: object) -> str:
    if not isinstance(text, str):
        raise TypeError(f"semver() takes a string, got {text!r}")
    parse_semver(text)  # refuse what is no version
    return text


def _compare(a: object, b: object) -> int:
    """Kubernetes' ``compareTo``: -1, 0 or 1; numbers (quantities) or versions (text)."""
    if isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool):
        return (a > b) - (a < b)
    if isinstance(a, str) and isinstance(b, str):
        try:
            x, y = parse_semver(a), parse_semver(b)
        except SemVerError as exc:
            raise ValueError(str(exc)) from None
        return (x > y) - (x < y)
    raise TypeError(f"compareTo needs two quantities or two versions, got {a!r} and {b!r}")


def _as_integer(a: object) -> int:
    if isinstance(a, int) and not isinstance(a, bool):
        return a
    raise TypeError(f"asInteger needs a whole quantity, got {a!r}")


_FUNCTIONS: Final[dict[str, Callable[..., Any]]] = {
    "quantity": _quantity,
    "semver": _semver,
    "compareTo": _compare,
    "isGreaterThan": lambda a, b: _compare(a, b) > 0,
    "isLessThan": lambda a, b: _compare(a, b) < 0,
    "asInteger": _as_integer,
}


def check_expression(expression: str) -> None:
    """Refuse an expression past the bounds; :func:`compile_selector` also compiles it."""
    if len(expression) > MAX_CEL_LENGTH:
        raise SelectorError(f"is {len(expression)} characters, at most {MAX_CEL_LENGTH}")
    macros = len(_MACRO.findall(expression))
    if macros > MAX_MACROS:
        raise SelectorError(
            f"uses {macros} comprehension macros (all, exists, exists_one, map, filter); "
            f"kgpu bounds a selector's cost to at most {MAX_MACROS}"
        )


_compiled: dict[str, cel.Program] = {}


def compile_selector(expression: str) -> cel.Program:
    """The compiled program, or :class:`SelectorError` saying why there is none."""
    program = _compiled.get(expression)
    if program is not None:
        return program
    check_expression(expression)
    # Imported on first use: the package's own command line (typer, prompt-toolkit) comes
    # with it, which a cluster without DRA never needs to load.
    import cel

    try:
        program = cel.compile(expression)
    except Exception as exc:  # the library raises ValueError; any failure means no program
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SelectorError(f"is not CEL: {first}") from None
    if len(_compiled) >= MAX_CACHED:
        _compiled.clear()
    _compiled[expression] = program
    return program


def _split(qualified: str) -> tuple[str, str]:
    domain, _, name = qualified.rpartition("/")
    return domain, name


def _attribute(value: bool | int | str | SemVer) -> bool | int | str:
    return str(value) if isinstance(value, SemVer) else value


def device_variables(driver: str, device: Device) -> dict[str, Any]:
    """``device`` as a selector sees it."""
    attributes: dict[str, dict[str, Any]] = {}
    for qualified, value in device.attributes.items():
        domain, name = _split(qualified)
        attributes.setdefault(domain, {})[name] = _attribute(value)
    capacity: dict[str, dict[str, Any]] = {}
    for qualified, amount in device.capacity.items():
        domain, name = _split(qualified)
        capacity.setdefault(domain, {})[name] = _number(amount)
    return {"driver": driver, "attributes": attributes, "capacity": capacity}


def evaluate(program: cel.Program, variables: dict[str, Any]) -> Outcome:
    """One selector on one device (``variables`` from :func:`device_variables`)."""
    import cel

    context = cel.Context(variables={"device": variables}, functions=_FUNCTIONS)
    try:
        result = program.execute(context)
    except Exception as exc:  # CEL's runtime errors (no such key, bad types) and ours
        text = str(exc) or type(exc).__name__
        if isinstance(exc, KeyError):
            text = f"no such key: {text}"
        return Outcome(False, f"CEL runtime error: {text}")
    if not isinstance(result, bool):
        return Outcome(False, f"CEL result is {result!r}, expected a bool")
    return Outcome(result)
