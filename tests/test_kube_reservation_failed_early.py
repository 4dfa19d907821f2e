"""A reservation pod the kubelet fails before any session saw it running is replaced at
once, over real HTTP against the API double: its creation was seen (a new pod for its GPU
is in the cache), so the keeper does not wait out the creation timeout."""

from __future__ import annotations

from typing import Any

from kgpu.kube.api.client import KubeClient
from kgpu.kube.live.gpu_reservations import ReservationKeeper
from kgpu.kube.objects.reservation_pod import ReservationConfig
from kgpu.kube.snapshot.cache_snapshot import CacheSnapshot
from kgpu.kube.snapshot.reservations import Reservation
from kgpu.state.cluster import ClusterState
from tests.kube_double import KubeDouble
from tests.test_kube_unseen_holders import api  # noqa: F401  (fixture)

NS = ReservationConfig().namespace


def reservation_pods(double: KubeDouble) -> list[dict[str, Any]]:
    return [p for p in double.objects("pods") if p["metadata"].get("namespace") == NS]


def snapshot(*reservations: Reservation) -> CacheSnapshot:
    """A share on GPU 0 of n1 held through a reservation, and the reservation pods seen."""
    snap = CacheSnapshot(ClusterState([]))
    snap.reservations.backed["n1"] = {0}
    snap.reservations.reservations.extend(reservations)
    return snap


def seen(obj: dict[str, Any], phase: str) -> Reservation:
    name = obj["metadata"]["name"]
    return Reservation(obj, name, "n1", 0, False, None, 0, None, None, phase, False, "")


def test_a_reservation_failed_before_a_session_saw_it_run_is_replaced_at_once(
    api: tuple[KubeDouble, KubeClient],  # noqa: F811
) -> None:
    double, client = api
    keeper = ReservationKeeper(client, ReservationConfig(), lambda f: f(), lambda: True)
    keeper.act(snapshot(), 100.0)
    [first] = reservation_pods(double)
    # The first snapshot to show it shows it Failed (UnexpectedAdmissionError): never live.
    keeper.act(snapshot(seen(first, "Failed")), 101.0)
    names = {p["metadata"]["name"] for p in reservation_pods(double)}
    assert first["metadata"]["name"] not in names  # deleted
    assert len(names) == 1  # and a new one asked for, not 30 s later
    # While the new one is not in the cache yet, the failed one (still listed) asks no third.
    keeper.act(snapshot(seen(first, "Failed")), 102.0)
    assert len(reservation_pods(double)) == 1
