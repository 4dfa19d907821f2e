"""CEL device selectors: every form a DeviceClass or claim uses, and the bounds."""

from __future__ import annotations

import pytest

from kgpu.dra.cel_selectors import (
    MAX_MACROS,
    SelectorError,
    compile_selector,
    device_variables,
    evaluate,
)
from kgpu.model.dra import MAX_CEL_LENGTH, Device, parse_semver
from kgpu.model.quantity import parse_quantity

D = "gpu.nvidia.com"
DEVICE = Device(
    "gpu-0",
    {
        f"{D}/type": "gpu",
        f"{D}/productName": "NVIDIA H100 80GB HBM3",
        f"{D}/index": 3,
        f"{D}/migEnabled": False,
        f"{D}/driverVersion": parse_semver("550.54.15"),
        "resource.kubernetes.io/pcieRoot": "pci0000:03",
    },
    {f"{D}/memory": parse_quantity("80Gi"), f"{D}/multiprocessors": parse_quantity("132")},
)
VARS = device_variables(D, DEVICE)


def run(expression: str) -> tuple[bool, str]:
    outcome = evaluate(compile_selector(expression), VARS)
    return outcome.matched, outcome.error


@pytest.mark.parametrize(
    ("expression", "matched"),
    [
        ("device.driver == 'gpu.nvidia.com'", True),
        ("device.driver == 'other.example.com'", False),
        ("device.attributes['gpu.nvidia.com'].type == 'gpu'", True),
        ("device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA H100')", True),
        ("device.attributes['gpu.nvidia.com'].productName.matches('A100')", False),
        ("device.attributes['gpu.nvidia.com'].index >= 2", True),
        ("device.attributes['gpu.nvidia.com'].index == 0", False),
        ("!device.attributes['gpu.nvidia.com'].migEnabled", True),
        ("device.attributes['resource.kubernetes.io'].pcieRoot == 'pci0000:03'", True),
        # quantities: as numbers, with Kubernetes' methods
        ("device.capacity['gpu.nvidia.com'].memory >= quantity('40Gi')", True),
        ("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('80Gi')) == 0", True),
        ("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('100Gi')) < 0", True),
        ("device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('79Gi'))", True),
        ("device.capacity['gpu.nvidia.com'].memory.isLessThan(quantity('79Gi'))", False),
        ("device.capacity['gpu.nvidia.com'].multiprocessors.asInteger() == 132", True),
        ("quantity('1.5') == 1.5", True),
        # versions: compared as semantic versions, not as text
        (
            "device.attributes['gpu.nvidia.com'].driverVersion.isGreaterThan(semver('550.9.0'))",
            True,
        ),
        (
            "device.attributes['gpu.nvidia.com'].driverVersion.compareTo(semver('550.54.15')) == 0",
            True,
        ),
        ("semver('1.0.0-rc.1').isLessThan(semver('1.0.0'))", True),
        # guards against a missing attribute
        ("'uuid' in device.attributes['gpu.nvidia.com']", False),
        ("has(device.attributes['gpu.nvidia.com'].uuid) && false", False),
        ("device.attributes['gpu.nvidia.com'].exists(k, k == 'index')", True),
    ],
)
def test_selector_forms(expression: str, matched: bool) -> None:
    assert run(expression) == (matched, "")


@pytest.mark.parametrize(
    ("expression", "error"),
    [
        ("device.attributes['gpu.nvidia.com'].uuid == 'x'", "no such key"),
        ("device.attributes['amd.com'].type == 'gpu'", "no such key"),
        ("device.attributes['gpu.nvidia.com'].index", "expected a bool"),
        ("quantity('lots') > 0", "CEL runtime error"),
        ("semver('550') == '550'", "CEL runtime error"),
        ("device.attributes['gpu.nvidia.com'].type.compareTo(1) > 0", "CEL runtime error"),
    ],
)
def test_a_selector_that_fails_on_a_device_does_not_match_and_says_why(
    expression: str, error: str
) -> None:
    matched, why = run(expression)
    assert not matched
    assert error in why


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("device.driver ==", "is not CEL"),
        ("x" * (MAX_CEL_LENGTH + 1), f"at most {MAX_CEL_LENGTH}"),
        (
            "[1, 2].all(x, [3, 4].exists(y, x < y))",
            f"uses 2 comprehension macros (all, exists, exists_one, map, filter); kgpu bounds "
            f"a selector's cost to at most {MAX_MACROS}",
        ),
    ],
)
def test_expressions_past_the_bounds_are_refused(expression: str, message: str) -> None:
    with pytest.raises(SelectorError, match=message.replace("(", r"\(").replace(")", r"\)")):
        compile_selector(expression)


def test_versions_order_as_semver_says() -> None:
    order = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-beta", "1.0.0-rc.1", "1.0.0", "1.2.0", "1.10.0"]
    parsed = [parse_semver(v) for v in order]
    assert parsed == sorted(parsed)
    assert parse_semver("1.0.0+build.5") == parse_semver("1.0.0")
