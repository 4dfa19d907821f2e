"""``kgpu manifests``: every rendered object is valid Kubernetes, the CRDs are structural, and
their schemas accept good custom resources and reject malformed ones, naming the field."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import kubernetes_validate
import pytest
import yaml
from click.testing import CliRunner
from cryptography import x509

from kgpu.agent.kubelet import DEFAULT_CHECKPOINT, DEFAULT_SOCKET
from kgpu.cli import main
from kgpu.kube.install.bundle import render_objects, to_yaml
from kgpu.kube.install.options import InstallOptions, RenderError
from kgpu.kube.install.webhook_certs import generate_tls, service_dns_names
from tests.crd_schemas import errors, schema_of

# kubernetes-validate ships schemas from 1.25 on; the objects use no API that changed
# between 1.20 (the e2e server) and 1.25, and the e2e test creates them on 1.20 itself.
K8S_VERSION = "1.25.0"

Obj = dict[str, Any]


@pytest.fixture(scope="module")
def install() -> list[Obj]:
    return render_objects(InstallOptions())


def by_kind(objects: list[Obj], kind: str) -> list[Obj]:
    return [o for o in objects if o["kind"] == kind]


# ---------------------------------------------------------------------------- Kubernetes schemas


def test_every_object_is_valid_kubernetes_in_strict_mode(install: list[Obj]) -> None:
    for obj in install:
        # strict: an unknown field (a typo) fails too, not only a wrong type
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_strict_validation_catches_a_typo(install: list[Obj]) -> None:
    config = copy.deepcopy(by_kind(install, "ValidatingWebhookConfiguration")[0])
    config["webhooks"][0]["sideEffect"] = "None"
    with pytest.raises(kubernetes_validate.ValidationError, match="sideEffect"):
        kubernetes_validate.validate(config, K8S_VERSION, strict=True)


def test_the_install_is_complete_and_in_creation_order(install: list[Obj]) -> None:
    kinds = [o["kind"] for o in install]
    assert kinds == [
        "Namespace",
        *["CustomResourceDefinition"] * 4,
        "ServiceAccount",
        *["ClusterRole", "ClusterRoleBinding"] * 4,  # reads, tenant, shares, workspaces
        *["Role", "RoleBinding"] * 3,  # the Lease; the record key; the install's pods
        "Deployment",
        "Service",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "DaemonSet",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",  # the agent's pods, read
        "RoleBinding",
        "Role",  # the record key, read
        "RoleBinding",
        "Secret",
        "Service",
        "Deployment",
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
    ]


def test_yaml_round_trips_without_anchors(install: list[Obj]) -> None:
    text = to_yaml(install, "# header\n")
    assert text.startswith("# header\n---\n")
    assert "&id" not in text and "*id" not in text
    assert list(yaml.safe_load_all(text)) == install


def test_options_reach_every_object() -> None:
    opts = InstallOptions(
        namespace="gpu-sched", image="example.com/kgpu:dev", scheduler_name="team-sched"
    )
    objects = render_objects(opts)
    for obj in objects:
        if "namespace" in obj["metadata"]:
            assert obj["metadata"]["namespace"] == "gpu-sched"
        if obj["kind"] != "CustomResourceDefinition":
            assert obj["metadata"]["name"].startswith(("team-sched", "gpu-sched"))
    deployments = by_kind(objects, "Deployment")
    assert {
        c["image"] for d in deployments for c in d["spec"]["template"]["spec"]["containers"]
    } == {"example.com/kgpu:dev"}
    scheduler = deployments[0]["spec"]["template"]["spec"]["containers"][0]
    assert "--scheduler-name=team-sched" in scheduler["args"]
    assert "--namespace-for-lease=gpu-sched" in scheduler["args"]
    service = by_kind(objects, "ValidatingWebhookConfiguration")[0]["webhooks"][0]["clientConfig"]
    assert service["service"] == {
        "namespace": "gpu-sched",
        "name": "team-sched-webhook",
        "path": "/validate",
        "port": 443,
    }


def test_without_webhook_and_crds_only() -> None:
    kinds = {o["kind"] for o in render_objects(InstallOptions(webhook=False))}
    assert "ValidatingWebhookConfiguration" not in kinds and "Secret" not in kinds
    assert "MutatingWebhookConfiguration" not in kinds
    assert len(by_kind(render_objects(InstallOptions(webhook=False)), "Deployment")) == 1
    # No webhook, so no share could get its GPU environment: shares are only accounted.
    [scheduler] = by_kind(render_objects(InstallOptions(webhook=False)), "Deployment")
    assert "--no-confine-shares" in scheduler["spec"]["template"]["spec"]["containers"][0]["args"]
    crds = render_objects(InstallOptions(crds_only=True))
    assert [c["metadata"]["name"] for c in crds] == [
        "queues.kgpu.io",
        "podgroups.kgpu.io",
        "devices.kgpu.io",
        "workspaces.kgpu.io",
    ]


@pytest.mark.parametrize(
    ("opts", "message"),
    [
        (InstallOptions(namespace="KGPU"), '--namespace is "KGPU", expected lower-case letters'),
        (InstallOptions(scheduler_name="a" * 60), "at most 55 characters"),
        (InstallOptions(image="bad image"), '--image is "bad image", expected an image reference'),
        (InstallOptions(replicas=0), "--replicas is 0, expected at least 1"),
        (InstallOptions(failure_policy="Maybe"), "expected Ignore or Fail"),
    ],
)
def test_bad_options_are_refused(opts: InstallOptions, message: str) -> None:
    with pytest.raises(RenderError, match=message):
        render_objects(opts)


def named(objects: list[Obj], kind: str, name: str) -> Obj:
    [obj] = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return obj


def rules_of(role: Obj) -> dict[tuple[tuple[str, ...], tuple[str, ...]], tuple[str, ...]]:
    return {
        (tuple(r["apiGroups"]), tuple(r["resources"])): tuple(r["verbs"]) for r in role["rules"]
    }


def test_rbac_grants_only_what_the_scheduler_uses(install: list[Obj]) -> None:
    crs = ("queues", "podgroups", "devices", "workspaces")
    DRA = ("deviceclasses", "resourceslices", "resourceclaims", "resourceclaimtemplates")
    # Cluster-wide: what a session reads, Events, and the cluster-scoped Queues' status.
    assert rules_of(named(install, "ClusterRole", "kgpu-scheduler")) == {
        (("",), ("pods",)): ("get", "list", "watch"),
        (("",), ("nodes",)): ("get", "list", "watch"),
        (("kgpu.io",), crs): ("get", "list", "watch"),
        # KAI Scheduler's Queues and PodGroups, read beside kgpu's; never their status
        (("scheduling.run.ai",), ("queues", "podgroups")): ("get", "list", "watch"),
        # Koordinator's Devices, a node's GPUs where it has no kgpu.io Device
        (("scheduling.koordinator.sh",), ("devices",)): ("get", "list", "watch"),
        # list and watch: the cache PodGroups' spec.priorityClassName is read from;
        # no create: the trigger pods' class is installed with the rest
        (("scheduling.k8s.io",), ("priorityclasses",)): ("get", "list", "watch"),
        (("",), ("events",)): ("create", "patch"),
        (("kgpu.io",), ("queues/status",)): ("update", "patch"),
        # Volcano's objects, read beside kgpu's; never written but a PodGroup's status
        (("scheduling.volcano.sh",), ("queues", "podgroups")): ("get", "list", "watch"),
        # DRA's four kinds, cached where the server serves resource.k8s.io/v1
        (("resource.k8s.io",), DRA): ("get", "list", "watch"),
        # PodDisruptionBudgets, cached by defragmentation where a profile turns it on
        (("policy",), ("poddisruptionbudgets",)): ("get", "list", "watch"),
    }
    # In the pods' namespaces: bind, delete victims, evict the pods defragmentation moves,
    # correct device annotations. No create of a pod.
    assert rules_of(named(install, "ClusterRole", "kgpu-scheduler-tenant")) == {
        (("",), ("pods",)): ("delete", "patch"),
        (("",), ("pods/binding",)): ("create",),
        (("",), ("pods/eviction",)): ("create",),
        (("kgpu.io",), ("podgroups/status",)): ("update", "patch"),
        (("scheduling.volcano.sh",), ("podgroups/status",)): ("update", "patch"),
        (("resource.k8s.io",), ("resourceclaims/status",)): ("update",),
        # the delete-protection finalizer, added with an allocation and removed after it
        (("resource.k8s.io",), ("resourceclaims",)): ("update",),
    }
    # the GPU environment of shares, written in their namespaces; nothing read in bulk
    assert rules_of(named(install, "ClusterRole", "kgpu-scheduler-shares")) == {
        (("",), ("configmaps",)): ("get", "create", "update", "patch"),
    }
    assert rules_of(named(install, "ClusterRole", "kgpu-scheduler-workspaces")) == {
        (("kgpu.io",), ("workspaces/status",)): ("patch",),
        (("kgpu.io",), ("workspaces/finalizers",)): ("update",),
        (("",), ("services",)): ("list", "create"),
        (("apps",), ("deployments",)): ("list", "create", "patch"),
        (("apps",), ("statefulsets",)): ("list", "create", "patch", "delete"),
        (("leaderworkerset.x-k8s.io",), ("leaderworkersets",)): ("list", "create", "patch"),
    }
    # The one place the scheduler may create a pod: the reservation pods of shared GPUs.
    pods = named(install, "Role", "kgpu-scheduler-install")
    assert pods["metadata"]["namespace"] == "kgpu-system"
    assert rules_of(pods) == {(("",), ("pods",)): ("create", "delete", "patch")}
    lease = named(install, "Role", "kgpu-scheduler-leader-election")
    assert lease["metadata"]["namespace"] == "kgpu-system"
    assert lease["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "update"],
            "resourceNames": ["kgpu-scheduler"],
        },
    ]
    key = named(install, "Role", "kgpu-scheduler-record-key")
    assert key["metadata"]["namespace"] == "kgpu-system"
    assert key["rules"] == [
        # The record key: made at the first start, then read back, that Secret only.
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "verbs": ["get"],
            "resourceNames": ["kgpu-scheduler-record-key"],
        },
    ]
    webhook_key = named(install, "Role", "kgpu-scheduler-webhook-record-key")
    assert webhook_key["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "verbs": ["get"],
            "resourceNames": ["kgpu-scheduler-record-key"],
        }
    ]
    for kind in ("ClusterRole", "Role"):
        for role in by_kind(install, kind):
            for rule in role["rules"]:
                assert "*" not in rule["verbs"] and "*" not in rule["resources"]
                assert "*" not in rule["apiGroups"]
    # every role is bound, to its own account, and every binding names a role rendered
    for binding in by_kind(install, "ClusterRoleBinding") + by_kind(install, "RoleBinding"):
        ref = binding["roleRef"]
        assert named(install, ref["kind"], ref["name"])
        [subject] = binding["subjects"]
        assert subject["namespace"] == "kgpu-system"
        assert binding["metadata"]["name"].startswith(subject["name"])


def test_scheduler_deployment_has_probes_metrics_and_leader_election(install: list[Obj]) -> None:
    deployment = by_kind(install, "Deployment")[0]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][:3] == ["run", "--scheduler-name=kgpu-scheduler", "--leader-elect"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["ports"] == [{"name": "metrics", "containerPort": 10251, "protocol": "TCP"}]
    metrics = by_kind(install, "Service")[0]
    assert metrics["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert metrics["spec"]["ports"][0]["targetPort"] == "metrics"


@pytest.mark.parametrize("component", [0, 1], ids=["scheduler", "webhook"])
def test_containers_run_flags_the_kgpu_command_has(install: list[Obj], component: int) -> None:
    """The Deployments' command lines against the CLI itself, so the two cannot drift."""
    import click

    args = by_kind(install, "Deployment")[component]["spec"]["template"]["spec"]["containers"][0][
        "args"
    ]
    command = main.commands[args[0]]
    flags = {
        flag
        for p in command.params
        if isinstance(p, click.Option)
        for flag in p.opts + p.secondary_opts
    }
    assert {a.split("=", 1)[0] for a in args[1:]} <= flags
    if args[0] == "run":  # nothing there must exist on this machine: parse it for real
        params = command.make_context("run", args[1:]).params
        assert params["leader_elect"] is True
        assert params["namespace_for_lease"] == "kgpu-system"
        assert params["metrics_port"] == 10251
        # Reservation pods of shared GPUs in the install's namespace, which the webhook skips.
        assert (params["confine_shares"], params["reservation_namespace"]) == (True, "kgpu-system")


