"""``kgpu run --serve-webhook``: the admission webhook served by ``kgpu run`` itself, for a
scheduler that runs outside the cluster (a workstation), so that ``kgpu run --kubeconfig``
needs nothing installed but the CRDs.

At start: a fresh CA and a serving certificate for the address the API server reaches this
machine at (``--webhook-host``; by default the local address of the route to the API
server), the webhook server on ``--webhook-port`` of every IPv4 interface, then the
registration (:mod:`kgpu.kube.install.workstation`: kgpu's namespace and both webhook
configurations, pointing at ``https://HOST:PORT``). At a clean stop: the registration is
removed, then the server stops.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

from kgpu.kube.admission.node_access import subject_access
from kgpu.kube.admission.review import WorkspaceNodes
from kgpu.kube.admission.webhook_server import WebhookServer, tls_context
from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.listed import Listed
from kgpu.kube.api.resource_types import QUEUES
from kgpu.kube.install.secret_file import write_private
from kgpu.kube.install.webhook_certs import generate_tls
from kgpu.kube.install.workstation import register, unregister
from kgpu.kube.live.record_key import KeyReader, default_secret
from kgpu.kube.workspaces.node_source import ListedNodes

log = logging.getLogger(__name__)

DEFAULT_PORT: Final = 9443


def route_address(api_server_url: str) -> str:
    """The local address this machine uses toward the API server: connecting a UDP socket
    sends nothing, it only picks the route (127.0.0.1 for a loopback API server)."""
    parts = urlsplit(api_server_url)
    host = parts.hostname or "localhost"
    port = parts.port or 443
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        probe.connect((host, port))
        return str(probe.getsockname()[0])


def base_url(host: str, port: int) -> str:
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"


@dataclass
class WorkstationWebhook:
    """A :class:`kgpu.kube.live.scheduler_process.Companion` of ``kgpu run``."""

    scheduler_name: str
    port: int = DEFAULT_PORT  # 0: any free port (tests)
    host: str = ""  # "": route_address of the API server
    bind: str = ""  # "": the route's local address, the interface facing the API server
    record_key: str = ""  # NAMESPACE/NAME of kgpu run's record key; "": its default
    kaito: bool = False  # --kaito-workspaces: KAITO's Workspaces are sent to the webhook too
    server: WebhookServer | None = field(default=None, init=False)
    url: str = field(default="", init=False)
    _thread: threading.Thread | None = field(default=None, init=False)

    def start(self, client: KubeClient) -> None:
        host = self.host or route_address(client.host)
        try:
            ipaddress.ip_address(host)
            tls = generate_tls([], [host])
        except ValueError:  # a DNS name
            tls = generate_tls([host])
        with tempfile.TemporaryDirectory(prefix="kgpu-webhook-") as folder:
            cert, key = Path(folder) / "tls.crt", Path(folder) / "tls.key"
            cert.write_bytes(tls.cert_pem)
            write_private(key, tls.key_pem)
            context = tls_context(cert, key)  # read now: the files go with the folder
        self.server = WebhookServer(
            (self.bind or route_address(client.host), self.port),
            context,
            self.scheduler_name,
            # Node groups in a denial only for those who may list Nodes (docs/SECURITY.md).
            WorkspaceNodes(ListedNodes(client), may_list_nodes=subject_access(client)),
            Listed(client, QUEUES),
            # The key kgpu run made (or found) before its companions start.
            KeyReader(client, self.record_key or default_secret(self.scheduler_name)),
        )
        self._thread = self.server.start_background()
        self.url = base_url(host, self.server.port)
        log.info("admission webhook served at %s", self.url)
        try:
            register(client, self.scheduler_name, self.url, tls.ca_pem, kaito=self.kaito)
        except BaseException:
            self._close()
            raise

    def stop(self, client: KubeClient) -> None:
        try:
            unregister(client, self.scheduler_name)
        finally:
            self._close()

    def _close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
