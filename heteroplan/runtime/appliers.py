"""A pipeline stage built by one applier per dimension, walked in one order.

As torchtitan's ``parallelize_llama`` composes tensor parallelism, activation checkpointing,
``torch.compile`` and data parallelism on a model one technique after the other, the worker builds
its stage (:class:`LayerRange`, the plan's layers ``[first, last)``) by walking :data:`APPLIERS`:

1. :class:`PrecisionApplier` - the plan's :class:`~heteroplan.planner.plan.Precision` (autocast
   in the forward and the loss, the TF32 switch);
2. :class:`RecomputationApplier` - the stage's activation recomputation (a checkpoint per layer);
3. :class:`TensorParallelApplier` - shards the layers over the replica's TP group (DTensor);
4. :class:`CompileApplier` - ``torch.compile`` per layer, after sharding;
5. :class:`CudaGraphsApplier` - marks the forward as captured and refuses layers a capture would
   train differently (the capture itself happens at the first microbatch);
6. :class:`OptimizerShardingApplier` - ZeRO-1: the optimizer over the final parameters.

Each applier has two parts: :meth:`DimensionApplier.check`, run before any rank starts (an
:class:`~heteroplan.errors.InputError` naming the field), and :meth:`DimensionApplier.apply`, which
transforms the :class:`StageBuild` in place. The mechanisms themselves live in
:mod:`~heteroplan.runtime.dimensions`, :mod:`~heteroplan.runtime.tensor_parallel`,
:mod:`~heteroplan.runtime.compiled` and :mod:`~heteroplan.runtime.graphs`. A new dimension is one
more applier in this list (docs/contributing.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn

from heteroplan.planner.plan import OptimizerSharding, Plan, Precision, Recomputation, Stage
from heteroplan.runtime.compiled import check_compile, compile_in_place
from heteroplan.runtime.config import RunConfig
from heteroplan.runtime.dimensions import (
    LossFn,
    check_optimizer_sharding,
    check_precision,
    compute_context,
    loss_under,
    make_stage_optimizer,
    run_layers,
    set_matmul_precision,
)
from heteroplan.runtime.graphs import check_cuda_graphs, check_graphed_layers
from heteroplan.runtime.tensor_parallel import shard_layers

__all__ = ["LayerRange", "StageContext", "StageBuild", "DimensionApplier", "PrecisionApplier",
           "RecomputationApplier", "TensorParallelApplier", "CompileApplier", "CudaGraphsApplier",
           "OptimizerShardingApplier", "APPLIERS", "check_plan", "build_stage"]


class LayerRange(nn.Module):
    """Layers ``[first, last)`` of a model, registered under their global indices (names ``"3.q.weight"``
    as in the full ``nn.Sequential``), so checkpoints are keyed by layer whatever the pipeline split.

    The forward runs under the plan's ``precision`` (autocast for bf16) and ``recompute`` policy
    (see :mod:`heteroplan.runtime.dimensions`); neither changes the parameters or their names.
    ``captured``: the forward is recorded into a CUDA graph (autocast's cast cache off). The
    appliers set these three (:class:`PrecisionApplier`, :class:`RecomputationApplier`,
    :class:`CudaGraphsApplier`).
    """

    def __init__(self, model: nn.Sequential, first: int, last: int, recompute: Recomputation = Recomputation.NONE,
                 precision: Precision = Precision.FP32, device_type: str = "cpu", captured: bool = False) -> None:
        super().__init__()
        for i in range(first, last):
            self.add_module(str(i), model[i])
        self.recompute, self.precision, self.device_type, self.captured = recompute, precision, device_type, captured

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with compute_context(self.precision, self.device_type, self.recompute, self.captured):
            return run_layers(list(self.children()), x, self.recompute, self.captured)


@dataclass(frozen=True)
class StageContext:
    """What an applier may read about the rank it builds: the plan, the run's config, the rank's
    stage index, its device, TP degree and groups (``None`` where a group would have one rank)."""

    plan: Plan
    config: RunConfig
    stage_index: int
    device: torch.device
    tp: int = 1
    tp_group: Any = None
    dp_group: Any = None

    @property
    def spec(self) -> Stage:
        """The plan's stage this rank runs."""
        return self.plan.stages[self.stage_index]


def _plain_optimizer(config: RunConfig) -> Callable[[list[nn.Parameter]], torch.optim.Optimizer]:
    return lambda params: make_stage_optimizer(params, config, OptimizerSharding.NONE, None)


@dataclass
class StageBuild:
    """The stage under construction, transformed in place by each applier in turn.

    ``layers``: the stage's module (on its device); ``loss``: ``(output, target) -> loss`` of one
    microbatch (last stage); ``make_optimizer``: the optimizer over the stage's final parameters
    (called once every applier has run, after sharding and compiling)."""

    layers: LayerRange
    loss: LossFn
    make_optimizer: Callable[[list[nn.Parameter]], torch.optim.Optimizer]


class DimensionApplier(Protocol):
    """One dimension of a plan or run as the runtime applies it to a stage."""

    def check(self, plan: Plan, config: RunConfig, model_dtype: torch.dtype | None) -> None:
        """Raise :class:`~heteroplan.errors.InputError` where this dimension cannot run ``plan``
        under ``config`` (``model_dtype``: the model's floating-point dtype, ``None`` if unknown)."""
        ...

    def apply(self, build: StageBuild, ctx: StageContext) -> None:
        """Apply the dimension to this rank's stage (a no-op where the plan does not use it)."""
        ...


class PrecisionApplier:
    """:class:`~heteroplan.planner.plan.Precision`: bf16 autocast in the forward and the loss, the
    process-wide TF32 switch (set for every plan, so that one run does not leak into the next)."""

    def check(self, plan: Plan, config: RunConfig, model_dtype: torch.dtype | None) -> None:
        check_precision(plan, model_dtype)

    def apply(self, build: StageBuild, ctx: StageContext) -> None:
        precision = ctx.plan.precision
        set_matmul_precision(precision)
        build.layers.precision, build.layers.device_type = precision, ctx.device.type
        build.loss = loss_under(precision, ctx.device.type, build.loss, captured=ctx.config.cuda_graphs)


class RecomputationApplier:
    """:class:`~heteroplan.planner.plan.Recomputation`: every layer of a ``FULL`` stage is a checkpoint."""

    def check(self, plan: Plan, config: RunConfig, model_dtype: torch.dtype | None) -> None:
        return None

    def apply(self, build: StageBuild, ctx: StageContext) -> None:
        build.layers.recompute = ctx.spec.recompute


class TensorParallelApplier:
    """A replica's ``tp > 1``: its layers sharded over its TP group (before compile and the optimizer)."""

    def check(self, plan: Plan, config: RunConfig, model_dtype: torch.dtype | None) -> None:
        return None

    def apply(self, build: StageBuild, ctx: StageContext) -> None:
        if ctx.tp > 1:
            shard_layers(build.layers, ctx.tp_group, ctx.tp, ctx.device.type)


class CompileApplier:
    """``config.compile``: every plan layer compiled in place, after sharding (names unchanged)."""

    def check(self, plan: Plan, config: RunConfig, model_dtype: torch.dtype | None) -> None:
        if config.compile:
            check_compile(plan, config.device)

    def apply(self, build: StageBuild, ctx: StageContext) -> None:
        if ctx.config.compile:
            compile_in_place(build.layers)


class CudaGraphsApplier:
    """``config.cuda_graphs``: the forward runs as captured (the worker captures and replays it)."""

    def check(self, plan: Plan, config: RunConfig, model_dtype: torch.dtype | None) -> None:
        check_cuda_graphs(plan, config)

    def apply(self, build: StageBuild, ctx: StageContext) -> None:
        if ctx.config.cuda_graphs:
            build.layers.captured = True
            check_graphed_layers(build.layers, ctx.spec.recompute)


class OptimizerShardingApplier:
    """:class:`~heteroplan.planner.plan.OptimizerSharding`: ZeRO-1's optimizer over the stage's
    data-parallel group (a plain optimizer where the stage has one replica)."""

    def check(self, plan: Plan, config: RunConfig, model_dtype: torch.dtype | None) -> None:
        check_optimizer_sharding(plan)

    def apply(self, build: StageBuild, ctx: StageContext) -> None:
        sharding, config, group = ctx.spec.optimizer_sharding, ctx.config, ctx.dp_group
        if sharding is not OptimizerSharding.NONE:
            build.make_optimizer = lambda params: make_stage_optimizer(params, config, sharding, group)


APPLIERS: tuple[DimensionApplier, ...] = (PrecisionApplier(), RecomputationApplier(), TensorParallelApplier(),
                                          CompileApplier(), CudaGraphsApplier(), OptimizerShardingApplier())
"""The runtime's appliers in the order they build a stage: a forward policy before anything wraps
the layers, sharding before compiling (compiled layers must see the DTensors), the optimizer last
(over the sharded, compiled parameters)."""


def check_plan(plan: Plan, config: RunConfig, model_dtype: torch.dtype | None = None,
               appliers: Sequence[DimensionApplier] = APPLIERS) -> None:
    """Every applier's :meth:`~DimensionApplier.check`, in order (the first problem raises)."""
    for applier in appliers:
        applier.check(plan, config, model_dtype)


def build_stage(layers: LayerRange, loss: LossFn, ctx: StageContext,
                appliers: Sequence[DimensionApplier] = APPLIERS) -> StageBuild:
    """``layers`` (on ``ctx.device``) and ``loss`` with every applier applied in order."""
    build = StageBuild(layers, loss, _plain_optimizer(ctx.config))
    for applier in appliers:
        applier.apply(build, ctx)
    return build