def test_webhook_certificate_is_signed_by_the_ca_bundle(install: list[Obj]) -> None:
    import base64

    secret = by_kind(install, "Secret")[0]
    config = by_kind(install, "ValidatingWebhookConfiguration")[0]
    ca = x509.load_pem_x509_certificate(
        base64.b64decode(config["webhooks"][0]["clientConfig"]["caBundle"])
    )
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == service_dns_names(
        "kgpu-scheduler-webhook", "kgpu-system"
    )
    assert {w["clientConfig"]["caBundle"] for w in config["webhooks"]} == {secret["data"]["ca.crt"]}
    [mutating] = by_kind(install, "MutatingWebhookConfiguration")
    assert [w["clientConfig"] for w in mutating["webhooks"]] == [
        {**config["webhooks"][0]["clientConfig"], "service": {
            **config["webhooks"][0]["clientConfig"]["service"], "path": "/mutate"}}
    ]  # fmt: skip
    # the webhook pods restart when the certificate changes
    template = by_kind(install, "Deployment")[1]["spec"]["template"]
    assert template["metadata"]["annotations"]["kgpu.io/tls-sha256"]
    assert template["spec"]["volumes"][0]["secret"]["secretName"] == secret["metadata"]["name"]


def test_webhook_rules(install: list[Obj]) -> None:
    config = by_kind(install, "ValidatingWebhookConfiguration")[0]
    rules = {
        w["name"]: [
            (r["apiGroups"][0], tuple(r["operations"]), r["resources"][0]) for r in w["rules"]
        ]
        for w in config["webhooks"]
    }
    assert rules == {
        # UPDATE too: a pod may not be relabelled into a queue its namespace may not use, nor
        # a bound pod change its queue (status writes go to pods/status, not matched here)
        "pods.kgpu.io": [("", ("CREATE", "UPDATE"), "pods")],
        "queues.kgpu.io": [
            ("kgpu.io", ("CREATE", "UPDATE"), "queues"),
            ("scheduling.volcano.sh", ("CREATE", "UPDATE"), "queues"),
        ],
        "podgroups.kgpu.io": [
            ("kgpu.io", ("CREATE", "UPDATE"), "podgroups"),
            # Volcano's: their volcano.sh/card.request
            ("scheduling.volcano.sh", ("CREATE", "UPDATE"), "podgroups"),
            ("batch.volcano.sh", ("CREATE", "UPDATE"), "jobs"),
        ],
        "workspaces.kgpu.io": [("kgpu.io", ("CREATE", "UPDATE"), "workspaces")],
        # a share's GPU environment: only kgpu writes it
        "gpu-env.configmaps.kgpu.io": [("", ("CREATE", "UPDATE"), "configmaps")],
        # each agent its own node's Device only
        "devices.kgpu.io": [
            ("kgpu.io", ("CREATE", "UPDATE", "DELETE"), "devices"),
            ("kgpu.io", ("UPDATE",), "devices/status"),
        ],
    }
    for hook in config["webhooks"]:
        # Devices fail closed whatever the policy: only agents write them, and retry.
        assert hook["failurePolicy"] == ("Fail" if hook["name"] == "devices.kgpu.io" else "Ignore")
        assert hook["sideEffects"] == "None"
        assert hook["admissionReviewVersions"] == ["v1"]
    # The install's own namespace is skipped, so the webhook's pods can always start.
    skip = config["webhooks"][0]["namespaceSelector"]["matchExpressions"][0]
    assert by_kind(install, "Namespace")[0]["metadata"]["labels"][skip["key"]] in skip["values"]
    assert skip["operator"] == "NotIn"
    # The mutating hook: pods at CREATE, from the same namespaces, under the same policy.
    [mutating] = by_kind(install, "MutatingWebhookConfiguration")
    [env] = mutating["webhooks"]
    assert env["name"] == "env.pods.kgpu.io"
    assert [(r["operations"], r["resources"]) for r in env["rules"]] == [(["CREATE"], ["pods"])]
    assert env["namespaceSelector"] == config["webhooks"][0]["namespaceSelector"]
    assert (env["failurePolicy"], env["reinvocationPolicy"]) == ("Ignore", "Never")
    strict = render_objects(InstallOptions(failure_policy="Fail"))
    hooks = by_kind(strict, "ValidatingWebhookConfiguration")[0]["webhooks"]
    hooks += by_kind(strict, "MutatingWebhookConfiguration")[0]["webhooks"]
    assert {w["failurePolicy"] for w in hooks} == {"Fail"}
    # The same choice when the webhook cannot read the Nodes a Workspace is placed on.
    args = by_kind(strict, "Deployment")[1]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--on-nodes-unavailable=deny" in args
    args = by_kind(install, "Deployment")[1]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--on-nodes-unavailable=admit" in args


