"""``kgpu run --serve-webhook`` against the API double over real HTTP: it creates kgpu's
namespace, registers both webhook configurations at its own URL with its CA, serves
``/mutate`` there (checked over HTTPS with that CA), and removes them at a clean stop."""

from __future__ import annotations

import base64
import http.client
import json
import ssl
from pathlib import Path

import pytest
from click.testing import CliRunner

from kgpu.cli import main
from kgpu.cli.workstation import WorkstationWebhook, base_url, route_address
from kgpu.kube.live import scheduler_process
from kgpu.kube.live.scheduler_process import RunOptions
from kgpu.kube.objects.gpu_env import ENV_CONFIGMAP_ANNOTATION
from tests.kube_double import KubeDouble
from tests.schedulers import fast_options, schedulers
from tests.test_webhook import SCHEDULER, pod, review


def test_run_registers_and_serves_its_webhook(tmp_path: Path) -> None:
    companion = WorkstationWebhook(SCHEDULER, port=0)
    with KubeDouble() as double, schedulers() as start:
        start(fast_options(double, tmp_path, scheduler_name=SCHEDULER, companions=(companion,)))
        namespace = double.get("namespaces", "kgpu-system")
        assert namespace is not None
        assert namespace["metadata"]["labels"]["kgpu.io/admission"] == "skip"
        assert companion.server is not None
        url = f"https://127.0.0.1:{companion.server.port}"  # the double is on loopback
        assert companion.url == url
        mutating = double.get("mutatingwebhookconfigurations", "kgpu-scheduler-workstation")
        validating = double.get("validatingwebhookconfigurations", "kgpu-scheduler-workstation")
        assert mutating is not None and validating is not None
        [env] = mutating["webhooks"]
        assert env["clientConfig"]["url"] == f"{url}/mutate"
        assert env["failurePolicy"] == "Ignore"
        assert {w["clientConfig"]["url"] for w in validating["webhooks"]} == {f"{url}/validate"}
        assert {w["failurePolicy"] for w in validating["webhooks"]} == {"Ignore"}
        ca = base64.b64decode(env["clientConfig"]["caBundle"]).decode()
        # What the API server would do: call the URL, trusting only the registered CA.
        context = ssl.create_default_context(cadata=ca)
        conn = http.client.HTTPSConnection(
            "127.0.0.1", companion.server.port, context=context, timeout=5
        )
        body = json.dumps(review(pod(annotations={"gpu-fraction": "0.5"}))).encode()
        conn.request("POST", "/mutate?timeout=5s", body, {"Content-Type": "application/json"})
        response = json.loads(conn.getresponse().read())["response"]
        conn.close()
        patch = json.loads(base64.b64decode(response["patch"]))
        assert any(ENV_CONFIGMAP_ANNOTATION.replace("/", "~1") in op["path"] for op in patch)
    # Stopped cleanly: nothing left that would send pods to a webhook nobody serves.
    assert double.get("mutatingwebhookconfigurations", "kgpu-scheduler-workstation") is None
    assert double.get("validatingwebhookconfigurations", "kgpu-scheduler-workstation") is None


def test_with_kaito_workspaces_the_registration_sends_kaito_s_workspaces_too(
    tmp_path: Path,
) -> None:
    def hooks(kaito: bool) -> set[str]:
        companion = WorkstationWebhook(SCHEDULER, port=0, host="127.0.0.1", kaito=kaito)
        with KubeDouble() as double, schedulers() as start:
            start(fast_options(double, tmp_path, companions=(companion,)))
            config = double.get("validatingwebhookconfigurations", "kgpu-scheduler-workstation")
            assert config is not None
            return {w["name"] for w in config["webhooks"]}

    assert "workspaces.kaito.sh" in hooks(kaito=True)
    assert "workspaces.kaito.sh" not in hooks(kaito=False)


def test_a_restart_replaces_the_registration(tmp_path: Path) -> None:
    with KubeDouble() as double:
        for _ in range(2):
            companion = WorkstationWebhook(SCHEDULER, port=0, host="127.0.0.1")
            with schedulers() as start:
                running = start(fast_options(double, tmp_path, companions=(companion,)))
                # As if killed: its stop leaves the registration (the companion is not
                # stopped), and the next start writes over it.
                running.options = fast_options(double, tmp_path)
            config = double.get("mutatingwebhookconfigurations", "kgpu-scheduler-workstation")
            assert config is not None
            assert config["webhooks"][0]["clientConfig"]["url"] == f"{companion.url}/mutate"
            assert companion.server is not None
            companion.server.shutdown()
            companion.server.server_close()


def test_route_address_and_urls() -> None:
    assert route_address("https://127.0.0.1:6443") == "127.0.0.1"
    assert route_address("https://localhost") == "127.0.0.1"
    assert base_url("10.0.0.7", 9443) == "https://10.0.0.7:9443"
    assert base_url("fd00::7", 9443) == "https://[fd00::7]:9443"


def test_run_serves_the_webhook_outside_a_pod_only(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[RunOptions] = []

    class Captured:
        def __init__(self, options: RunOptions) -> None:
            seen.append(options)
            raise OSError("stopped here")

    monkeypatch.setattr(scheduler_process, "RunningScheduler", Captured)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    args = ["run", "--webhook-port", "9555", "--webhook-host", "10.1.2.3"]
    assert CliRunner().invoke(main, args).exit_code == 1
    [companion] = seen[-1].companions
    assert isinstance(companion, WorkstationWebhook)
    assert (companion.port, companion.host) == (9555, "10.1.2.3")
    assert CliRunner().invoke(main, ["run", "--no-serve-webhook"]).exit_code == 1
    assert seen[-1].companions == ()
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    assert CliRunner().invoke(main, ["run"]).exit_code == 1
    assert seen[-1].companions == ()
    assert CliRunner().invoke(main, ["run", "--serve-webhook"]).exit_code == 1
    assert len(seen[-1].companions) == 1
