"""The trigger controller as a state machine: observations in, actions out."""

from __future__ import annotations

from dataclasses import replace

from kgpu.autoscale.demand import TriggerSpec, UnplacedPod
from kgpu.autoscale.observed import (
    Observed,
    ObservedNode,
    ObservedNodeClaim,
    ObservedTrigger,
    Phase,
)
from kgpu.autoscale.trigger_controller import ControllerConfig, TriggerController
from tests.test_autoscale_planner import A100, POOLS, gpu_pod, pending

NOW = 1000.0
HALVES = pending(gpu_pod("a").share(500, A100), gpu_pod("b").share(500, A100))


def controller(**overrides: float) -> TriggerController:
    return TriggerController(ControllerConfig(planner=POOLS, batch_idle_s=0, **overrides))


def exists(spec: TriggerSpec, at: float = NOW, node: str = "", failed: str = "") -> ObservedTrigger:
    """The trigger pod the API server would show for a created spec."""
    return ObservedTrigger(
        spec.name,
        spec.group.id,
        spec.pod_keys,
        spec.gpus,
        at,
        pool=spec.group.target.pool,
        node=node,
        failed=failed,
    )


def claim(
    name: str, at: float, *stages: str, node: str = "", failure: str = ""
) -> ObservedNodeClaim:
    conditions = dict.fromkeys(stages, "True")
    return ObservedNodeClaim(name, "gpu-a100", at, conditions, node=node, failure=failure)


def started(ctl: TriggerController, pods: list[UnplacedPod] = HALVES) -> TriggerSpec:
    acts = ctl.step(Observed(NOW, pods))
    [spec] = acts.create
    return spec


def test_a_trigger_goes_from_created_to_ready_and_its_pods_are_retried() -> None:
    ctl = controller()
    acts = ctl.step(Observed(NOW, HALVES))
    [spec] = acts.create
    assert acts.phases == {spec.name: Phase.PENDING}
    assert [(e.pod, e.reason) for e in acts.events] == [
        ("default/a", "TriggeredScaleUp"),
        ("default/b", "TriggeredScaleUp"),
    ]
    assert acts.events[0].message == (
        f"kgpu requested a scale-up: trigger pod {spec.name} asks for 1 nvidia.com/gpu of "
        f"{A100} in NodePool gpu-a100 for 2 pod(s)"
    )
    trigger = exists(spec)
    steps = [
        ((), (), Phase.PENDING),
        ((claim("nc-1", NOW + 2),), (), Phase.LAUNCHING),
        ((claim("nc-1", NOW + 2, "Launched"),), (), Phase.LAUNCHED),
        ((claim("nc-1", NOW + 2, "Launched", "Registered", node="n1"),), (), Phase.REGISTERED),
        (
            (claim("nc-1", NOW + 2, "Launched", "Registered", "Initialized", node="n1"),),
            (ObservedNode("n1", ready=False),),
            Phase.INITIALIZED,
        ),
    ]
    for i, (claims, nodes, phase) in enumerate(steps):
        acts = ctl.step(Observed(NOW + 10 * (i + 1), HALVES, [trigger], claims, nodes))
        assert (acts.create, acts.delete, acts.phases) == ([], [], {spec.name: phase})
        assert acts.events == []  # scale-up was announced once
    ready_claim = claim(
        "nc-1", NOW + 2, *("Launched", "Registered", "Initialized", "Ready"), node="n1"
    )
    bound = replace(trigger, node="n1")
    acts = ctl.step(Observed(NOW + 60, HALVES, [bound], [ready_claim], [ObservedNode("n1", False)]))
    assert acts.phases == {spec.name: Phase.BOUND}
    acts = ctl.step(Observed(NOW + 65, HALVES, [bound], [ready_claim], [ObservedNode("n1", True)]))
    assert (acts.delete, acts.retry, acts.create) == ([spec.name], ["default/a", "default/b"], [])
    [outcome] = acts.outcomes
    assert (outcome.succeeded, outcome.node, outcome.duration_s) == (True, "n1", 65.0)
    assert (ctl.successes, ctl.failures) == (1, 0)
    # Until the pods are placed they are not planned again, even once the trigger is gone.
    acts = ctl.step(Observed(NOW + 66, HALVES, [], [ready_claim], [ObservedNode("n1", True)]))
    assert (acts.create, acts.waiting) == ([], ["default/a", "default/b"])


def test_demand_with_a_trigger_gets_no_second_one_even_before_the_informer_shows_it() -> None:
    ctl = controller()
    spec = started(ctl)
    assert ctl.step(Observed(NOW + 1, HALVES)).create == []  # created, not yet observed
    assert ctl.step(Observed(NOW + 2, HALVES, [exists(spec)])).create == []
    more = [*HALVES, *pending(gpu_pod("c").gpus(2, A100))]
    [extra] = ctl.step(Observed(NOW + 3, more, [exists(spec)])).create
    assert (extra.pod_keys, extra.gpus) == (("default/c",), 2)