def test_the_webhook_may_list_nodes_and_queues_ask_access_and_nothing_else(
    install: list[Obj],
) -> None:
    role = named(install, "ClusterRole", "kgpu-scheduler-webhook")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]},
        {"apiGroups": ["kgpu.io"], "resources": ["queues"], "verbs": ["list"]},
        {
            "apiGroups": ["authorization.k8s.io"],
            "resources": ["subjectaccessreviews"],
            "verbs": ["create"],
        },
    ]
    binding = named(install, "ClusterRoleBinding", "kgpu-scheduler-webhook")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "kgpu-scheduler-webhook", "namespace": "kgpu-system"}
    ]
    # the node of the agent pod behind a Device write, read where the agents run only
    pods = named(install, "Role", "kgpu-scheduler-webhook-agent-pods")
    assert pods["metadata"]["namespace"] == "kgpu-system"
    assert pods["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]
    assert "kgpu-scheduler-webhook-agent-pods" not in str(
        render_objects(InstallOptions(agent=False))
    )
    # Its pods mount the service account's token, or they could not list.
    webhook = by_kind(install, "Deployment")[1]["spec"]["template"]["spec"]
    assert webhook["serviceAccountName"] == "kgpu-scheduler-webhook"
    assert webhook.get("automountServiceAccountToken", True) is True
    args = webhook["containers"][0]["args"]
    assert "--agent-service-account=kgpu-system:kgpu-scheduler-agent" in args


def test_the_agent_may_write_devices_read_its_node_and_tell_events_and_nothing_else(
    install: list[Obj],
) -> None:
    role = named(install, "ClusterRole", "kgpu-scheduler-agent")
    assert role["rules"] == [
        {"apiGroups": ["kgpu.io"], "resources": ["devices"], "verbs": ["get", "create", "update"]},
        {"apiGroups": ["kgpu.io"], "resources": ["devices/status"], "verbs": ["patch"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
    ]
    binding = named(install, "ClusterRoleBinding", "kgpu-scheduler-agent")
    assert binding["roleRef"]["name"] == "kgpu-scheduler-agent"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "kgpu-scheduler-agent", "namespace": "kgpu-system"}
    ]


def test_the_agent_runs_on_every_gpu_node_with_nvml_and_the_kubelet_checkpoint(
    install: list[Obj],
) -> None:
    [daemonset] = by_kind(install, "DaemonSet")
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "kgpu-scheduler-agent"
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    [container] = pod["containers"]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert env == {
        "NODE_NAME": {"fieldRef": {"fieldPath": "spec.nodeName"}},
        "POD_IP": {"fieldRef": {"fieldPath": "status.podIP"}},
        "NVIDIA_VISIBLE_DEVICES": "all",
        "NVIDIA_DRIVER_CAPABILITIES": "utility",
    }
    assert "nvidia.com/gpu" not in container["resources"].get("limits", {})
    # The agent's default checkpoint path and pod-resources socket are inside the
    # directories mounted from the host, read-only.
    *mounts, token = container["volumeMounts"]
    *volumes, projected = pod["volumes"]
    assert [m["name"] for m in mounts] == [v["name"] for v in volumes]
    assert all(m["readOnly"] is True for m in mounts)
    assert [
        (v["hostPath"]["path"], m["mountPath"]) for m, v in zip(mounts, volumes, strict=True)
    ] == [
        (str(DEFAULT_CHECKPOINT.parent),) * 2,
        (str(DEFAULT_SOCKET.parent),) * 2,
    ]
    # The token the API server binds to the pod (its name and uid reach the webhook, which
    # keeps each agent to its own node's Device), where clients look for it; not the
    # legacy one, which names no pod.
    assert pod["automountServiceAccountToken"] is False
    assert (token["name"], token["mountPath"], token["readOnly"]) == (
        projected["name"],
        "/var/run/secrets/kubernetes.io/serviceaccount",
        True,
    )
    sources = projected["projected"]["sources"]
    assert sources[0] == {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}}
    assert [i["path"] for s in sources[1:] for i in next(iter(s.values()))["items"]] == [
        "ca.crt",
        "namespace",
    ]
    assert container["args"][0] == "agent"
    params = main.commands["agent"].make_context("agent", container["args"][1:]).params
    assert params["metrics_address"] == "$(POD_IP)"  # the kubelet expands it
    assert params["interval"] == 10.0
    assert container["ports"] == [{"name": "metrics", "containerPort": 10261, "protocol": "TCP"}]
    assert params["metrics_port"] == 10261
    assert container["livenessProbe"]["httpGet"] == {
        "path": "/healthz",
        "port": "metrics",
        "scheme": "HTTP",
    }
    annotations = daemonset["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == "10261"
    assert params["kubelet_checkpoint"] == DEFAULT_CHECKPOINT
    assert params["pod_resources_socket"] == DEFAULT_SOCKET


def test_the_agent_is_left_out_or_kept_to_chosen_nodes() -> None:
    assert "DaemonSet" not in {o["kind"] for o in render_objects(InstallOptions(agent=False))}
    opts = InstallOptions(agent_node_selector="gpu=yes,pool=train", webhook=False)
    [daemonset] = by_kind(render_objects(opts), "DaemonSet")
    assert daemonset["spec"]["template"]["spec"]["nodeSelector"] == {"gpu": "yes", "pool": "train"}
    with pytest.raises(RenderError, match='--agent-node-selector is "gpu", expected label=value'):
        render_objects(InstallOptions(agent_node_selector="gpu"))
    assert "runtimeClassName" not in daemonset["spec"]["template"]["spec"]
    nvidia = InstallOptions(agent_runtime_class="nvidia", webhook=False)
    [daemonset] = by_kind(render_objects(nvidia), "DaemonSet")
    assert daemonset["spec"]["template"]["spec"]["runtimeClassName"] == "nvidia"
    kubernetes_validate.validate(daemonset, K8S_VERSION, strict=True)
    with pytest.raises(RenderError, match='--agent-runtime-class is "NVIDIA", expected the name'):
        render_objects(InstallOptions(agent_runtime_class="NVIDIA"))


def test_each_render_makes_a_new_certificate() -> None:
    first, second = (generate_tls(["svc"]) for _ in range(2))
    assert first.ca_pem != second.ca_pem and first.key_pem != second.key_pem


def test_cli_renders_crds_only_and_refuses_bad_flags() -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["manifests", "--crds-only"])
    assert result.exit_code == 0, result.output
    docs = list(yaml.safe_load_all(result.output))
    assert [d["kind"] for d in docs] == ["CustomResourceDefinition"] * 4
    result = runner.invoke(main, ["manifests", "--no-webhook", "--namespace", "Bad_NS"])
    assert result.exit_code == 1
    assert '--namespace is "Bad_NS"' in result.output


