"""``config.POLICIES``: the built-in profiles' names, derived from their file, in its order."""

from __future__ import annotations

from importlib import resources

import yaml
from click.testing import CliRunner

from kgpu.cli import main
from kgpu.config import POLICIES, builtin_profiles


def test_policies_are_the_profile_files_policies_in_its_order() -> None:
    text = resources.files("kgpu.profiles").joinpath("policies.yaml").read_text()
    in_file = [name for name in yaml.safe_load(text) if not name.startswith("x-")]
    assert list(POLICIES) == in_file == list(builtin_profiles())


def test_users_see_the_papers_policies_then_kgpus_own() -> None:
    # The order --help lists and kgpu demo runs: a reordered file would change both.
    assert ",".join(POLICIES) == "random,dotprod,gpuclustering,gpupacking,bestfit,fgd,kgpu"
    result = CliRunner().invoke(main, ["simulate", "openb", "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert f"one of {', '.join(POLICIES)}" in " ".join(result.output.split())
