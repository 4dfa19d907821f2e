"""Work started a few at a time (binds, events): the limit, the queue, and items that end
while they start."""

from __future__ import annotations

import threading

from kgpu.kube.api.in_flight import InFlight


def test_no_more_than_the_limit_run_and_each_end_starts_the_next() -> None:
    running: list[int] = []
    flight: InFlight[int] = InFlight(3, running.append)
    for i in range(10):
        flight.add(i)
    assert running == [0, 1, 2] and flight.queued == 7
    flight.finished()
    assert running == [0, 1, 2, 3]


def test_items_that_end_as_they_start_do_not_nest_as_deep_as_the_queue() -> None:
    """Ten thousand refusals in a row (a scheduler that lost its lease): each ends inside
    its own start; the queue drains without one call level per item."""
    done: list[int] = []

    def refuse(i: int) -> None:
        done.append(i)
        flight.finished()

    flight: InFlight[int] = InFlight(1, refuse, paused=True)
    for i in range(10_000):
        flight.add(i)
    flight.resume()
    assert done == list(range(10_000))
    assert flight.wait(0.1)


def test_a_full_queue_refuses_and_paused_starts_nothing() -> None:
    started: list[str] = []
    flight: InFlight[str] = InFlight(1, started.append, capacity=2, paused=True)
    assert flight.add("a") and flight.add("b")
    assert not flight.add("c")
    assert started == [] and flight.queued == 2
    assert flight.wait(0.05)  # paused: what waits is not waited for
    flight.resume()
    assert started == ["a"]


def test_a_start_that_fails_frees_its_place() -> None:
    started: list[int] = []

    def start(i: int) -> None:
        if i == 0:
            raise RuntimeError("a bug")
        started.append(i)

    flight: InFlight[int] = InFlight(1, start)
    flight.add(0)
    flight.add(1)
    assert started == [1]


def test_wait_returns_once_the_running_end() -> None:
    flight: InFlight[int] = InFlight(2, lambda i: None)
    flight.add(1)
    flight.add(2)
    assert not flight.wait(0.05)
    threading.Timer(0.05, flight.finished).start()
    threading.Timer(0.1, flight.finished).start()
    assert flight.wait(2.0)
