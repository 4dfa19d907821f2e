"""A device plugin that advertises GPUs as NVIDIA's does under MPS sharing, for the real node
(tests/test_e2e_node_mps.py): ``nvidia.com/gpu.shared``, each of ``--gpus`` GPUs once per
replica, ids ``<GPU uuid>::<k>``; ``Allocate`` gives the container the GPUs of its replicas
by UUID (``NVIDIA_VISIBLE_DEVICES``) and refuses more than one replica, as NVIDIA's plugin
does under MPS (``failRequestsGreaterThanOne``). kube-node's fake plugin names its devices
with one prefix, so it cannot give replicas of several GPUs.

Run with kube-node's Python (grpcio) and the stubs its build generated; it imports nothing of
kgpu's, so it runs beside the node as NVIDIA's plugin would:

  mps_device_plugin.py --gen DIR --registry-dir KUBELET_ROOT/plugins_registry --gpus 2 --replicas 4
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent import futures
from typing import Any

RESOURCE = "nvidia.com/gpu.shared"


def gpu_uuid(index: int) -> str:
    return f"GPU-mps-{index}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gen", required=True)
    ap.add_argument("--registry-dir", required=True)
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--replicas", type=int, default=4)
    a = ap.parse_args()
    sys.path.insert(0, a.gen)
    import grpc
    from deviceplugin.v1beta1 import api_pb2 as dp  # type: ignore[import-not-found]
    from deviceplugin.v1beta1 import api_pb2_grpc as dp_grpc
    from pluginregistration.v1 import api_pb2 as reg  # type: ignore[import-not-found]
    from pluginregistration.v1 import api_pb2_grpc as reg_grpc

    ids = [f"{gpu_uuid(g)}::{k}" for g in range(a.gpus) for k in range(a.replicas)]
    sock = os.path.join(a.registry_dir, RESOURCE.replace("/", "_") + ".sock")

    class DevicePlugin(dp_grpc.DevicePluginServicer):  # type: ignore[misc]
        def GetDevicePluginOptions(self, req: Any, ctx: Any) -> Any:
            return dp.DevicePluginOptions()

        def ListAndWatch(self, req: Any, ctx: Any) -> Any:
            yield dp.ListAndWatchResponse(devices=[dp.Device(ID=i, health="Healthy") for i in ids])
            while ctx.is_active():
                time.sleep(1)

        def GetPreferredAllocation(self, req: Any, ctx: Any) -> Any:
            return dp.PreferredAllocationResponse()

        def Allocate(self, req: Any, ctx: Any) -> Any:
            out = dp.AllocateResponse()
            for creq in req.container_requests:
                got = list(creq.devicesIDs)
                print(json.dumps({"allocate": got}), flush=True)
                if len(got) > 1:
                    ctx.abort(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"request for '{RESOURCE}: {len(got)}' too large: "
                        "maximum request size for shared resources is 1",
                    )
                uuids = sorted({i.split("::", 1)[0] for i in got})
                out.container_responses.add(envs={"NVIDIA_VISIBLE_DEVICES": ",".join(uuids)})
            return out

        def PreStartContainer(self, req: Any, ctx: Any) -> Any:
            return dp.PreStartContainerResponse()

    class Registration(reg_grpc.RegistrationServicer):  # type: ignore[misc]
        def GetInfo(self, req: Any, ctx: Any) -> Any:
            return reg.PluginInfo(
                type="DevicePlugin", name=RESOURCE, endpoint=sock, supported_versions=["v1beta1"]
            )

        def NotifyRegistrationStatus(self, req: Any, ctx: Any) -> Any:
            print(json.dumps({"registered": req.plugin_registered, "error": req.error}), flush=True)
            return reg.RegistrationStatusResponse()

    os.makedirs(a.registry_dir, exist_ok=True)
    if os.path.exists(sock):
        os.unlink(sock)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    dp_grpc.add_DevicePluginServicer_to_server(DevicePlugin(), server)
    reg_grpc.add_RegistrationServicer_to_server(Registration(), server)
    server.add_insecure_port("unix:" + sock)
    server.start()
    print(json.dumps({"serving": sock, "devices": ids}), flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
