"""Tensor parallelism inside a pipeline stage, with torch's DTensor API.

Each replica of a stage with ``tp > 1`` gets a one-dimensional :class:`DeviceMesh` over its
``tp`` neighbouring ranks, and every layer of the stage that says how to shard itself
(``layer.tensor_parallel_plan(tp)`` -> ``{submodule: "colwise" | "rowwise"}``, see
:class:`heteroplan.runtime.models.Block`) is sharded with
``torch.distributed.tensor.parallel.parallelize_module`` (``ColwiseParallel`` /
``RowwiseParallel``, Megatron semantics: a layer's input and output are full, replicated tensors
on every TP rank). Layers without a plan (embedding, head, layer norms) are replicated; their
gradients are equal on every TP rank because the column-parallel layers all-reduce their input
gradient.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from heteroplan.errors import InputError
from heteroplan.planner.plan import Plan
from heteroplan.runtime.layout import replica_start, replica_tp, stage_tp

__all__ = ["ProcessGroups", "create_groups", "shard_layers", "local_tensor", "local_gradients", "copy_slices"]


@dataclass(frozen=True)
class ProcessGroups:
    """The plan's data-parallel groups, one per (stage, TP index), TP groups, one per (stage, replica),
    and (for torch's pipelining) pipeline groups, one per (replica, TP index).

    Data-parallel group ``(s, t)`` holds TP rank ``t`` of every replica of stage ``s`` (they hold the
    same shard); ``None`` where it would have a single rank, and absent for a stage whose replicas
    differ in TP degree (their gradients meet in :mod:`heteroplan.runtime.segment_sync`). Pipeline
    group ``(d, t)`` holds TP rank ``t`` of replica ``d`` on every stage, in stage order (group
    rank = stage index); only made when asked for (every stage has the same TP degree).
    """

    dp: dict[tuple[int, int], Any]
    tp: dict[tuple[int, int], Any]
    pipe: dict[tuple[int, int], Any] = field(default_factory=dict)


def create_groups(plan: Plan, pipelines: bool = False, rank_offset: int = 0, data_parallel: bool = True) -> ProcessGroups:
    """Create every group of ``plan`` (all ranks of the world must call this, in the same order);
    ``pipelines``: also one group per pipeline (replica, TP index), for torch's pipelining;
    ``rank_offset``: the plan's first global rank (a pipeline of a set); ``data_parallel=False``:
    no data-parallel groups (a segment sync reduces the gradients instead)."""
    starts, tps, dp = replica_start(plan), replica_tp(plan), plan.dp
    dp_groups: dict[tuple[int, int], Any] = {}
    tp_groups: dict[tuple[int, int], Any] = {}
    for s, degrees in enumerate(tps):
        if data_parallel and len(set(degrees)) == 1:
            for t in range(degrees[0]):
                ranks = [rank_offset + starts[s][d] + t for d in range(dp)]
                dp_groups[(s, t)] = dist.new_group(ranks) if dp > 1 else None
        for d, tp in enumerate(degrees):
            first = rank_offset + starts[s][d]
            tp_groups[(s, d)] = dist.new_group(list(range(first, first + tp))) if tp > 1 else None
    pipe_groups: dict[tuple[int, int], Any] = {}
    if pipelines:
        uniform = stage_tp(plan)
        if len(set(uniform)) != 1:
            raise InputError("plan.stages.replicas.tp", uniform, "one pipeline per TP index needs one TP degree on every stage")
        for d in range(dp):
            for t in range(uniform[0]):
                pipe_groups[(d, t)] = dist.new_group([rank_offset + starts[s][d] + t for s in range(len(uniform))])
    return ProcessGroups(dp_groups, tp_groups, pipe_groups)


def shard_layers(layers: nn.Module, group: Any, tp: int, device_type: str) -> None:
    """Shard, in place, every child layer of ``layers`` that has ``tensor_parallel_plan`` over ``group``'s ``tp`` ranks."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    mesh = DeviceMesh.from_group(group, device_type)
    for i, layer in enumerate(layers.children()):
        planner = getattr(layer, "tensor_parallel_plan", None)
        if planner is None:
            continue
        spec = planner(tp)
        unknown = sorted(set(spec.values()) - set(styles))
        if unknown:
            raise InputError(f"layer {i}.tensor_parallel_plan", unknown, f"styles are {sorted(styles)}")
        parallelize_module(layer, mesh, {name: styles[style]() for name, style in spec.items()})


def local_tensor(t: Any) -> Any:
    """The shard this rank holds of ``t`` (``t`` itself when it is not a DTensor)."""
    return t.to_local() if hasattr(t, "to_local") else t


def local_gradients(params: list[nn.Parameter]) -> list[Any]:
    """The shard this rank holds of every parameter's gradient, a zero gradient given first to a
    parameter without one (a layer this rank's microbatches did not reach still takes part in the
    all-reduce)."""
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    return [local_tensor(p.grad) for p in params]


def copy_slices(tensors: list[Any], flat: Any) -> None:
    """Copy consecutive slices of ``flat`` into ``tensors``. A function of its own so that no view
    of ``flat`` outlives it: a loop variable left holding the last slice kept the whole flat copy of
    the gradients alive through the optimizer step (4P bytes; measured on a ZeRO-1 rank whose peak
    is the step)."""
    for t, part in zip(tensors, torch.split(flat, [t.numel() for t in tensors]), strict=True):
        t.copy_(part.view_as(t))
