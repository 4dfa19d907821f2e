"""Profiles read from YAML: the built-in policies, or a user's file."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any, Final

import yaml
from pydantic import ValidationError

from kgpu.actions.session_runner import topology_problem
from kgpu.framework.profile import Profile


class ProfileError(ValueError):
    """A profile file or name that cannot be used; the message says which and why."""


def _profiles_from(data: Any, source: str) -> dict[str, Profile]:
    if not isinstance(data, dict):
        raise ProfileError(f"{source}: expected a mapping of profile names to profiles")
    out = {}
    for name, body in data.items():
        if str(name).startswith("x-"):
            continue  # YAML anchors live under x- keys
        if not isinstance(body, dict):
            raise ProfileError(f"{source}: profile {name!r} is not a mapping")
        try:
            out[str(name)] = Profile.model_validate({"name": name, **body})
        except ValidationError as exc:
            raise ProfileError(f"{source}: profile {name!r}: {exc}") from exc
        problem = topology_problem(out[str(name)])
        if problem is not None:
            raise ProfileError(f"{source}: {problem}")
    return out


def builtin_profiles() -> dict[str, Profile]:
    text = resources.files("kgpu.profiles").joinpath("policies.yaml").read_text()
    return _profiles_from(yaml.safe_load(text), "built-in policies.yaml")


# The built-in policies' names in the file's order (the FGD paper's, then kgpu's own): the
# order ``--help`` lists them and ``kgpu demo`` runs them.
POLICIES: Final = tuple(builtin_profiles())


def load_profile(name_or_path: str) -> Profile:
    """A built-in policy by name, or the single profile (or ``name``) in a YAML file."""
    builtin = builtin_profiles()
    if name_or_path in builtin:
        return builtin[name_or_path]
    path = Path(name_or_path)
    if not path.exists():
        raise ProfileError(
            f"unknown policy {name_or_path!r}: expected one of {', '.join(builtin)} "
            "or the path of a profile YAML file"
        )
    found = _profiles_from(yaml.safe_load(path.read_text()), str(path))
    if len(found) != 1:
        raise ProfileError(f"{path}: expected exactly one profile, found {len(found)}")
    return next(iter(found.values()))
