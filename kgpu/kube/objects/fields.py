"""Typed reads of Kubernetes objects' fields, failing with messages that name the object,
the field, the value and what was expected (shared by every parser of the edge)."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any, Final

from kgpu.model.limits import show_json
from kgpu.model.quantity import EXPECTED, QuantityError, non_negative

MISSING: Final = object()


def show(value: object) -> str:
    """A value as the message shows it: JSON-like, so strings are quoted and numbers not;
    cut short past :data:`~kgpu.model.limits.MAX_SHOWN_CHARS` (an object may hold a
    megabyte of it)."""
    if value is MISSING:
        return "missing"
    return show_json(value)


class ConversionError(ValueError):
    """A Kubernetes object that cannot be turned into a model object.

    ``obj`` is the object as "Kind namespace/name", ``field`` the offending field, ``value``
    what it held and ``expected`` what would have been accepted.
    """

    def __init__(self, obj: str, field: str, value: object, expected: str) -> None:
        self.obj = obj
        self.field = field
        self.value = value
        self.expected = expected
        super().__init__(f"{obj}: {field} is {show(value)}, expected {expected}")


class Fields:
    """Typed reads from one object's dicts, failing with the object's name in the message."""

    def __init__(self, ref: str) -> None:
        self.ref = ref

    def fail(self, field: str, value: object, expected: str) -> ConversionError:
        return ConversionError(self.ref, field, value, expected)

    def named(self, obj: Mapping[str, Any]) -> tuple[str, str]:
        """The object's ``metadata.name`` (required) and ``metadata.namespace`` ("default"
        where unset)."""
        meta = self.mapping(obj, "metadata", "metadata")
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            raise self.fail("metadata.name", name, "a non-empty string")
        return name, self.string(meta, "namespace", "metadata.namespace") or "default"

    def mapping(self, parent: Mapping[str, Any], key: str, field: str) -> Mapping[str, Any]:
        value = parent.get(key)
        if type(value) is dict:  # as decoded from JSON: skip the slower ABC check
            return value
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self.fail(field, value, "a mapping")
        return value

    def items(self, parent: Mapping[str, Any], key: str, field: str) -> list[Mapping[str, Any]]:
        value = parent.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(field, value, "a list")
        for i, item in enumerate(value):
            if type(item) is not dict and not isinstance(item, Mapping):
                raise self.fail(f"{field}[{i}]", item, "a mapping")
        return value

    def string(self, parent: Mapping[str, Any], key: str, field: str, default: str = "") -> str:
        value = parent.get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            raise self.fail(field, value, "a string")
        return value

    def strings(self, parent: Mapping[str, Any], key: str, what: str) -> dict[str, str]:
        """Labels, annotations or a node selector: string keys to string values."""
        out = {}
        for k, v in self.mapping(parent, key, what).items():
            if not isinstance(v, str):
                raise self.fail(f"{what} {k}", v, "a string (quote it in YAML)")
            out[str(k)] = v
        return out

    def quantity(self, value: object, field: str) -> Fraction:
        if not isinstance(value, str | int | float):
            raise self.fail(field, value, EXPECTED)
        try:
            return non_negative(value)
        except QuantityError as exc:
            raise self.fail(field, value, exc.expected) from None

    def whole(self, value: object, field: str, expected: str) -> int:
        amount = self.quantity(value, field)
        if amount.denominator != 1:
            raise self.fail(field, value, expected)
        return int(amount)