def test_a_failed_launch_is_recorded_and_retried_with_backoff() -> None:
    ctl = controller(backoff_initial_s=30, backoff_max_s=100)
    spec = started(ctl)
    failing = claim("nc-1", NOW + 1, failure="InsufficientCapacityError: no p4de.24xlarge")
    acts = ctl.step(Observed(NOW + 5, HALVES, [exists(spec)], [failing]))
    assert acts.delete == [spec.name]
    [outcome] = acts.outcomes
    assert outcome.reason == "NodeClaim nc-1: InsufficientCapacityError: no p4de.24xlarge"
    assert [(e.pod, e.type, e.reason) for e in acts.events] == [
        ("default/a", "Warning", "FailedScaleUp"),
        ("default/b", "Warning", "FailedScaleUp"),
    ]
    assert acts.events[0].message == (
        f"scale-up by trigger pod {spec.name} failed: NodeClaim nc-1: "
        "InsufficientCapacityError: no p4de.24xlarge; retrying in 30s"
    )
    assert acts.wake_at == NOW + 35
    held = ctl.step(Observed(NOW + 20, HALVES, [], [failing]))
    assert (held.create, held.waiting) == ([], ["default/a", "default/b"])
    [retry] = ctl.step(Observed(NOW + 36, HALVES, [], [failing])).create
    assert retry.name == f"{spec.name}-r1" and retry.pod_keys == spec.pod_keys
    # A second failure doubles the wait; the cap holds it at backoff_max_s.
    ctl.step(
        Observed(NOW + 40, HALVES, [exists(retry, NOW + 36, failed="trigger pod failed: Evicted")])
    )
    assert ctl.step(Observed(NOW + 40 + 59, HALVES)).create == []
    [third] = ctl.step(Observed(NOW + 40 + 61, HALVES)).create
    assert third.name == f"{spec.name}-r2"
    assert ctl.failures == 2


def test_a_nodeclaim_that_disappears_or_a_trigger_that_waits_too_long_fails() -> None:
    ctl = controller()
    spec = started(ctl)
    ctl.step(Observed(NOW + 1, HALVES, [exists(spec)], [claim("nc-1", NOW + 1)]))
    acts = ctl.step(Observed(NOW + 2, HALVES, [exists(spec)], []))
    assert acts.outcomes[0].reason == "NodeClaim nc-1 was deleted before its node was ready"
    late = controller(timeout_s=600)
    spec = started(late)
    assert late.step(Observed(NOW + 599, HALVES, [exists(spec)])).delete == []
    acts = late.step(Observed(NOW + 600, HALVES, [exists(spec)]))
    assert acts.outcomes[0].reason == "no node was ready after 600s"


def test_claims_are_tied_one_to_a_trigger_and_never_to_older_triggers() -> None:
    ctl = controller()
    four = pending(*(gpu_pod(f"p{i}").gpus(4, A100) for i in range(3)))
    first, second = ctl.step(Observed(NOW, four)).create
    triggers = [exists(first), exists(second)]
    old = claim("nc-old", NOW - 5, "Launched")
    new = claim("nc-new", NOW + 3)
    acts = ctl.step(Observed(NOW + 5, four, triggers, [old, new]))
    # Same creation time: the claim goes to the first by name; the old claim to neither.
    assert sorted(acts.phases.values()) == [Phase.LAUNCHING, Phase.PENDING]
    assert acts.phases[min(first.name, second.name)] == Phase.LAUNCHING


def test_new_demand_is_batched_until_quiet() -> None:
    ctl = TriggerController(ControllerConfig(planner=POOLS, batch_idle_s=2, batch_max_s=10))
    one = HALVES[:1]
    acts = ctl.step(Observed(NOW, one))
    assert (acts.create, acts.waiting, acts.wake_at) == ([], ["default/a"], NOW + 2)
    assert ctl.step(Observed(NOW + 1.5, HALVES)).create == []  # new demand: quiet again
    [spec] = ctl.step(Observed(NOW + 3.5, HALVES)).create
    assert spec.pod_keys == ("default/a", "default/b") and spec.gpus == 1
    # A steady trickle is cut at batch_max_s.
    ctl = TriggerController(ControllerConfig(planner=POOLS, batch_idle_s=2, batch_max_s=5))
    created = []
    for i in range(8):
        pods = pending(*(gpu_pod(f"p{j}").gpus(1, A100) for j in range(i + 1)))
        created += ctl.step(Observed(NOW + i, pods)).create
    assert [len(s.pods) for s in created] == [6]


def test_pods_no_pool_can_hold_are_told_once() -> None:
    ctl = controller()
    nine = pending(gpu_pod("nine").gpus(9, A100))
    acts = ctl.step(Observed(NOW, nine))
    assert [(e.reason, e.message[:29]) for e in acts.events] == [
        ("NotTriggerScaleUp", "pod didn't trigger scale-up: ")
    ]
    assert [u.pod for u in acts.unplannable] == ["default/nine"]
    assert ctl.step(Observed(NOW + 1, nine)).events == []


def test_pods_fitted_into_a_trigger_s_room_are_retried_with_its_pods() -> None:
    ctl = controller()
    quads = pending(gpu_pod("q1").gpus(4, A100), gpu_pod("q2").gpus(4, A100))
    spec = started(ctl, quads)
    trigger = replace(exists(spec), cpu_milli=spec.cpu_milli, memory_mib=spec.memory_mib)
    # q1 was placed elsewhere; q3 arrives and takes its room instead of a new trigger.
    now_pending = [quads[1], *pending(gpu_pod("q3").gpus(4, A100))]
    acts = ctl.step(Observed(NOW + 5, now_pending, [trigger]))
    assert (acts.create, acts.unplannable) == ([], [])
    bound = replace(trigger, node="n1")
    acts = ctl.step(Observed(NOW + 100, now_pending, [bound], [], [ObservedNode("n1", True)]))
    assert acts.retry == ["default/q2", "default/q3"]
