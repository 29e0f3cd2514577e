"""Settings of a training run and what a run reports."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from heteroplan.errors import InputError
from heteroplan.inputs import (
    MAX_WAIT_S,
    check_wait,
    enum_choice,
    finite_number,
    real_value,
    strict_int,
)
from heteroplan.names import a_path
from heteroplan.run_options import (
    CommBackend,
    Device,
    FaultKind,
    Optimizer,
    PipelineEngine,
    PipelineSchedule,
)

ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"

__all__ = ["StepEmulation", "RunConfig", "StepMetrics", "implementation_kwargs", "make_optimizer", "optimizer_class"]


@dataclass(frozen=True)
class StepEmulation:
    """Emulated GPUs for runs on CPUs: a rank's compute (its forwards and backwards) in one iteration
    lasts ``overhead_s + samples * seconds_per_sample[gpu_type]`` seconds (Pollux's ``a + b m``),
    padded by sleeping after the real work, so step times follow the GPU types of the plan whatever
    else the machine runs. A GPU type missing from the table is not padded.

    Attributes:
        seconds_per_sample: GPU type -> seconds of compute per sample (s).
        overhead_s: seconds of compute per iteration whatever the batch (s).
    """

    seconds_per_sample: Mapping[str, float]
    overhead_s: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.seconds_per_sample, Mapping) or not self.seconds_per_sample:
            raise InputError("emulate.seconds_per_sample", self.seconds_per_sample, "must map GPU types to seconds")
        # a rank sleeps them (time.sleep overflows near 9e9 s); kept as floats, never numpy's
        object.__setattr__(self, "seconds_per_sample", {
            gpu_type: finite_number(f"emulate.seconds_per_sample[{gpu_type}]", sec, low=0.0, high=MAX_WAIT_S)
            for gpu_type, sec in self.seconds_per_sample.items()})
        object.__setattr__(self, "overhead_s", finite_number("emulate.overhead_s", self.overhead_s, low=0.0,
                                                             high=MAX_WAIT_S))

    def compute_seconds(self, gpu_type: str, samples: int) -> float:
        """Seconds of compute of ``samples`` samples on one GPU of ``gpu_type`` (0: not emulated)."""
        if gpu_type not in self.seconds_per_sample:
            return 0.0
        return self.overhead_s + samples * self.seconds_per_sample[gpu_type]


@dataclass(frozen=True)
class RunConfig:
    """How to train.

    Attributes:
        steps: train until this many iterations are done in total (a resumed run continues
            from its checkpoint's iteration).
        optimizer: ``"sgd"`` or ``"adam"``; ``lr`` its learning rate, ``momentum`` SGD's momentum.
        schedule: pipeline schedule, ``"1f1b"`` or ``"gpipe"``.
        pipeline: which engine runs the pipelines: ``"auto"`` (``torch.distributed.pipelining``
            where it can express the plan, i.e. the same TP degree on every stage; heteroplan's
            own loop otherwise, and with ``cuda_graphs``), ``"torch"`` or ``"heteroplan"`` (see
            :func:`heteroplan.runtime.schedule.choose_pipeline`).
        checkpoint_dir: where checkpoints go (``None``: none are written).
        checkpoint_every: iterations between checkpoints (0: only when the run stops).
        keep_checkpoints: newest complete checkpoints kept.
        resume: continue from the newest complete checkpoint in ``checkpoint_dir`` if any.
        timeout_s: seconds any rank may wait on a peer (collectives, point-to-point) before
            the run fails; also how long the launcher waits for progress.
        max_seconds: stop (with a checkpoint) after this much wall time; ``None``: no limit.
        device: ``"cpu"`` or ``"cuda"``; ``backend`` defaults to gloo on CPU and NCCL on CUDA.
        threads_per_rank: torch intra-op threads per process (CPU).
        startup_timeout_s: seconds allowed for start-up (spawn, ``import torch``, rendezvous)
            before the first iteration must finish.
        memory_step: the iteration (0-based) whose peak memory every rank measures and reports in
            :attr:`StepMetrics.peak_allocated_bytes` and ``peak_reserved_bytes`` (one entry per
            rank): on CUDA the allocator's peaks (``max_memory_allocated`` /
            ``max_memory_reserved``) over that iteration, on CPU the bytes alive at the start
            (parameters, buffers, optimizer state) plus the peak of torch's profiler's allocation
            record over the iteration (reserved = allocated: the CPU allocator keeps no cache).
            Its iteration time includes the measurement's overhead. ``None``: no measurement.
        cuda_expandable_segments: on CUDA, each rank's caching allocator maps its memory as
            expandable segments (``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``, PyTorch's
            remedy for fragmentation) unless that variable is already set. On an H100 it cut the
            bytes reserved above the peak allocated from 0.1-6.5% to 0.1-4.9% over the closed
            loop's bf16 plans (docs/runtime.md). ``False``: torch's default allocator.
        cuda_graphs: on CUDA, capture each microbatch's forward, loss and backward once as a CUDA
            graph and replay it (:class:`heteroplan.runtime.graphs.GraphedMicrobatch`): the host
            launches a microbatch in one call instead of thousands of kernels, which is what sets
            the pace of bf16 microbatches of a mid-sized model (55-68 ms a microbatch at every
            size 1-8 on an H100 for a 320M GPT; graphed, its bf16 iterations ran 2.2-5.0x faster).
            One-stage plans with TP 1 and no sharded optimizer state; recomputing stages without
            dropout (:func:`heteroplan.runtime.graphs.check_cuda_graphs`, ``check_graphed_layers``).
            Profile with ``profile_layers(cuda_graphs=True)`` to predict such runs: on an H100
            within +0..+2% in time and -2.3..+2.4% in reserved memory (docs/runtime.md).
        compile: compile every plan layer of each stage with ``torch.compile`` (inductor, static
            shapes; :mod:`heteroplan.runtime.compiled`): the pipeline, the layer boundaries and
            the parameters' names stay as they are. Alone or with ``cuda_graphs`` (the layers are
            compiled in the graph's warm-up, before its capture); not with tensor-parallel stages
            (refused). Profile with ``profile_layers(compile=True)`` to predict such runs.
        peak_tflops: declared dense peak TFLOP/s of one process's device in the plan's precision,
            what :attr:`RunResult.utilization`'s MFU is measured against; ``None``: on CUDA the
            GPU type table's peak (:class:`heteroplan.cluster.GPUType`), on CPU none (MFU n/a).
        fault: fault injection for tests: ``("exit" | "hang", rank, iteration)`` makes that
            rank die (exit code 17) or hang at the start of that iteration.
        emulate: emulated GPUs (:class:`StepEmulation`): each rank's forwards and backwards of an
            iteration last at least the emulated seconds of its GPU type and samples, whatever the
            CPU's load; the synchronisation, checkpoints and restarts stay real. ``None``: none.

    The named choices (``optimizer``, ``schedule``, ``pipeline``, ``device``, ``backend``,
    ``fault``'s kind) are enums of :mod:`heteroplan.run_options`; their values are accepted and
    turned into the members. Counts take numpy integers and whole floats (``np.int64(10)``, ``10.0``),
    numbers numpy's floats; each flag is ``True`` or ``False`` only (``"no"`` is refused, not taken as
    true); ``fault``'s rank and iteration are whole numbers >= 0. Anything else is an
    :class:`~heteroplan.errors.InputError` naming ``config.<field>``.
    """

    steps: int = 10
    optimizer: Optimizer = Optimizer.SGD
    lr: float = 0.05
    momentum: float = 0.0
    schedule: PipelineSchedule = PipelineSchedule.ONE_F_ONE_B
    pipeline: PipelineEngine = PipelineEngine.AUTO
    checkpoint_dir: str | None = None
    checkpoint_every: int = 0
    keep_checkpoints: int = 2
    resume: bool = True
    timeout_s: float = 60.0
    max_seconds: float | None = None
    device: Device = Device.CPU
    backend: CommBackend | None = None
    threads_per_rank: int = 1
    startup_timeout_s: float = 120.0
    fault: tuple[FaultKind, int, int] | None = None
    memory_step: int | None = None
    cuda_expandable_segments: bool = True
    cuda_graphs: bool = False
    compile: bool = False
    peak_tflops: float | None = None
    emulate: StepEmulation | None = None

    def __post_init__(self) -> None:
        if self.emulate is not None and not isinstance(self.emulate, StepEmulation):
            raise InputError("config.emulate", type(self.emulate).__name__, "must be a StepEmulation or None")
        if self.checkpoint_dir is not None:  # 5 was a TypeError from pathlib in the launcher
            a_path("config.checkpoint_dir", self.checkpoint_dir)
            object.__setattr__(self, "checkpoint_dir", os.fspath(self.checkpoint_dir))
        for name, low in (("steps", 1), ("threads_per_rank", 1), ("checkpoint_every", 0), ("keep_checkpoints", 0)):
            object.__setattr__(self, name, strict_int(f"config.{name}", getattr(self, name), low))  # np.int64 too
        for name in ("resume", "cuda_expandable_segments", "cuda_graphs", "compile"):  # "no" is no False
            if not isinstance(getattr(self, name), bool):
                raise InputError(f"config.{name}", getattr(self, name), "must be True or False")
        for name, enum in (("optimizer", Optimizer), ("schedule", PipelineSchedule), ("pipeline", PipelineEngine),
                           ("device", Device)):
            object.__setattr__(self, name, enum_choice(enum, f"config.{name}", getattr(self, name)))
        if self.backend is not None:
            object.__setattr__(self, "backend", enum_choice(CommBackend, "config.backend", self.backend))
        if not finite_number("config.lr", self.lr) > 0:  # True, inf and NaN refused too
            raise InputError("config.lr", self.lr, "must be a number > 0")
        object.__setattr__(self, "lr", float(self.lr))
        if not 0 <= real_value(self.momentum) < 1:
            raise InputError("config.momentum", self.momentum, "must be in [0, 1)")
        check_wait("config.timeout_s", self.timeout_s)
        check_wait("config.startup_timeout_s", self.startup_timeout_s)
        if self.fault is not None:
            if not isinstance(self.fault, tuple | list) or len(self.fault) != 3 or self.fault[0] not in tuple(FaultKind):
                raise InputError("config.fault", self.fault, "must be ('exit' | 'hang', rank, iteration)")
            # a rank or iteration that is no whole number >= 0 (``"x"``, ``-1``, ``1.5``) never came: no fault
            object.__setattr__(self, "fault", (FaultKind(self.fault[0]), strict_int("config.fault[1]", self.fault[1], 0),
                                               strict_int("config.fault[2]", self.fault[2], 0)))
        if self.max_seconds is not None:  # True was 1 s; 10**400 an OverflowError in every rank; inf: no limit
            if not real_value(self.max_seconds) > 0:
                raise InputError("config.max_seconds", self.max_seconds, "must be a number of seconds > 0 or None")
        if self.memory_step is not None:
            object.__setattr__(self, "memory_step", strict_int("config.memory_step", self.memory_step, 0))
        if self.cuda_graphs and self.device is not Device.CUDA:
            raise InputError("config.cuda_graphs", self.cuda_graphs, "CUDA graphs need device='cuda'")
        if self.peak_tflops is not None:
            if not (0 < real_value(self.peak_tflops) < math.inf):
                raise InputError("config.peak_tflops", self.peak_tflops, "must be a number of TFLOP/s > 0 or None")
        if self.backend is CommBackend.NCCL and self.device is not Device.CUDA:
            raise InputError("config.backend", self.backend, "NCCL needs device='cuda'")
        for name in ("momentum", "max_seconds", "peak_tflops"):  # np.float32 too, handed on as a float (lr: above)
            if getattr(self, name) is not None and type(getattr(self, name)) not in (int, float):
                object.__setattr__(self, name, float(getattr(self, name)))

    @property
    def resolved_backend(self) -> CommBackend:
        return self.backend or (CommBackend.NCCL if self.device is Device.CUDA else CommBackend.GLOO)

    def allocator_environment(self, environ: Mapping[str, str]) -> dict[str, str]:
        """Environment variables a rank sets before CUDA starts, given its ``environ``: the
        expandable-segments allocator on CUDA unless ``PYTORCH_CUDA_ALLOC_CONF`` is set already."""
        if self.device != "cuda" or not self.cuda_expandable_segments or ALLOC_CONF in environ:
            return {}
        return {ALLOC_CONF: "expandable_segments:True"}


@dataclass(frozen=True)
class StepMetrics:
    """One finished iteration as rank 0 saw it.

    Attributes:
        step: iterations done after this one (1-based).
        loss: mean training loss over the global batch.
        iteration_time: seconds from the start of the iteration to the end of the update.
        sync_time: seconds rank 0 spent in the gradient all-reduce.
        grad_sqr, grad_var: the gradient's squared norm ``|G|^2`` and per-sample variance
            ``tr(Sigma)`` estimated from the replicas' gradients (pure data parallelism only,
            else ``None``; Pollux's gradient noise statistics).
        peak_allocated_bytes, peak_reserved_bytes: per rank, the peak bytes allocated and
            reserved over this iteration (the ``RunConfig.memory_step`` iteration only, else ``()``).
    """

    step: int
    loss: float
    iteration_time: float
    sync_time: float
    grad_sqr: float | None = None
    grad_var: float | None = None
    peak_allocated_bytes: tuple[int, ...] = ()
    peak_reserved_bytes: tuple[int, ...] = ()


def optimizer_class(config: RunConfig) -> tuple[type, dict[str, Any]]:
    """The torch optimizer class ``config`` asks for and its keyword arguments."""
    import torch

    if config.optimizer is Optimizer.ADAM:
        return torch.optim.Adam, {"lr": config.lr}
    return torch.optim.SGD, {"lr": config.lr, "momentum": config.momentum}


def implementation_kwargs(params: list) -> dict[str, Any]:
    """How the runtime's optimizers step ``params``: ``fused`` (one kernel over all tensors, updating
    in place: no transient buffers, where foreach Adam holds a fp32 copy of every parameter, 4P
    bytes, at the step's peak) on every device; tensor-parallel (DTensor) parameters keep torch's
    default. The profiler measures the step with the same choice (``update_working_bytes``)."""
    return {} if any(hasattr(p, "to_local") for p in params) else {"fused": True}


def make_optimizer(params: list, config: RunConfig):
    """The torch optimizer ``config`` asks for, over ``params``, stepped as
    :func:`implementation_kwargs` says."""
    cls, kwargs = optimizer_class(config)
    return cls(params, **kwargs, **implementation_kwargs(params))
