"""PodDisruptionBudgets as ``kgpu run`` reads them for defragmentation: what each selects,
the disruptions it allows now, and each bad one refused with its field and value."""

from __future__ import annotations

from typing import Any

import pytest

from kgpu.kube.objects.disruption_budgets import budget_from_k8s
from kgpu.kube.objects.fields import ConversionError


def pdb(
    spec: dict[str, Any] | None = None,
    status: dict[str, Any] | None = None,
    api_version: str = "policy/v1beta1",
    generation: int = 2,
) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "keep", "namespace": "ns", "generation": generation},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}
        if spec is None
        else spec,
        "status": {"disruptionsAllowed": 2, "observedGeneration": 2} if status is None else status,
    }


@pytest.mark.parametrize(
    ("obj", "allowed", "describe"),
    [
        (pdb(), 2, "minAvailable 1"),
        (pdb({"maxUnavailable": "25%", "selector": {"matchLabels": {"a": "b"}}}), 2,
         "maxUnavailable 25%"),
        # the controller has not looked at this spec yet: the server refuses (429)
        (pdb(status={"disruptionsAllowed": 2, "observedGeneration": 1}), 0, "minAvailable 1"),
        (pdb(status={}), 0, "minAvailable 1"),  # no controller yet
    ],
)  # fmt: skip
def test_a_budget_reads_its_spec_and_the_disruptions_allowed(
    obj: dict[str, Any], allowed: int, describe: str
) -> None:
    read = budget_from_k8s(obj)
    assert (read.budget.key, read.allowed, read.budget.describe()) == ("ns/keep", allowed, describe)


def test_an_empty_selector_selects_nothing_in_v1beta1_and_everything_in_v1() -> None:
    empty = {"minAvailable": 1, "selector": {}}
    assert not budget_from_k8s(pdb(empty)).selects("ns", {"app": "web"})
    assert budget_from_k8s(pdb(empty, api_version="policy/v1")).selects("ns", {"app": "web"})
    labelled = budget_from_k8s(pdb())
    assert labelled.selects("ns", {"app": "web"})
    assert not labelled.selects("ns", {"app": "db"})
    assert not labelled.selects("other", {"app": "web"})


SELECTOR = {"matchLabels": {"app": "web"}}


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (pdb({"selector": SELECTOR}),
         'spec is "neither", expected exactly one of minAvailable, maxUnavailable'),
        (pdb({"minAvailable": 1, "maxUnavailable": 1, "selector": SELECTOR}),
         'spec is "both", expected exactly one of minAvailable, maxUnavailable'),
        (pdb({"minAvailable": "150%", "selector": SELECTOR}),
         'spec.minAvailable is "150%", expected a count or a percentage from 0% to 100%'),
        (pdb({"minAvailable": True, "selector": SELECTOR}),
         "spec.minAvailable is true, expected a count or a percentage such as 50%"),
        (pdb({"maxUnavailable": -1, "selector": SELECTOR}),
         "spec.maxUnavailable is -1, expected a count from 0 to 1048576"),
        (pdb({"minAvailable": 1,
              "selector": {"matchLabels": {f"k{i}": "v" for i in range(65)}}}),
         'spec.selector is "65 terms", expected at most 64 matchLabels and matchExpressions'),
        (pdb({"minAvailable": 1, "selector": {"matchExpressions": [
            {"key": "app", "operator": "In", "values": [str(i) for i in range(300)]}]}}),
         'spec.selector.matchExpressions[0].values is "300 values", expected at most 256'),
        (pdb({"minAvailable": 1, "selector": {"matchLabels": {"app": 7}}}),
         "spec.selector.matchLabels[app] is 7, expected a string (quote it in YAML)"),
        (pdb(status={"disruptionsAllowed": "2"}),
         'status.disruptionsAllowed is "2", expected a whole number from 0 to 1048576'),
        (pdb(status={"disruptionsAllowed": -1}),
         "status.disruptionsAllowed is -1, expected a whole number from 0 to 1048576"),
        (pdb(status={"disruptionsAllowed": 1, "observedGeneration": "x"}),
         'status.observedGeneration is "x", expected a whole number, at least 0'),
    ],
)  # fmt: skip
def test_a_bad_budget_names_its_field_value_and_what_was_expected(
    obj: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConversionError) as caught:
        budget_from_k8s(obj)
    assert str(caught.value) == f"PodDisruptionBudget ns/keep: {message}"
