"""Trigger pods as Kubernetes objects: the exact pods the planner's cases render, and the
original pods and trigger pods read back."""

from __future__ import annotations

import json
from typing import Any

import kubernetes_validate
import pytest

from kgpu.autoscale.demand import UnplacedPod
from kgpu.autoscale.planner import PlannerConfig, plan
from kgpu.kube.objects.node_pod import ConversionError
from kgpu.kube.scaling.trigger_pods import (
    TriggerPodConfig,
    observed_trigger,
    pending_from_k8s,
    render_priority_class,
    render_trigger_pod,
)
from kgpu.model.nodepool import NodeRequirement
from tests.builders import make_pod
from tests.test_autoscale_planner import A100, L4, POOLS, gpu_pod, pending

K8S_VERSION = "1.25.0"
CONFIG = TriggerPodConfig()


def rendered(pods: list[UnplacedPod], config: PlannerConfig = POOLS) -> list[dict[str, Any]]:
    return [render_trigger_pod(t, CONFIG) for t in plan(pods, config).triggers]


def base_pod(
    name: str, gpus: int, cpu: str, memory: str, labels: dict[str, str], request: dict[str, Any]
) -> dict[str, Any]:
    """What every trigger pod has; each test adds its selector, affinity and tolerations."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "kgpu-system",
            "labels": {
                "kgpu.io/component": "autoscale-trigger",
                "app.kubernetes.io/managed-by": "kgpu",
                "kgpu.io/trigger-type": "gpu-scale-up",
                **labels,
            },
            "annotations": {
                "kgpu.io/created-by": "kgpu-autoscaler",
                "kgpu.io/purpose": "trigger-node-scale-up",
                "kgpu.io/cleanup-after": "node-ready",
                "kgpu.io/original-request": json.dumps(
                    request, sort_keys=True, separators=(",", ":")
                ),
                "cluster-autoscaler.kubernetes.io/safe-to-evict": "true",
            },
        },
        "spec": {
            "schedulerName": "default-scheduler",
            "priorityClassName": "kgpu-autoscale-trigger",
            "restartPolicy": "Never",
            "activeDeadlineSeconds": 600,
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "containers": [
                {
                    "name": "trigger",
                    "image": "registry.k8s.io/pause:3.9",
                    "resources": {
                        "requests": {"nvidia.com/gpu": str(gpus), "cpu": cpu, "memory": memory},
                        "limits": {"nvidia.com/gpu": str(gpus)},
                    },
                }
            ],
        },
    }


GPU_TOLERATION = [{"key": "nvidia.com/gpu", "operator": "Exists"}]


def instance_types(*names: str) -> dict[str, Any]:
    term = {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": list(names)}
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [term]}]
            }
        }
    }


def test_two_halves_render_one_trigger_for_one_gpu_of_the_a100_pool() -> None:
    [pod] = rendered(pending(gpu_pod("a").share(500, A100), gpu_pod("b").share(500, A100)))
    group = pod["metadata"]["labels"]["kgpu.io/trigger-group"]
    expected = base_pod(
        pod["metadata"]["name"],
        1,
        "2",
        "2048Mi",
        {
            "kgpu.io/trigger-group": group,
            "kgpu.io/gpu-model": A100,
            "kgpu.io/nodepool": "gpu-a100",
        },
        {
            "cpu": "2",
            "gpus": 1,
            "instanceTypes": ["p4de.24xlarge"],
            "memory": "2048Mi",
            "models": [A100],
            "pool": "gpu-a100",
            "pods": [
                {"gpuFraction": 0.5, "gpus": 1, "pod": "default/a"},
                {"gpuFraction": 0.5, "gpus": 1, "pod": "default/b"},
            ],
        },
    )
    expected["spec"]["nodeSelector"] = {"karpenter.sh/nodepool": "gpu-a100"}
    expected["spec"]["affinity"] = instance_types("p4de.24xlarge")
    expected["spec"]["tolerations"] = GPU_TOLERATION
    assert pod == expected
    assert pod["metadata"]["name"].startswith("kgpu-trigger-nvidia-a100-sxm4-80gb-")


def test_three_4_gpu_pods_render_a_full_node_and_a_half_node() -> None:
    pods = rendered(pending(*(gpu_pod(f"p{i}").gpus(4, A100).cpu(8000) for i in range(3))))
    requests = [p["spec"]["containers"][0]["resources"]["requests"] for p in pods]
    assert requests == [
        {"nvidia.com/gpu": "8", "cpu": "16", "memory": "2048Mi"},
        {"nvidia.com/gpu": "4", "cpu": "8", "memory": "1024Mi"},
    ]
    request = json.loads(pods[1]["metadata"]["annotations"]["kgpu.io/original-request"])
    assert request["pods"] == [{"gpus": 4, "pod": "default/p2"}]


def test_without_pools_a_card_name_becomes_the_gpu_product_selector() -> None:
    [pod] = rendered(pending(make_pod("a").share(300, L4).cpu(500)), PlannerConfig())
    group = pod["metadata"]["labels"]["kgpu.io/trigger-group"]
    expected = base_pod(
        pod["metadata"]["name"],
        1,
        "500m",
        "1024Mi",
        {"kgpu.io/trigger-group": group, "kgpu.io/gpu-model": L4},
        {
            "cpu": "500m",
            "gpus": 1,
            "instanceTypes": [],
            "memory": "1024Mi",
            "models": [L4],
            "pool": "",
            "pods": [{"gpuFraction": 0.3, "gpus": 1, "pod": "default/a"}],
        },
    )
    expected["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": L4}
    assert pod == expected


def test_without_pools_card_alternatives_become_node_affinity() -> None:
    [pod] = rendered(pending(make_pod("a").gpus(2, "NVIDIA-H100", A100)), PlannerConfig())
    assert "nodeSelector" not in pod["spec"]
    assert pod["metadata"]["labels"]["kgpu.io/gpu-model"] == "any"
    terms = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert terms == {
        "nodeSelectorTerms": [
            {
                "matchExpressions": [
                    {
                        "key": "nvidia.com/gpu.product",
                        "operator": "In",
                        "values": ["NVIDIA-H100", A100],
                    }
                ]
            }
        ]
    }


def test_a_pool_target_keeps_the_pods_affinity_and_replaces_their_gpu_product_terms() -> None:
    zone = NodeRequirement("topology.kubernetes.io/zone", "In", ("us-east-1a", "us-east-1b"))
    product = NodeRequirement("nvidia.com/gpu.product", "In", (L4,))
    # One term: its GPU product picks the L4 pool, and gives way to the pool's instance types.
    pod = UnplacedPod(gpu_pod("a").gpus(1).build(), affinity=((zone, product),))
    [trigger] = rendered([pod])
    zone_term = {
        "key": "topology.kubernetes.io/zone",
        "operator": "In",
        "values": ["us-east-1a", "us-east-1b"],
    }
    l4_types = {
        "key": "node.kubernetes.io/instance-type",
        "operator": "In",
        "values": ["g6.48xlarge", "g6.12xlarge", "g6.xlarge"],
    }
    assert trigger["spec"]["nodeSelector"] == {"karpenter.sh/nodepool": "gpu-l4"}
    assert trigger["spec"]["affinity"] == {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [zone_term, l4_types]}]
            }
        }
    }
    # Two terms: (A or B) and X is (A and X) or (B and X). The team label, which only the
    # A100 pool sets, picks that pool.
    two = UnplacedPod(gpu_pod("b").gpus(1).selector("team", "ml").build(), affinity=((zone,), ()))
    [trigger] = rendered([two])
    a100_types = {
        "key": "node.kubernetes.io/instance-type",
        "operator": "In",
        "values": ["p4de.24xlarge"],
    }
    assert trigger["spec"]["nodeSelector"] == {"team": "ml", "karpenter.sh/nodepool": "gpu-a100"}
    required = trigger["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert required["nodeSelectorTerms"] == [
        {"matchExpressions": [zone_term, a100_types]},
        {"matchExpressions": [a100_types]},
    ]


def test_memory_only_pods_say_so_in_the_original_request() -> None:
    pods = [UnplacedPod(gpu_pod("m").selector("nvidia.com/gpu.product", A100).build(), 20480)]
    [trigger] = rendered(pods)
    request = json.loads(trigger["metadata"]["annotations"]["kgpu.io/original-request"])
    assert request["pods"] == [
        {"gpuFraction": 0.25, "gpuMemoryMiB": 20480, "gpus": 1, "pod": "default/m"}
    ]


def test_trigger_pods_and_their_priority_class_are_valid_kubernetes() -> None:
    pods = rendered(
        pending(gpu_pod("a").share(500, A100), gpu_pod("b").gpus(4, L4).selector("team", "ml"))
    )
    pods += rendered(pending(make_pod("c").gpus(2, "NVIDIA-H100", A100)), PlannerConfig())
    for obj in [*pods, render_priority_class(CONFIG)]:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    assert render_priority_class(CONFIG)["value"] == -5
    assert render_priority_class(CONFIG)["preemptionPolicy"] == "Never"


def test_a_trigger_pod_reads_back_as_what_it_stands_for() -> None:
    [spec] = plan(pending(gpu_pod("a").gpus(4, A100), gpu_pod("b").gpus(2, A100)), POOLS).triggers
    obj = render_trigger_pod(spec, CONFIG)
    obj["metadata"]["creationTimestamp"] = "2025-01-02T03:04:05Z"
    obj["spec"]["nodeName"] = "ip-10-0-0-1"
    seen = observed_trigger(obj)
    assert seen is not None
    assert (seen.name, seen.group, seen.pods, seen.gpus, seen.pool, seen.node) == (
        spec.name,
        spec.group.id,
        ("default/a", "default/b"),
        6,
        "gpu-a100",
        "ip-10-0-0-1",
    )
    assert seen.created_at == 1735787045.0 and not seen.deleting and not seen.failed
    assert (seen.cpu_milli, seen.memory_mib) == (2000, 2048)
    obj["status"] = {"phase": "Failed", "reason": "DeadlineExceeded"}
    failed = observed_trigger(obj)
    assert failed is not None and failed.failed == "trigger pod failed: DeadlineExceeded"
    assert observed_trigger({"metadata": {"name": "other", "labels": {}}}) is None


def k8s_pod(annotations: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml", "annotations": annotations},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}], **spec},
    }


def test_pending_pods_are_read_with_gpu_memory_gang_and_affinity() -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}
                        ]
                    }
                ]
            }
        }
    }
    obj = k8s_pod({"gpu-memory": "20480", "scheduling.k8s.io/group-name": "job"}, affinity=affinity)
    p = pending_from_k8s(obj)
    assert (p.key, p.gpu_memory_mib, p.gang, p.pod.cpu_milli) == ("ml/p", 20480, "ml/job", 1000)
    assert p.affinity == ((NodeRequirement("kubernetes.io/arch", "In", ("amd64",)),),)


@pytest.mark.parametrize("value", ["abc", "0", "-5", "1.5"])
def test_a_malformed_gpu_memory_names_the_field(value: str) -> None:
    with pytest.raises(ConversionError) as err:
        pending_from_k8s(k8s_pod({"gpu-memory": value}))
    assert str(err.value) == (
        f'Pod ml/p: annotation gpu-memory is "{value}", expected a whole number of MiB above 0'
    )
