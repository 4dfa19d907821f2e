"""Outcomes of plugins and cycles, and the reasons that explain them.

What the scheduler does next for each code:

- ``SUCCESS``: go on to the next extension point.
- ``UNSCHEDULABLE``: the pod does not fit now; preemption may help, and the pod is retried
  when the cluster changes.
- ``UNSCHEDULABLE_AND_UNRESOLVABLE``: the pod cannot fit whatever happens to other pods (a
  malformed request, a selector no node matches); preemption is not tried, and the pod is
  only retried when the pod itself or the nodes change.

The values are kube-scheduler's for the same codes. kube-scheduler's ``Wait``, ``Skip`` and
``Error`` have none here, as nothing would act on them: kgpu has no Permit or Reserve point
(a gang is held together by the session's ``gang`` plugin, not by pods waiting at Permit),
and a plugin's fault is an exception, not a status.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum


class Code(IntEnum):
    SUCCESS = 0
    UNSCHEDULABLE = 2
    UNSCHEDULABLE_AND_UNRESOLVABLE = 3


@dataclass(frozen=True, slots=True)
class Reason:
    """A machine-readable code and the phrase a person reads ("insufficient GPU")."""

    code: str
    phrase: str


@dataclass(frozen=True, slots=True, init=False)
class Status:
    code: Code = Code.SUCCESS
    reasons: tuple[str, ...] = ()
    plugin: str = ""
    reason_code: str = ""

    # Written out, not generated: the generated __init__ of a frozen dataclass is Python
    # even in the compiled build (it sets each field through a call).
    def __init__(
        self,
        code: Code = Code.SUCCESS,
        reasons: tuple[str, ...] = (),
        plugin: str = "",
        reason_code: str = "",
    ) -> None:
        object.__setattr__(self, "code", code)
        object.__setattr__(self, "reasons", reasons)
        object.__setattr__(self, "plugin", plugin)
        object.__setattr__(self, "reason_code", reason_code)

    @property
    def ok(self) -> bool:
        return self.code == Code.SUCCESS

    @property
    def message(self) -> str:
        return "; ".join(self.reasons)

    @staticmethod
    def success() -> Status:
        return _SUCCESS

    @staticmethod
    def unschedulable(reason: Reason, detail: str = "", plugin: str = "") -> Status:
        text = f"{reason.phrase}: {detail}" if detail else reason.phrase
        return Status(Code.UNSCHEDULABLE, (text,), plugin, reason.code)

    @staticmethod
    def unresolvable(reason: Reason, detail: str = "", plugin: str = "") -> Status:
        text = f"{reason.phrase}: {detail}" if detail else reason.phrase
        return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (text,), plugin, reason.code)


_SUCCESS = Status()


@dataclass(slots=True)
class NodeReasons:
    """How many nodes each reason rejected in one cycle, in the order reasons first appeared."""

    total: int
    counts: dict[Reason, int] = field(default_factory=dict)

    def add(self, reason: Reason, count: int) -> None:
        if count:
            self.counts[reason] = self.counts.get(reason, 0) + count

    def message(self, available: int = 0) -> str:
        """kube-scheduler's aggregate: "0/1213 nodes are available: 800 insufficient GPU, ..."."""
        head = f"{available}/{self.total} nodes are available"
        if not self.counts:
            return head + "."
        parts = sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0].phrase))
        return head + ": " + ", ".join(f"{n} {r.phrase}" for r, n in parts) + "."