# ---------------------------------------------------------------------------- structural CRDs

JUNCTORS = ("anyOf", "allOf", "oneOf", "not")
INT_OR_STRING = [{"type": "integer"}, {"type": "string"}]


def structural_problems(schema: Obj, path: str = "", nested: bool = False) -> list[str]:
    """The structural-schema rules of apiextensions.k8s.io/v1, as far as kgpu's CRDs use them:
    every field typed (or int-or-string), no properties beside additionalProperties, and
    inside anyOf/allOf/oneOf/not no type, default, description, additionalProperties or
    nullable, save the exact int-or-string anyOf."""
    problems = []
    int_or_string = schema.get("x-kubernetes-int-or-string", False)
    if nested:
        problems += [
            f"{path}: {k} inside a junctor"
            for k in ("type", "default", "description", "additionalProperties", "nullable")
            if k in schema
        ]
    elif "type" not in schema and not int_or_string:
        problems.append(f"{path or '<root>'}: no type")
    if int_or_string and "type" in schema:
        problems.append(f"{path}: type beside x-kubernetes-int-or-string")
    if "properties" in schema and "additionalProperties" in schema:
        problems.append(f"{path}: properties and additionalProperties")
    for junctor in JUNCTORS:
        subs = schema.get(junctor, [])
        subs = [subs] if isinstance(subs, dict) else subs
        if int_or_string and junctor == "anyOf" and subs == INT_OR_STRING:
            continue
        for i, sub in enumerate(subs):
            problems += structural_problems(sub, f"{path}.{junctor}[{i}]", nested=True)
    for name, sub in schema.get("properties", {}).items():
        problems += structural_problems(sub, f"{path}.{name}", nested)
    if isinstance(schema.get("additionalProperties"), dict):
        problems += structural_problems(schema["additionalProperties"], f"{path}.*", nested)
    if "items" in schema:
        items = schema["items"]
        problems += structural_problems(items, f"{path}[]", nested)
        for key in schema.get("x-kubernetes-list-map-keys", []):
            if key not in items.get("required", []):
                problems.append(f"{path}: list-map key {key} is not required")
    return problems


