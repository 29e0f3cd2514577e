"""Appliers of a plan's precision, activation recomputation and optimizer-state sharding.

Each uses torch's own piece and keeps nothing else:

- precision (:class:`~heteroplan.planner.plan.Precision`): ``torch.autocast`` to bfloat16 for
  ``BF16`` (weights, gradients and optimizer state stay float32: the master copy), the TF32
  matmul switch (``torch.backends.cuda.matmul.allow_tf32``, cuDNN's likewise) for ``TF32``;
- recomputation (:class:`~heteroplan.planner.plan.Recomputation`): ``torch.utils.checkpoint``
  (non-reentrant), one checkpointed region per plan layer, so a stage keeps only each layer's
  input and recomputes the layer in its backward;
- optimizer-state sharding (:class:`~heteroplan.planner.plan.OptimizerSharding`):
  ``torch.distributed.optim.ZeroRedundancyOptimizer`` over the stage's data-parallel group.

How ZeRO-1 composes with replicas that run different microbatch counts: each microbatch's
loss is scaled by ``mbs / global batch`` and the stage's data-parallel all-reduce sums the
replicas' accumulated gradients *before* the update, so every replica holds the whole gradient
of the global batch whatever its microbatch count; the sharded update then runs on it (each
replica updates the parameters it owns and broadcasts them). The partition is by parameters,
the same on every replica, independent of microbatch counts.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from heteroplan.errors import InputError
from heteroplan.planner.plan import OptimizerSharding, Plan, Precision, Recomputation
from heteroplan.runtime.config import RunConfig, implementation_kwargs, optimizer_class

__all__ = ["compute_context", "set_matmul_precision", "run_layers", "make_stage_optimizer",
           "check_precision", "check_optimizer_sharding", "local_optimizer", "state_bytes", "loss_under", "LossFn"]


def check_precision(plan: Plan, model_dtype: torch.dtype | None = None) -> None:
    """Raise :class:`InputError` for mixed or TF32 precision on a model that is not float32."""
    if plan.precision is not Precision.FP32 and model_dtype is not None and model_dtype != torch.float32:
        raise InputError("plan.precision", plan.precision.value,
                         f"needs a float32 model (its master weights); this model is {model_dtype}")


def check_optimizer_sharding(plan: Plan) -> None:
    """Raise :class:`InputError` for ZeRO-1 on a tensor-parallel stage."""
    for i, stage in enumerate(plan.stages):
        if stage.optimizer_sharding is OptimizerSharding.ZERO1 and any(g.tp > 1 for g in stage.replicas):
            raise InputError(f"plan.stages[{i}].optimizer_sharding", stage.optimizer_sharding.value,
                             "ZeRO-1 with tensor parallelism in the same stage is not supported; use tp=1")


def set_matmul_precision(precision: Precision) -> None:
    """Switch TF32 matmuls and convolutions on for ``TF32``, off otherwise (process-wide; CUDA only,
    the switch does nothing on CPU). Set for every plan, so one run does not leak into the next."""
    tf32 = precision is Precision.TF32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32


@contextlib.contextmanager
def compute_context(precision: Precision, device_type: str, recompute: Recomputation = Recomputation.NONE,
                    captured: bool = False) -> Iterator[None]:
    """Where forwards and losses run: ``torch.autocast(device_type, torch.bfloat16)`` for ``BF16``,
    nothing otherwise. Backwards run outside it (they follow the forward's dtypes).

    Under ``recompute=FULL`` autocast's weight-cast cache is off: the cache keeps the bf16 copy of
    every weight a forward casts until the context exits, which under recomputation (which saves
    none of them) is a copy of all the stage's matmul weights at the end of its forward ($2P$
    bytes: +0.54 GB on a 320M-parameter GPT on an H100, its peak). Off, each layer's casts are
    freed with its forward, and its recomputation casts again, as it would with the cache on.
    ``captured`` (a forward recorded into a CUDA graph): off too, as torch requires.
    """
    if precision is Precision.BF16:
        cache = recompute is Recomputation.NONE and not captured
        with torch.autocast(device_type, dtype=torch.bfloat16, cache_enabled=cache):
            yield
    else:
        yield


def run_layers(layers: list[nn.Module], x: torch.Tensor, recompute: Recomputation,
               captured: bool = False) -> torch.Tensor:
    """``x`` through ``layers`` in order; with ``FULL`` each layer is a ``torch.utils.checkpoint``
    region (keeps its input, recomputes its forward in the backward). Recomputation only applies
    while gradients are being recorded.

    ``captured`` (recorded into a CUDA graph): the checkpoints do not save and restore the RNG
    state (a capture cannot read it), so a layer that draws random numbers (dropout) would draw
    different ones when recomputed: :func:`heteroplan.runtime.graphs.check_graphed_layers` refuses
    such layers."""
    if recompute is Recomputation.FULL and torch.is_grad_enabled():
        from torch.utils.checkpoint import checkpoint

        for layer in layers:
            x = checkpoint(layer, x, use_reentrant=False, preserve_rng_state=not captured)
        return x
    for layer in layers:
        x = layer(x)
    return x


def make_stage_optimizer(params: list[nn.Parameter], config: RunConfig, sharding: OptimizerSharding,
                         dp_group: Any) -> torch.optim.Optimizer:
    """The optimizer of one stage's rank: ``config``'s optimizer over ``params``, or, with ``ZERO1``
    and a data-parallel group (more than one replica), a ``ZeroRedundancyOptimizer`` of it that
    keeps the state of this rank's share of the parameters only."""
    cls, kwargs = optimizer_class(config)
    kwargs |= implementation_kwargs(params)  # as make_optimizer
    if sharding is OptimizerSharding.ZERO1 and dp_group is not None:
        from torch.distributed.optim import ZeroRedundancyOptimizer

        return ZeroRedundancyOptimizer(params, optimizer_class=cls, process_group=dp_group, **kwargs)
    return cls(params, **kwargs)


def local_optimizer(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """The optimizer whose state this rank holds: a ``ZeroRedundancyOptimizer``'s local one (over the
    parameters it owns), else ``optimizer`` itself. Checkpoints save and load this one, so each
    rank writes the state it owns under the parameters' global names."""
    return getattr(optimizer, "optim", optimizer)


def state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of optimizer state this rank holds (tensors in ``state``, step counters included)."""
    total = 0
    for state in local_optimizer(optimizer).state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor):
                total += value.numel() * value.element_size()
    return total


LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def loss_under(precision: Precision, device_type: str, loss: LossFn, captured: bool = False) -> LossFn:
    """``loss`` computed under :func:`compute_context` (autocast runs cross-entropy in float32);
    ``captured``: recorded into a CUDA graph."""
    if precision is Precision.FP32 or precision is Precision.TF32:
        return loss

    def wrapped(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        with compute_context(precision, device_type, captured=captured):
            return loss(output, target)

    return wrapped
