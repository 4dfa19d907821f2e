"""Objects checked against the OpenAPI schemas of kgpu's CRDs, as the API server checks them."""

from __future__ import annotations

from typing import Any

import jsonschema

from kgpu.kube.install.crds import custom_resource_definitions

Obj = dict[str, Any]


def schema_of(kind: str) -> Obj:
    crd = next(c for c in custom_resource_definitions() if c["spec"]["names"]["kind"] == kind)
    schema: Obj = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def errors(kind: str, obj: Obj) -> list[tuple[str, str]]:
    """(field path, message) of every schema violation, as the API server would list them."""
    validator = jsonschema.Draft4Validator(schema_of(kind))
    return sorted(
        (".".join(str(p) for p in e.absolute_path), e.message) for e in validator.iter_errors(obj)
    )
