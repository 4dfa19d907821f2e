"""Topology levels in a profile and topology annotations on pods, read as untrusted input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kgpu.config import ProfileError, load_profile
from kgpu.framework.status import Code
from kgpu.model.queue import QueueSpec
from kgpu.model.topology_request import (
    TopologyRequest,
    TopologyRequestError,
    gang_request,
    request_of,
)
from tests.builders import make_pod
from tests.session_harness import Snap, binds, with_annotations
from tests.test_topology_placement import REQ_RACK, cluster, gang, run

LEVELS = (("block", "example.com/block"), ("rack", "example.com/rack"))
FILTERS = ["NodeUnschedulable", "NodeSelector", "NodeResourcesFit", "GpuFit"]


def profile_file(tmp_path: Path, levels: Any, filters: list[str] = FILTERS) -> str:
    body = {"filters": filters, "gpuChoice": "GpuTightest", "topology": {"levels": levels}}
    path = tmp_path / "profile.yaml"
    path.write_text(yaml.safe_dump({"topo": body}))
    return str(path)


def test_levels_load_from_yaml(tmp_path: Path) -> None:
    levels = [
        {"name": "zone", "nodeLabel": "topology.kubernetes.io/zone"},
        {"name": "clique", "nodeLabel": "nvidia.com/gpu.clique"},
    ]
    profile = load_profile(profile_file(tmp_path, levels))
    assert profile.topology.pairs == (
        ("zone", "topology.kubernetes.io/zone"),
        ("clique", "nvidia.com/gpu.clique"),
    )
    assert load_profile("bestfit").topology.levels == ()


@pytest.mark.parametrize(
    ("levels", "expected"),
    [
        (
            [{"name": "Rack", "nodeLabel": "example.com/rack"}],
            "level name 'Rack' is not a DNS label",
        ),
        (
            [{"name": "rack", "nodeLabel": "example.com/-rack"}],
            "nodeLabel 'example.com/-rack' is not a Kubernetes label key",
        ),
        (
            [{"name": "rack", "nodeLabel": "Example_com/rack"}],
            "its prefix must be a DNS subdomain",
        ),
        (
            [
                {"name": "rack", "nodeLabel": "example.com/rack"},
                {"name": "rack", "nodeLabel": "example.com/rack2"},
            ],
            "topology levels must each have their own name; 'rack' is given more than once",
        ),
        (
            [
                {"name": "a", "nodeLabel": "example.com/rack"},
                {"name": "b", "nodeLabel": "example.com/rack"},
            ],
            "own nodeLabel; 'example.com/rack' is given more than once",
        ),
        ([{"name": "rack"}], "nodeLabel"),
        ([{"name": 5, "nodeLabel": "example.com/rack"}], "Input should be a valid string"),
        ([{"name": "rack", "nodeLabel": "example.com/rack", "tier": 1}], "Extra inputs"),
        (
            [{"name": f"l{i}", "nodeLabel": f"example.com/l{i}"} for i in range(9)],
            "at most 8 items",
        ),
    ],
)
def test_bad_levels_are_refused_naming_the_field_and_value(
    tmp_path: Path, levels: Any, expected: str
) -> None:
    with pytest.raises(ProfileError, match="profile 'topo'") as caught:
        load_profile(profile_file(tmp_path, levels))
    assert expected in str(caught.value)


def test_levels_without_the_node_selector_filter_are_refused(tmp_path: Path) -> None:
    path = profile_file(
        tmp_path, [{"name": "rack", "nodeLabel": "example.com/rack"}], ["NodeResourcesFit"]
    )
    with pytest.raises(ProfileError, match="does not list the NodeSelector filter"):
        load_profile(path)


def pod(**annotations: str) -> Any:
    return with_annotations(make_pod("w0", "ml"), **annotations)


def test_requests_by_level_name_or_node_label_in_each_dialect() -> None:
    assert request_of(pod(), LEVELS) is None
    assert request_of(pod(**{"kgpu.io/topology-required": "rack"}), LEVELS) == TopologyRequest(1)
    kueue = {"kueue.x-k8s.io/podset-preferred-topology": "example.com/block"}
    assert request_of(pod(**kueue), LEVELS) == TopologyRequest(None, 0)
    both = {
        "kai.scheduler/topology-required-placement": "example.com/block",
        "kai.scheduler/topology-preferred-placement": " example.com/rack ",
    }
    assert request_of(pod(**both), LEVELS) == TopologyRequest(0, 1)
    assert TopologyRequest(0, 1).levels_to_try(2) == (1, 0)
    assert TopologyRequest(None, 1).levels_to_try(2) == (1, 0)
    assert TopologyRequest(1).levels_to_try(2) == (1,)


def test_an_unknown_level_names_pod_annotation_value_and_the_levels_expected() -> None:
    with pytest.raises(TopologyRequestError) as caught:
        request_of(pod(**{"kueue.x-k8s.io/podset-required-topology": "raack"}), LEVELS)
    assert str(caught.value) == (
        "Pod ml/w0: annotation kueue.x-k8s.io/podset-required-topology is 'raack'; expected a "
        "topology level of the profile, by name or node label: block (example.com/block), "
        "rack (example.com/rack)"
    )


def test_a_huge_value_is_cut_in_the_message() -> None:
    with pytest.raises(TopologyRequestError) as caught:
        request_of(pod(**{"kgpu.io/topology-required": "x" * 100_000}), LEVELS)
    assert len(str(caught.value)) < 600


def test_dialects_that_disagree_and_a_preferred_level_above_the_required_are_refused() -> None:
    with pytest.raises(TopologyRequestError, match="name different levels \\(rack and block\\)"):
        request_of(
            pod(
                **{
                    "kgpu.io/topology-required": "rack",
                    "kueue.x-k8s.io/podset-required-topology": "example.com/block",
                }
            ),
            LEVELS,
        )
    with pytest.raises(TopologyRequestError, match="above the required level rack"):
        request_of(
            pod(**{"kgpu.io/topology-required": "rack", "kgpu.io/topology-preferred": "block"}),
            LEVELS,
        )


def test_pods_of_one_gang_must_agree_and_pods_without_annotations_follow() -> None:
    a = with_annotations(make_pod("a"), **{"kgpu.io/topology-required": "rack"})
    b = with_annotations(make_pod("b"), **{"kgpu.io/topology-required": "block"})
    plain = make_pod("c").build()
    assert gang_request([plain, a, plain], LEVELS) == TopologyRequest(1)
    with pytest.raises(TopologyRequestError, match="Pods default/a and default/b of one gang"):
        gang_request([a, plain, b], LEVELS)


def test_a_gang_with_an_unreadable_annotation_is_refused_alone() -> None:
    snap = Snap(cluster(("b1", "r1", 2)), [QueueSpec("q")])
    gang(snap, "bad", 2, {"kgpu.io/topology-required": "row"})
    gang(snap, "good", 2, REQ_RACK)
    result = run(snap)
    assert sorted(binds(result)) == [("good-0", "r1-0"), ("good-1", "r1-1")]
    refused = {str(p.pod): p for p in result.pending}
    assert set(refused) == {"default/bad-0", "default/bad-1"}
    status = refused["default/bad-0"].status
    assert status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert refused["default/bad-0"].message.startswith(
        "Pod default/bad-0: annotation kgpu.io/topology-required is 'row'; expected a topology "
        "level of the profile"
    )
