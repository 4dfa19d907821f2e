"""Per-session scratch: what each action keeps for the rest of a session, typed by its key.

As kube-scheduler's CycleState: the session owns the scratch and knows nothing of what is
in it; an action declares a module-level ``StateKey[T]`` and reads back a ``T`` (or None
before anything was set), so mypy checks what is stored without any unwrapping, and the
framework never imports the actions that keep state here (the allocate action's placer,
which remembers what failed to fit; the victim plans that later pools reuse).
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

T = TypeVar("T")


class StateKey(Generic[T]):
    """The name of one kind of state in a scratch; ``T`` is the type of what it holds.
    Keys compare by identity: two modules never share state by choosing the same name."""

    def __init__(self, name: str) -> None:
        self.name = name  # for people reading a debugger, not for lookups


class SessionScratch:
    def __init__(self) -> None:
        # Any: each value's type is its key's ``T``, which ``get`` and ``set`` keep together.
        self._values: dict[StateKey[Any], Any] = {}

    def get(self, key: StateKey[T]) -> T | None:
        found: T | None = self._values.get(key)
        return found

    def set(self, key: StateKey[T], value: T) -> None:
        self._values[key] = value