@pytest.mark.parametrize("kind", ["Queue", "PodGroup", "Device", "Workspace"])
def test_crd_schemas_are_structural(kind: str) -> None:
    schema = schema_of(kind)
    assert structural_problems(schema) == []
    assert schema["properties"]["metadata"] == {"type": "object"}  # only name may be restricted


def test_the_structural_checker_finds_what_the_api_server_refuses() -> None:
    bad = {
        "type": "object",
        "properties": {
            "a": {"description": "untyped"},
            "b": {"type": "object", "anyOf": [{"type": "string"}]},
        },
    }
    assert structural_problems(bad) == [".a: no type", ".b.anyOf[0]: type inside a junctor"]


# ---------------------------------------------------------------------------- custom resources


def queue() -> Obj:
    return {
        "apiVersion": "kgpu.io/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": "team-a", "annotations": {"volcano.sh/card.quota": '{"A100": 8}'}},
        "spec": {
            "parent": "research",
            "priority": 100,
            "overQuotaWeight": 2.5,
            "deserved": {"cpu": "100", "memory": "1Ti", "nvidia.com/gpu": 8},
            "limit": {"nvidia.com/gpu": "16"},
            "cards": {"NVIDIA-A100-SXM4-80GB": {"deserved": 8, "limit": 16}},
            "cardUnlimitedCpuMemory": True,
        },
        "status": {
            "allocated": {"nvidia.com/gpu": 4},
            "fairShare": {"nvidia.com/gpu": "6500m"},
            "cards": {
                "NVIDIA-A100-SXM4-80GB": {
                    "deserved": 8,
                    "allocated": 4,
                    "request": 10,
                    "capacity": 64,
                }
            },
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "Reconciled",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ],
        },
    }


