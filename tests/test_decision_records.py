"""The records a session returns stay values: frozen, equal by their fields, hashable."""

from __future__ import annotations

import dataclasses

import pytest

from kgpu.framework.scheduler import Placement, Unschedulable
from kgpu.framework.session_result import Pending
from kgpu.framework.status import Code, Status
from kgpu.model.decision import Bind, Event, Evict, EvictionKind, Nomination
from kgpu.model.node import NodeName
from kgpu.model.pod import PodKey
from tests.builders import make_pod

POD, NODE = PodKey("default/p"), NodeName("n1")
WHY = Status(Code.UNSCHEDULABLE, ("no room",), "GpuFit", "InsufficientGPU")


def _records() -> list[object]:
    pod = make_pod("p").gpus(1).build()
    return [
        Bind(POD, NODE, (0, 1), 1000),
        Evict(POD, NODE, EvictionKind.RECLAIMED, "reclaimed by queue a"),
        Nomination(POD, NODE, (2,)),
        Event(POD, "Warning", "FailedScheduling", "no room"),
        Pending(POD, WHY, "no room"),
        WHY,
        Placement(pod, 3, (1,), 100.0),
        Unschedulable(pod, WHY),
    ]


@pytest.mark.parametrize("index", range(len(_records())))
def test_a_record_is_a_frozen_value(index: int) -> None:
    record, again = _records()[index], _records()[index]
    assert record == again and hash(record) == hash(again)
    field = dataclasses.fields(record)[0].name  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(record, field, None)
    changed = dataclasses.replace(record, **{field: getattr(record, field)})  # type: ignore[type-var]
    assert changed == record


def test_records_keep_their_defaults() -> None:
    assert Event(POD, "Normal", "Scheduled", "ok").kind == "Pod"
    assert Status() == Status(Code.SUCCESS, (), "", "") and Status().ok
    assert Unschedulable(make_pod("p").build(), WHY).node_reasons is None
    assert Event(
        pod=POD, type="Normal", reason="Scheduled", message="ok", kind="PodGroup"
    ).kind == ("PodGroup")
