"""Which build of kgpu the suite runs on: the editable one of ``.venv`` (plain Python), or
the compiled one that ``make test`` builds and runs the suite on after (setup.py)."""

from __future__ import annotations

import ast
import importlib
import os
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

from click.testing import CliRunner

import kgpu
from kgpu.cli import main

SETUP = Path(__file__).resolve().parents[1] / "setup.py"


def _compiled_modules() -> list[str]:
    """The modules setup.py lists for mypyc, as dotted names."""
    for node in ast.walk(ast.parse(SETUP.read_text())):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "COMPILED" for t in node.targets
        ):
            paths = ast.literal_eval(node.value)
            return [p.removesuffix(".py").replace("/", ".") for p in paths]
    raise AssertionError(f"{SETUP} lists no COMPILED modules")


def _compiled_build_under_test() -> bool:
    """Set by ``make test-compiled``, which runs the suite on .venv-compiled."""
    return os.environ.get("KGPU_EXPECT_COMPILED") == "1"


def test_every_listed_module_is_compiled_exactly_when_the_compiled_build_is_under_test() -> None:
    expected = _compiled_build_under_test()
    modules = _compiled_modules()
    assert "kgpu.framework.session" in modules  # what core_compiled() looks at
    files = [importlib.import_module(name).__file__ or "" for name in modules]
    wrong = [f for f in files if f.endswith(tuple(EXTENSION_SUFFIXES)) != expected]
    assert wrong == [], f"expected {'compiled' if expected else 'plain Python'} modules"
    assert kgpu.core_compiled() is expected


def test_the_version_names_the_build_under_test() -> None:
    out = CliRunner().invoke(main, ["--version"], prog_name="kgpu").output
    build = "compiled (mypyc)" if _compiled_build_under_test() else "plain Python"
    assert kgpu.core_build() == build
    assert out == f"kgpu, version {kgpu.__version__}, scheduling core: {build}\n"
