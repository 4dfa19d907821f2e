"""A ``metav1.LabelSelector`` field of a custom resource into the model's
:class:`~kgpu.model.workspace.LabelSelector`, shared by kgpu's Workspace and KAITO's (both
keep it at ``resource.labelSelector``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from kgpu.kube.objects.fields import ConversionError
from kgpu.model.workspace import LabelSelector, Operator, Requirement

OPERATORS: Final = ", ".join(op.value for op in Operator)


def label_selector_from_k8s(
    ref: str, parent: Mapping[str, Any], key: str, field: str
) -> LabelSelector:
    """``parent[key]`` as a selector; absent is the empty selector (every node)."""
    selector = parent.get(key)
    if selector is None:
        return LabelSelector()
    if not isinstance(selector, Mapping):
        raise ConversionError(ref, field, selector, "a mapping")
    labels = []
    match_labels = selector.get("matchLabels")
    if match_labels is not None and not isinstance(match_labels, Mapping):
        raise ConversionError(ref, f"{field}.matchLabels", match_labels, "a mapping")
    for k, v in (match_labels or {}).items():
        if not isinstance(v, str):
            raise ConversionError(
                ref, f"{field}.matchLabels[{k}]", v, "a string (quote it in YAML)"
            )
        labels.append((str(k), v))
    expressions = selector.get("matchExpressions") or []
    if not isinstance(expressions, list):
        raise ConversionError(ref, f"{field}.matchExpressions", expressions, "a list")
    requirements = []
    for i, item in enumerate(expressions):
        where = f"{field}.matchExpressions[{i}]"
        if not isinstance(item, Mapping):
            raise ConversionError(ref, where, item, "a mapping")
        name = item.get("key")
        if not isinstance(name, str) or not name:
            raise ConversionError(ref, f"{where}.key", name, "a non-empty string")
        operator = item.get("operator")
        if operator not in tuple(Operator):
            raise ConversionError(ref, f"{where}.operator", operator, f"one of {OPERATORS}")
        values = item.get("values") or []
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise ConversionError(ref, f"{where}.values", values, "a list of strings")
        op = Operator(operator)
        if (op in (Operator.IN, Operator.NOT_IN)) != bool(values):
            expected = "at least one value" if values == [] else f"no values with {op.value}"
            raise ConversionError(ref, f"{where}.values", values, expected)
        requirements.append(Requirement(name, op, tuple(values)))
    return LabelSelector(tuple(sorted(labels)), tuple(requirements))
