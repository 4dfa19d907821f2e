"""The Eviction API of the API double (``POST pods/{name}/eviction``), with the v1.20
server's PodDisruptionBudget semantics (``pkg/registry/core/pod/storage/eviction.go``):

- a pod that is Succeeded, Failed, Pending or already being deleted is deleted without
  looking at budgets;
- the budgets of the pod's namespace whose selector matches its labels count; an empty
  selector matches nothing (policy/v1beta1). More than one: 500;
- one: refused with 429 Too Many Requests while ``status.observedGeneration`` is behind
  ``metadata.generation``, or ``status.disruptionsAllowed`` would go below 0; else
  ``disruptionsAllowed`` goes down by one and the pod is named in ``disruptedPods``;
- then the pod is deleted as a DELETE would (graceful with ``graceful_pods``), its
  ``deleteOptions.preconditions.uid`` checked (409).

Called by :meth:`tests.kube_double.KubeDouble.handle` with the double's lock held.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.kube_double import KubeDouble

PODS = ("", "pods")
BUDGETS = ("policy", "poddisruptionbudgets")
TOO_MANY = "Cannot evict pod as it would violate the pod's disruption budget."


def evict(double: KubeDouble, key: str, body: dict[str, Any]) -> dict[str, Any]:
    from tests.kube_double import ApiError, _now, status_body

    pod = double._objects[PODS].get(key)
    if pod is None:
        raise ApiError(404, "NotFound", f'pods "{key}" not found')
    want = ((body.get("deleteOptions") or {}).get("preconditions") or {}).get("uid")
    if want and want != pod["metadata"]["uid"]:
        raise ApiError(
            409,
            "Conflict",
            f"Precondition failed: UID in precondition: {want}, UID in object meta: "
            f"{pod['metadata']['uid']}",
        )
    phase = (pod.get("status") or {}).get("phase")
    if phase not in ("Succeeded", "Failed", "Pending") and not pod["metadata"].get(
        "deletionTimestamp"
    ):
        budgets = _covering(double, pod)
        if len(budgets) > 1:
            raise ApiError(
                500,
                "InternalError",
                "This pod has more than one PodDisruptionBudget, which the eviction "
                "subresource does not support.",
            )
        if budgets:
            _take_one(double, budgets[0], pod["metadata"]["name"], _now())
    if double.graceful_pods and pod["spec"].get("nodeName"):
        double._terminate(key, pod)
    else:
        double._delete(PODS, key)
    return status_body(201, "", "")


def _covering(double: KubeDouble, pod: dict[str, Any]) -> list[dict[str, Any]]:
    namespace = pod["metadata"].get("namespace")
    labels = pod["metadata"].get("labels") or {}
    out = []
    for budget in double._objects[BUDGETS].values():
        if budget["metadata"].get("namespace") != namespace:
            continue
        selector = (budget.get("spec") or {}).get("selector") or {}
        wanted = selector.get("matchLabels") or {}
        if not wanted and not selector.get("matchExpressions"):
            continue  # v1beta1: an empty selector matches nothing
        if all(labels.get(k) == v for k, v in wanted.items()) and all(
            _expression(e, labels) for e in selector.get("matchExpressions") or []
        ):
            out.append(budget)
    return out


def _expression(e: dict[str, Any], labels: dict[str, str]) -> bool:
    op, key, values = e["operator"], e["key"], e.get("values") or []
    return {
        "In": key in labels and labels[key] in values,
        "NotIn": key not in labels or labels[key] not in values,
        "Exists": key in labels,
        "DoesNotExist": key not in labels,
    }[op]


def _take_one(double: KubeDouble, budget: dict[str, Any], pod: str, now: str) -> None:
    from tests.kube_double import ApiError

    status = budget.get("status") or {}
    generation = budget["metadata"].get("generation", 0)
    if status.get("observedGeneration", generation) < generation:
        raise ApiError(429, "TooManyRequests", TOO_MANY)
    if status.get("disruptionsAllowed", 0) < 1:
        raise ApiError(429, "TooManyRequests", TOO_MANY)
    fresh = copy.deepcopy(budget)
    fresh["status"] = {
        **status,
        "disruptionsAllowed": status["disruptionsAllowed"] - 1,
        "disruptedPods": {**(status.get("disruptedPods") or {}), pod: now},
    }
    m = budget["metadata"]
    double._store(BUDGETS, f"{m['namespace']}/{m['name']}", fresh, "MODIFIED")
