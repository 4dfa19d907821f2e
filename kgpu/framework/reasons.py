"""Every reason a filter gives for rejecting a node, in one place so that reports,
events and metrics use the same codes and phrases."""

from kgpu.framework.status import Reason

INSUFFICIENT_CPU = Reason("InsufficientCPU", "insufficient cpu")
INSUFFICIENT_MEMORY = Reason("InsufficientMemory", "insufficient memory")
TOO_MANY_PODS = Reason("TooManyPods", "too many pods")
NO_GPU = Reason("NoGPU", "node(s) had no GPU")
GPU_MODEL_MISMATCH = Reason("GPUModelMismatch", "node(s) had a GPU model the pod does not allow")
INSUFFICIENT_GPU = Reason("InsufficientGPU", "insufficient GPU")
INSUFFICIENT_GPU_SHARE = Reason(
    "InsufficientGPUShare", "node(s) had no single GPU with enough free share"
)
# Short of GPUs only because their Device (the node agent) marks some unhealthy.
GPU_UNHEALTHY = Reason("GPUUnhealthy", "node(s) had unhealthy GPUs the pod would need")
NODE_SELECTOR_MISMATCH = Reason("NodeSelectorMismatch", "node(s) didn't match node selector")
UNTOLERATED_TAINT = Reason("UntoleratedTaint", "node(s) had untolerated taint")
NODE_UNSCHEDULABLE = Reason("NodeUnschedulable", "node(s) were unschedulable")
INVALID_REQUEST = Reason("InvalidRequest", "invalid request")
# Devices (kgpu.plugins.node.gpu_fit and gpu_request_check): GPU memory, MPS, MIG, RDMA, FPGA.
INSUFFICIENT_GPU_MEMORY = Reason(
    "InsufficientGPUMemory", "node(s) had no GPU with enough free GPU memory"
)
NO_MPS = Reason("NoMPS", "node(s) had no MPS or time-sliced GPUs split that many ways")
NO_MIG = Reason("NoMIG", "node(s) had no MIG instances of the profile")
INSUFFICIENT_MIG = Reason("InsufficientMIG", "insufficient MIG instances")
INSUFFICIENT_RDMA = Reason("InsufficientRDMA", "insufficient RDMA devices")
INSUFFICIENT_FPGA = Reason("InsufficientFPGA", "insufficient FPGA devices")
GPU_MEMORY_TOO_LARGE = Reason("GPUMemoryTooLarge", "GPU memory larger than any GPU")