def podgroup() -> Obj:
    return {
        "apiVersion": "kgpu.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": "research"},
        "spec": {"minMember": 4, "maxMember": 8, "queue": "team-a", "priorityClassName": "high"},
        "status": {"phase": "Running", "running": 4},
    }


def device() -> Obj:
    return {
        "apiVersion": "kgpu.io/v1alpha1",
        "kind": "Device",
        "metadata": {"name": "gpu-a100-0"},
        "spec": {
            "devices": [
                {
                    "uuid": "GPU-4b6d2c9e-0000",
                    "minor": 0,
                    "type": "gpu",
                    "health": True,
                    "resources": {
                        "kubernetes.io/gpu-core": "100",
                        "kubernetes.io/gpu-memory": "80Gi",
                    },
                    "topology": {
                        "socketID": 0,
                        "nodeID": 0,
                        "busID": "0000:3b:00.0",
                        "nvlinkPeers": [1, 2],
                    },
                },
                {"uuid": "mlx5_0", "minor": 0, "type": "rdma", "health": True},
            ]
        },
    }


def workspace() -> Obj:
    return {
        "apiVersion": "kgpu.io/v1alpha1",
        "kind": "Workspace",
        "metadata": {"name": "falcon", "namespace": "serving"},
        "resource": {
            "instanceType": "Standard_NC96ads_A100_v4",
            "labelSelector": {
                "matchLabels": {"apps": "falcon"},
                "matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}],
            },
        },
        "inference": {"replicas": 2, "preset": {"name": "falcon-7b"}},
    }


