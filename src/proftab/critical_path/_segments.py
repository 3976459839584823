"""The vocabulary of the dependency graph: segment kinds, what bounds them, edge classes, the calls that wait.

Every weight of a `Graph` is a segment of some kind (`KINDS`) bound by something (`BOUND_BY`),
both stored as codes (positions in those tuples). Cross edges come in four classes (launch,
sync, cross-stream, thread join); the host calls that make sync, wait and thread-join edges are
matched by the patterns below.
"""

from __future__ import annotations

from proftab.calls import CUDA_HIP, STREAM_WAIT, SYNC

__all__ = ["BACKWARD_CALLS", "BOUND_BY", "BOUND_CODE", "EDGE_LAUNCH", "EDGE_SYNC", "EDGE_THREAD", "EDGE_XSTREAM",
           "KINDS", "KIND_CODE", "N_EDGE_CLASSES", "QUEUE_BLOCK_FACTOR", "SYNC_CALLS", "WAIT_CALLS"]

#: segment kinds (codes are positions)
KINDS = ("cpu_op", "runtime", "sync_wait", "idle", "kernel", "memcpy", "memset", "stream_gap", "launch_delay")
#: what a segment's time is bound by (codes are positions)
BOUND_BY = ("cpu_bound", "gpu_compute_bound", "gpu_communication_bound", "gpu_memcpy_bound", "launch_overhead",
            "sync")
#: host calls that block until device work finishes (`proftab.calls.SYNC`, CUDA's and HIP's)
SYNC_CALLS = SYNC.pattern(CUDA_HIP)
#: host calls that make a stream wait on an event recorded on another stream (`proftab.calls.STREAM_WAIT`)
WAIT_CALLS = STREAM_WAIT.pattern(CUDA_HIP)
KIND_CODE = {k: i for i, k in enumerate(KINDS)}
BOUND_CODE = {b: i for i, b in enumerate(BOUND_BY)}
#: host ops that wait while autograd's device threads run the backward (the Python frame of
#: ``torch.autograd.backward`` / ``Tensor.backward``: ``<built-in method run_backward of ...>``)
BACKWARD_CALLS = r"\brun_backward\b"
#: cross-edge classes: launch -> activity, work -> the host call waiting on it, work -> work on another
#: stream, a thread's call -> the worker thread's ops (fork / join)
EDGE_LAUNCH, EDGE_SYNC, EDGE_XSTREAM, EDGE_THREAD = 0, 1, 2, 3
N_EDGE_CLASSES = 4
#: a launch call this many times longer than the median of its name waited for a launch-queue slot
QUEUE_BLOCK_FACTOR = 10
