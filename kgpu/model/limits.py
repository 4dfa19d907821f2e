"""Bounds on what kgpu reads from objects: what a real cluster can hold, and no more.

Every object kgpu reads is untrusted (any tenant can create a pod, any node's kubelet or a
hand edit can write a node's labels). A value past these bounds is not a cluster that
exists but a mistake or an attack: the object is refused alone, with a message naming the
field, the value and the bound, and the rest of the cluster is scheduled. Inside them, the
core's arithmetic (numpy int64 over milli-CPU, MiB and milli-GPU, summed over every node)
cannot overflow, and nothing kgpu builds per GPU or per device grows past a few hundred
entries per node, whatever a node claims. docs/SECURITY.md lists them.

The per-node bounds are generous: they admit virtual nodes (Virtual Kubelet, Liqo) that
stand for a whole remote cluster, and time-sliced GPUs advertised many times over.
"""

from __future__ import annotations

import json
from typing import Final

# -------------------------------------------------------------------------- text

# Kubernetes' own limit on all of one object's annotations together (256 KiB): a single
# annotation, or a label value, longer than that never came from the API server.
MAX_ANNOTATION_CHARS: Final = 256 * 1024
# JSON in annotations (kgpu.io/device-allocation, volcano.sh/card.quota and .request,
# kgpu.io/gpu-topology, a trigger pod's request): what kgpu writes nests 4 deep.
MAX_ANNOTATION_DEPTH: Final = 32
# Whole objects (an AdmissionReview's body, a manifest document): Kubernetes' objects nest
# about 15 deep, their managedFields included. Python's JSON and YAML readers recurse, and
# a few hundred levels would end the thread with RecursionError; these stay far below.
MAX_OBJECT_DEPTH: Final = 100
# What a message shows of a value: enough to recognise it, never a megabyte of it.
MAX_SHOWN_CHARS: Final = 200

# -------------------------------------------------------------------------- one node

MAX_NODE_CPU: Final = 2**20  # cores (1,048,576): a virtual node standing for a cluster
MAX_NODE_MEMORY_MIB: Final = 2**30  # MiB (1 PiB)
MAX_NODE_PODS: Final = 2**20
# GPUs of one node, as the device plugin advertises them (time-slicing without the
# replicas label counts each GPU once per replica): 8 to 16 in real servers. kgpu keeps a
# row per GPU, so this bounds the memory a node's claim can make it spend.
MAX_NODE_GPUS: Final = 256
MAX_GPU_MEMORY_MIB: Final = 2**20  # MiB per GPU (1 TiB; the largest hold 288 GB today)
MAX_GPU_REPLICAS: Final = 256  # MPS or time-slicing replicas per GPU (MPS allows 48)
MAX_MIG_PROFILES: Final = 32  # distinct MIG profiles on one node (a GPU offers 5 to 8)
MAX_MIG_INSTANCES: Final = 7 * MAX_NODE_GPUS  # of one profile: at most 7 per GPU
MAX_NODE_DEVICES: Final = 256  # RDMA or FPGA devices of one node, each kind

# -------------------------------------------------------------------------- a cluster

# Kubernetes is tested to 5,000 nodes and run to about 65,000; a card count or a trigger
# pod's GPUs beyond this many of the largest nodes is no cluster's. (A Queue's quantities
# are Python integers, bounded by the quantities' own 2^63.)
MAX_NODES: Final = 2**17
MAX_CLUSTER_GPUS: Final = MAX_NODES * MAX_NODE_GPUS
MAX_CARDS: Final = MAX_CLUSTER_GPUS * MAX_GPU_REPLICAS  # cards of one name in a quota


def clip(text: str) -> str:
    """``text`` as a message shows it: cut to :data:`MAX_SHOWN_CHARS`, saying how long it was."""
    if len(text) <= MAX_SHOWN_CHARS:
        return text
    return f"{text[:MAX_SHOWN_CHARS]}… ({len(text)} characters)"


def show_json(value: object) -> str:
    """``value`` as JSON, as a message shows it: cut to :data:`MAX_SHOWN_CHARS`.

    Encoded lazily and only as far as shown, so a value that stands for a billion (YAML
    aliases nested ten wide) costs no more than a short one.
    """
    if isinstance(value, str):
        return clip(json.dumps(value, ensure_ascii=False))
    encoder = json.JSONEncoder(ensure_ascii=False, default=str)
    text = ""
    for chunk in encoder.iterencode(value):
        text += chunk
        if len(text) > MAX_SHOWN_CHARS:
            return f"{text[:MAX_SHOWN_CHARS]}…"
    return text
