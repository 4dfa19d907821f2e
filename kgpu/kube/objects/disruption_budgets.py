"""PodDisruptionBudgets (``policy/v1beta1`` on v1.20 servers, ``policy/v1`` from 1.21) into
the model's :class:`~kgpu.model.disruption.DisruptionBudget`, with the disruptions the
disruption controller allows now.

Every budget is untrusted input (any tenant may create one in its namespace): its selector
is bounded (:data:`MAX_SELECTOR_TERMS` terms, :data:`MAX_SELECTOR_VALUES` values each) and
its numbers too; a bad one raises a ``ConversionError`` naming the object, the field,
the value and what was expected, and the caller refuses that budget alone.

What the Eviction API counts, read as it counts it:

- ``status.disruptionsAllowed``, the disruption controller's figure. Absent (no controller
  has looked yet), or written for an older ``metadata.generation`` than the budget's
  (``status.observedGeneration`` behind), the server refuses every eviction it covers with
  429, so it reads as 0.
- An empty selector selects no pod in ``policy/v1beta1`` (and on any server before 1.21,
  whose Eviction API skips such budgets) and every pod of the namespace in ``policy/v1``:
  :attr:`LiveBudget.selects_none` says which.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from kgpu.kube.objects.fields import Fields
from kgpu.kube.objects.label_selector import label_selector_from_k8s
from kgpu.model.disruption import Amount, DisruptionBudget

# Terms of one selector (matchLabels entries plus matchExpressions) and values of one
# expression: real budgets name an app with one to three labels.
MAX_SELECTOR_TERMS: Final = 64
MAX_SELECTOR_VALUES: Final = 256
# Disruptions one budget may allow, and a count in minAvailable or maxUnavailable: the
# controller writes int32s; past a million pods no namespace holds.
MAX_COUNT: Final = 2**20
V1BETA1: Final = "policy/v1beta1"


@dataclass(frozen=True, slots=True)
class LiveBudget:
    """One budget as the cluster has it: the spec, the disruptions allowed now, and whether
    it selects no pod at all (an empty selector read as ``policy/v1beta1``)."""

    budget: DisruptionBudget
    allowed: int
    selects_none: bool = False

    def selects(self, namespace: str, labels: Mapping[str, str]) -> bool:
        return not self.selects_none and self.budget.selects(namespace, labels)


def budget_from_k8s(obj: Mapping[str, Any]) -> LiveBudget:
    """One PodDisruptionBudget, or a ConversionError naming what is wrong with it."""
    m = obj.get("metadata")
    meta = m if isinstance(m, Mapping) else {}
    fields = Fields(f"PodDisruptionBudget {meta.get('namespace')}/{meta.get('name')}")
    name, namespace = fields.named(obj)
    spec = fields.mapping(obj, "spec", "spec")
    selector_obj = fields.mapping(spec, "selector", "spec.selector")
    terms = len(fields.mapping(selector_obj, "matchLabels", "spec.selector.matchLabels"))
    expressions = fields.items(selector_obj, "matchExpressions", "spec.selector.matchExpressions")
    if terms + len(expressions) > MAX_SELECTOR_TERMS:
        raise fields.fail(
            "spec.selector",
            f"{terms + len(expressions)} terms",
            f"at most {MAX_SELECTOR_TERMS} matchLabels and matchExpressions",
        )
    for i, item in enumerate(expressions):
        values = item.get("values")
        if isinstance(values, list) and len(values) > MAX_SELECTOR_VALUES:
            raise fields.fail(
                f"spec.selector.matchExpressions[{i}].values",
                f"{len(values)} values",
                f"at most {MAX_SELECTOR_VALUES}",
            )
    selector = label_selector_from_k8s(fields.ref, spec, "selector", "spec.selector")
    least = _amount(fields, spec, "minAvailable")
    most = _amount(fields, spec, "maxUnavailable")
    if (least is None) == (most is None):
        raise fields.fail(
            "spec", "both" if least else "neither", "exactly one of minAvailable, maxUnavailable"
        )
    budget = DisruptionBudget(f"{namespace}/{name}", selector, least, most)
    empty = not selector.match_labels and not selector.match_expressions
    v1beta1 = obj.get("apiVersion") == V1BETA1
    return LiveBudget(budget, _allowed(fields, obj), selects_none=empty and v1beta1)


def _amount(fields: Fields, spec: Mapping[str, Any], key: str) -> Amount | None:
    """An IntOrString: a count, or "N%" with N from 0 to 100."""
    value = spec.get(key)
    field = f"spec.{key}"
    if value is None:
        return None
    if isinstance(value, bool):  # a bool is an int to Python, not to the API
        raise fields.fail(field, value, "a count or a percentage such as 50%")
    if isinstance(value, int):
        if not 0 <= value <= MAX_COUNT:
            raise fields.fail(field, value, f"a count from 0 to {MAX_COUNT}")
        return Amount(value)
    if isinstance(value, str) and value.endswith("%") and value[:-1].isdigit():
        digits = value[:-1]
        if len(digits) <= 3 and int(digits) <= 100:
            return Amount(int(digits), percent=True)
    raise fields.fail(field, value, "a count or a percentage from 0% to 100%")


def _allowed(fields: Fields, obj: Mapping[str, Any]) -> int:
    """``status.disruptionsAllowed``: 0 where absent or stale, as the Eviction API reads it."""
    status = fields.mapping(obj, "status", "status")
    meta = fields.mapping(obj, "metadata", "metadata")
    generation = meta.get("generation")
    observed = status.get("observedGeneration")
    for value, field in ((generation, "metadata.generation"),
                         (observed, "status.observedGeneration")):  # fmt: skip
        if value is not None and (type(value) is not int or value < 0):
            raise fields.fail(field, value, "a whole number, at least 0")
    if isinstance(generation, int) and isinstance(observed, int) and observed < generation:
        return 0  # the controller has not looked at this spec yet: the server refuses
    value = status.get("disruptionsAllowed")
    if value is None:
        return 0
    if type(value) is not int or not 0 <= value <= MAX_COUNT:
        raise fields.fail(
            "status.disruptionsAllowed", value, f"a whole number from 0 to {MAX_COUNT}"
        )
    return value