SAMPLES: dict[str, Callable[[], Obj]] = {
    "Queue": queue,
    "PodGroup": podgroup,
    "Device": device,
    "Workspace": workspace,
}


@pytest.mark.parametrize("kind", SAMPLES)
def test_sample_resources_are_valid(kind: str) -> None:
    assert errors(kind, SAMPLES[kind]()) == []


def test_workspace_may_give_gpu_memory_instead_of_a_preset() -> None:
    ws = workspace()
    ws["inference"] = {"replicas": 1, "gpuMemoryPerReplica": "80Gi"}
    del ws["resource"]["instanceType"]  # optional: use the nodes there are
    assert errors("Workspace", ws) == []


def _set(obj: Obj, path: tuple[str | int, ...], value: Any) -> None:
    """Set (or with value ``...``, delete) the field at ``path``."""
    *parents, last = path
    node: Any = obj
    for key in parents:
        node = node[key]
    if value is ...:
        del node[last]
    else:
        node[last] = value


A100 = "NVIDIA-A100-SXM4-80GB"

# One malformed field per case: (kind, path, value or ... to delete, field named, message)
# fmt: off
MALFORMED = [
    ("Queue", ("spec", "overQuotaWeight"), -1, "spec.overQuotaWeight", "less than the minimum of 0"),
    ("Queue", ("spec", "overQuotaWeight"), "heavy", "spec.overQuotaWeight", "is not of type 'number'"),
    ("Queue", ("spec", "deserved", "cpu"), "lots", "spec.deserved.cpu", "'lots' does not match"),
    ("Queue", ("spec", "deserved", "memory"), -5, "spec.deserved.memory", "less than the minimum of 0"),
    ("Queue", ("spec", "limit", "nvidia.com/gpu"), "-1", "spec.limit.nvidia.com/gpu", "does not match"),
    ("Queue", ("spec", "priority"), "high", "spec.priority", "is not of type 'integer'"),
    ("Queue", ("spec", "parent"), "Team_A", "spec.parent", "'Team_A' does not match"),
    ("Queue", ("spec", "cards", A100, "deserved"), "8", f"spec.cards.{A100}.deserved", "is not of type 'integer'"),
    ("Queue", ("spec", "cards", A100, "limit"), -1, f"spec.cards.{A100}.limit", "less than the minimum of 0"),
    ("Queue", ("spec",), ..., "", "'spec' is a required property"),
    ("Queue", ("status", "conditions", 0, "status"), "Yes", "status.conditions.0.status", "is not one of ['True', 'False', 'Unknown']"),
    ("PodGroup", ("spec", "minMember"), 0, "spec.minMember", "less than the minimum of 1"),
    ("PodGroup", ("spec", "minMember"), ..., "spec", "'minMember' is a required property"),
    ("PodGroup", ("spec", "maxMember"), "8", "spec.maxMember", "is not of type 'integer'"),
    ("PodGroup", ("status", "phase"), "Sleeping", "status.phase", "'Sleeping' is not one of"),
    ("Device", ("spec", "devices", 0, "type"), "tpu", "spec.devices.0.type", "is not one of ['gpu', 'rdma', 'fpga']"),
    ("Device", ("spec", "devices", 0, "minor"), -1, "spec.devices.0.minor", "less than the minimum of 0"),
    ("Device", ("spec", "devices", 0, "health"), "yes", "spec.devices.0.health", "is not of type 'boolean'"),
    ("Device", ("spec", "devices", 0, "resources", "kubernetes.io/gpu-core"), "all", "spec.devices.0.resources.kubernetes.io/gpu-core", "'all' does not match"),
    ("Device", ("spec", "devices", 1, "minor"), ..., "spec.devices.1", "'minor' is a required property"),
    ("Device", ("spec", "devices", 0, "topology", "nvlinkPeers"), [1, "x"], "spec.devices.0.topology.nvlinkPeers.1", "is not of type 'integer'"),
    ("Workspace", ("resource", "labelSelector"), ..., "resource", "'labelSelector' is a required property"),
    ("Workspace", ("resource", "instanceType"), 5, "resource.instanceType", "is not of type 'string'"),
    ("Workspace", ("resource", "labelSelector", "matchExpressions", 0, "operator"), "Like", "resource.labelSelector.matchExpressions.0.operator", "'Like' is not one of"),
    ("Workspace", ("inference", "replicas"), 0, "inference.replicas", "less than the minimum of 1"),
    ("Workspace", ("inference", "preset"), ..., "inference", "is not valid under any of the given schemas"),
    ("Workspace", ("inference", "preset", "name"), "", "inference.preset.name", "should be non-empty"),
    ("Workspace", ("inference",), ..., "", "'inference' is a required property"),
]
# fmt: on


@pytest.mark.parametrize(
    ("kind", "where", "value", "field", "message"),
    MALFORMED,
    ids=[f"{m[0]}:{m[3] or m[1][-1]}={m[2]!r}" for m in MALFORMED],
)
def test_malformed_resources_fail_naming_the_field(
    kind: str, where: tuple[str | int, ...], value: Any, field: str, message: str
) -> None:
    obj = SAMPLES[kind]()
    _set(obj, where, value)
    found = errors(kind, obj)
    assert len(found) == 1, found
    assert found[0][0] == field
    assert message in found[0][1]
