"""What the readers of DRA objects (``resource.k8s.io/v1``) share: the group and kinds, the
name and size checks of Kubernetes' validation, and CEL selectors compiled as they are read,
each refusal a :class:`ConversionError` naming the object, field, value and what was
expected."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from kgpu.dra.cel_selectors import SelectorError, compile_selector
from kgpu.kube.objects.fields import MISSING, Fields
from kgpu.kube.objects.node_pod import object_ref
from kgpu.model.dra import (
    MAX_DOMAIN_LENGTH,
    MAX_ID_LENGTH,
    MAX_NAME_LENGTH,
    MAX_NODE_SELECTOR_TERMS,
    MAX_SELECTOR_VALUES,
    MAX_SELECTORS,
    NodeSelectorRequirement,
    NodeSelectorTerm,
)

GROUP_VERSION: Final = "resource.k8s.io/v1"
KINDS: Final = ("DeviceClass", "ResourceSlice", "ResourceClaim", "ResourceClaimTemplate")
CLUSTER_SCOPED: Final = ("DeviceClass", "ResourceSlice")

DNS_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_SUBDOMAIN: Final = re.compile(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
)
C_IDENTIFIER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


OPERATORS: Final = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


def object_name(kind: str, obj: Mapping[str, Any]) -> str:
    ref = object_ref(kind, obj)
    if kind in CLUSTER_SCOPED:  # no namespace: "DeviceClass gpu.nvidia.com"
        ref = f"{kind} {ref.partition('/')[2]}"
    return ref


def dns_label(fields: Fields, value: object, field: str) -> str:
    if not isinstance(value, str) or len(value) > 63 or not DNS_LABEL.fullmatch(value):
        raise fields.fail(
            field, value, "a DNS label (lower-case letters, digits and '-', at most 63)"
        )
    return value


def dns_subdomain(fields: Fields, value: object, field: str, limit: int = MAX_NAME_LENGTH) -> str:
    if not isinstance(value, str) or len(value) > limit or not DNS_SUBDOMAIN.fullmatch(value):
        raise fields.fail(field, value, f"a DNS subdomain of at most {limit} characters")
    return value


def bounded(
    fields: Fields, parent: Mapping[str, Any], key: str, field: str, limit: int
) -> list[Mapping[str, Any]]:
    items = fields.items(parent, key, field)
    if len(items) > limit:
        raise fields.fail(field, f"{len(items)} entries", f"at most {limit}")
    return items


def int_in(fields: Fields, value: object, field: str, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise fields.fail(field, value, f"an integer from {low} to {high}")
    return value


def qualified_name(fields: Fields, name: object, field: str, driver: str = "") -> str:
    """A qualified name ``domain/id``; a bare ``id`` takes ``driver`` as its domain where
    one is given (attributes and capacities of a slice), else is refused."""
    if not isinstance(name, str):
        raise fields.fail(field, name, "a name such as gpu.nvidia.com/productName")
    domain, slash, ident = name.rpartition("/")
    if not slash:
        domain = driver
    if not C_IDENTIFIER.fullmatch(ident) or len(ident) > MAX_ID_LENGTH:
        raise fields.fail(
            field,
            name,
            f"a name of at most {MAX_ID_LENGTH} letters, digits and '_' after the domain",
        )
    if not domain or len(domain) > MAX_DOMAIN_LENGTH or not DNS_SUBDOMAIN.fullmatch(domain):
        raise fields.fail(
            field, name, f"a domain (a DNS subdomain of at most {MAX_DOMAIN_LENGTH}) before '/'"
        )
    return f"{domain}/{ident}"


def selectors(fields: Fields, parent: Mapping[str, Any], field: str) -> tuple[str, ...]:
    out = []
    for i, item in enumerate(bounded(fields, parent, "selectors", field, MAX_SELECTORS)):
        where = f"{field}[{i}].cel.expression"
        expression = fields.mapping(item, "cel", f"{field}[{i}].cel").get("expression", MISSING)
        if not isinstance(expression, str) or not expression:
            raise fields.fail(where, expression, "a CEL expression")
        try:
            compile_selector(expression)
        except SelectorError as exc:
            raise fields.fail(
                where, expression, f"a CEL expression kgpu can evaluate; it {exc}"
            ) from None
        out.append(expression)
    return tuple(out)


def node_selector(
    fields: Fields, value: Mapping[str, Any], field: str
) -> tuple[NodeSelectorTerm, ...]:
    terms = []
    for t, term in enumerate(
        bounded(
            fields,
            value,
            "nodeSelectorTerms",
            f"{field}.nodeSelectorTerms",
            MAX_NODE_SELECTOR_TERMS,
        )
    ):
        reqs = []
        for key, on_field in (("matchExpressions", False), ("matchFields", True)):
            where = f"{field}.nodeSelectorTerms[{t}].{key}"
            for r, req in enumerate(bounded(fields, term, key, where, MAX_NODE_SELECTOR_TERMS)):
                at = f"{where}[{r}]"
                label = fields.string(req, "key", f"{at}.key")
                if not label or (on_field and label != "metadata.name"):
                    raise fields.fail(
                        f"{at}.key", req.get("key"), "metadata.name" if on_field else "a label key"
                    )
                op = req.get("operator")
                if op not in OPERATORS:
                    raise fields.fail(f"{at}.operator", op, "one of " + ", ".join(OPERATORS))
                values = req.get("values") or []
                if (
                    not isinstance(values, list)
                    or len(values) > MAX_SELECTOR_VALUES
                    or not all(isinstance(v, str) for v in values)
                ):
                    raise fields.fail(
                        f"{at}.values", values, f"a list of at most {MAX_SELECTOR_VALUES} strings"
                    )
                if (
                    (
                        op in ("Gt", "Lt")
                        and (len(values) != 1 or not values[0].lstrip("-").isdigit())
                    )
                    or (op in ("Exists", "DoesNotExist") and values)
                    or (op in ("In", "NotIn") and not values)
                ):
                    raise fields.fail(f"{at}.values", values, f"what operator {op} takes")
                reqs.append(NodeSelectorRequirement(label, op, tuple(values), on_field))
        terms.append(NodeSelectorTerm(tuple(reqs)))
    return tuple(terms)
