"""A missing input skips a test and names it, except under CI=true, where it fails: CI must
not pass by skipping. Only tests marked ``nvidia`` may skip there (CI has no GPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.inputs import e2e_kubeconfig, e2e_node, openb_trace, require_input

pytest_plugins = ["pytester"]


def test_a_missing_input_skips_outside_ci_and_fails_under_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="the trace is missing: fetch it"):
        require_input("the trace", "fetch it")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true and the trace is missing: fetch it"):
        require_input("the trace", "fetch it")


def test_each_input_names_what_is_missing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("KGPU_OPENB_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(pytest.fail.Exception, match=r"the openb trace \(.*nowhere/openb_node"):
        openb_trace()
    monkeypatch.delenv("KGPU_E2E_KUBECONFIG", raising=False)
    with pytest.raises(pytest.fail.Exception, match="KGPU_E2E_KUBECONFIG is not set"):
        e2e_kubeconfig()
    monkeypatch.setenv("KGPU_E2E_KUBECONFIG", str(tmp_path / "kubeconfig"))
    with pytest.raises(pytest.fail.Exception, match=r"the kubeconfig .*kubeconfig that KGPU_E2E"):
        e2e_kubeconfig()
    monkeypatch.delenv("KGPU_E2E_NODE", raising=False)
    with pytest.raises(pytest.fail.Exception, match=r"real node .* KGPU_E2E_NODE is not set"):
        e2e_node()


SUITE = """
import pytest

def test_plain_skip():
    pytest.skip("no widget here")

@pytest.mark.nvidia
def test_gpu_skip():
    pytest.skip("no NVIDIA driver")

@pytest.mark.skipif(True, reason="never here")
def test_skipif():
    pass

def test_passes():
    pass
"""


@pytest.mark.parametrize("ci", ["true", ""])
def test_under_ci_every_skip_but_a_gpu_one_fails(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ci: str
) -> None:
    monkeypatch.setenv("CI", ci)
    pytester.makeconftest(
        "from tests.conftest import pytest_make_collect_report, pytest_runtest_makereport"
    )
    pytester.makepyfile(
        test_suite=SUITE,
        test_module_skip="import pytest\npytest.skip('no module here', allow_module_level=True)",
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "--continue-on-collection-errors")
    if ci:  # the plain skip fails; skipif, decided at setup, and the module's skip are errors
        result.assert_outcomes(passed=1, skipped=1, failed=1, errors=2)
        result.stdout.fnmatch_lines(["*CI=true and this test skipped*It said: no widget here"])
        result.stdout.fnmatch_lines(["*CI=true and this test skipped*It said: no module here"])
    else:
        result.assert_outcomes(passed=1, skipped=4)
