"""The named choices of a training run and of the runtime's measurements, as enums.

Torch-free, so the CLI offers them (``choices=``) without the ``[runtime]`` extra. Every
function and :class:`~heteroplan.runtime.RunConfig` field typed with one accepts the member
or its value (a string) and turns it into the member; another string is an
:class:`~heteroplan.errors.InputError` naming the field and the choices.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Optimizer", "PipelineSchedule", "PipelineEngine", "Device", "CommBackend", "FaultKind", "LayerTiming"]


class Optimizer(StrEnum):
    """The optimizer a run trains with (and a profile times)."""

    SGD = "sgd"  # SGD with momentum
    ADAM = "adam"  # Adam


class PipelineSchedule(StrEnum):
    """The order of a stage's forward and backward microbatches."""

    ONE_F_ONE_B = "1f1b"  # one forward, one backward after the warm-up
    GPIPE = "gpipe"  # all forwards, then all backwards


class PipelineEngine(StrEnum):
    """What runs a plan's pipelines (``RunConfig.pipeline``; ``AUTO`` is a request, never a choice made)."""

    AUTO = "auto"  # torch where it can express the plan, else heteroplan
    TORCH = "torch"  # torch.distributed.pipelining
    HETEROPLAN = "heteroplan"  # heteroplan's own loop


class Device(StrEnum):
    """Where the ranks compute."""

    CPU = "cpu"  # processes on the host's cores
    CUDA = "cuda"  # one GPU per rank


class CommBackend(StrEnum):
    """The torch.distributed backend."""

    GLOO = "gloo"  # CPU tensors (the only one on CPU)
    NCCL = "nccl"  # CUDA tensors, GPU to GPU


class FaultKind(StrEnum):
    """An injected fault (tests of the failure handling): the rank exits, or hangs."""

    EXIT = "exit"
    HANG = "hang"


class LayerTiming(StrEnum):
    """How the profiler times layers: each alone, or as increases of timed prefixes."""

    LAYER = "layer"
    PREFIX = "prefix"

