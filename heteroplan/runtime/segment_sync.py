"""The gradient all-reduce of runs whose replicas of a layer are sharded differently: one per layer range.

A plain plan whose stages give every replica one TP degree reduces each stage's gradient shard
by shard over its data-parallel groups (the worker's own path). Two kinds of runs cannot:

- a *mixed stage*, whose replicas differ in TP degree (a TP-1 replica holds a weight whole, a
  TP-2 replica holds halves of it), and
- a :class:`~heteroplan.planner.pipeline_set.PipelineSet`, whose pipelines cut the model at
  different layers (one pipeline's stage holds layers 0-3, another's 0-1 and 2-3).

Both are reduced per *segment*: the layer ranges between consecutive stage boundaries of any
pipeline (:meth:`PipelineSet.segments`; a plain plan's are its stages), each over every replica
of every pipeline that holds it, in ascending order of layers (every rank takes part in the
segments it holds one after another, as the planner prices it,
:func:`heteroplan.planner.model.pipeline_set.simulate_pipeline_set`). Where every holder of a
segment has the same TP degree, TP rank ``t`` of each holder all-reduces its shard with the other
holders' TP ranks ``t``. Where they differ, each holder's TP group gathers the whole gradient
(``DTensor.full_tensor``), the holders' first ranks all-reduce it, each first rank broadcasts the
sum to its TP group, and every rank keeps its own shard of it (the same slicing as its weights).
Each microbatch loss is scaled by ``mbs / global batch`` of the whole run, so the sum is the
global batch's gradient and the update equals single-process training.

Checkpoints: every parameter (and its optimizer state) is written by the first holder of its
segment only (:meth:`SegmentSync.written_layers`): holders of different TP degrees would write
overlapping pieces of one tensor, which torch's distributed checkpoint refuses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from heteroplan.errors import InputError
from heteroplan.planner.plan import OptimizerSharding
from heteroplan.runtime.layout import PipelineSlot, rank_layout, uniform_stage_tp
from heteroplan.runtime.tensor_parallel import copy_slices, local_gradients, local_tensor

__all__ = ["Segment", "SegmentSync", "check_segment_run", "plan_segments", "uses_segment_sync"]


@dataclass(frozen=True)
class Segment:
    """Layers ``[first, last)`` and the replicas that hold them.

    Attributes:
        first, last: the layer range.
        holders: per replica holding it (pipelines in order, then stages, then replicas), its
            global ranks in TP order.
    """

    first: int
    last: int
    holders: tuple[tuple[int, ...], ...]

    @property
    def sharded(self) -> bool:
        """Whether every holder has the same TP degree (reduced shard by shard)."""
        return len({len(h) for h in self.holders}) == 1

    def holder_of(self, rank: int) -> tuple[int, ...] | None:
        """The ranks of the replica ``rank`` belongs to, if it holds this segment."""
        return next((h for h in self.holders if rank in h), None)


def uses_segment_sync(slots: Sequence[PipelineSlot]) -> bool:
    """Whether a run's gradients need the segment sync: several pipelines, or a stage whose replicas differ in TP."""
    return len(slots) > 1 or any(uniform_stage_tp(s.plan) is None for s in slots)


def plan_segments(slots: Sequence[PipelineSlot]) -> tuple[Segment, ...]:
    """The segments of a run (its pipelines in rank order) and who holds each (pure: no torch calls)."""
    num_layers = slots[0].plan.num_layers
    cuts = sorted({st.first_layer for s in slots for st in s.plan.stages} | {num_layers})
    layouts = [rank_layout(s.plan, s.rank_offset, s.sample_offset) for s in slots]
    out = []
    for first, last in zip(cuts[:-1], cuts[1:], strict=True):
        holders: list[tuple[int, ...]] = []
        for layout in layouts:
            replicas: dict[tuple[int, int], list[int]] = {}
            for r in layout:
                if r.first_layer <= first < r.last_layer:
                    replicas.setdefault((r.stage, r.replica), []).append(r.rank)
            holders.extend(tuple(ranks) for _, ranks in sorted(replicas.items()))
        out.append(Segment(first, last, tuple(holders)))
    return tuple(out)


def check_segment_run(slots: Sequence[PipelineSlot]) -> None:
    """:class:`InputError` for what a run reduced by segments cannot do: shard its optimizer state (ZeRO-1)."""
    if not uses_segment_sync(slots):
        return
    for s in slots:
        for i, st in enumerate(s.plan.stages):
            if st.optimizer_sharding is not OptimizerSharding.NONE:
                raise InputError(f"plan.stages[{i}].optimizer_sharding", st.optimizer_sharding.value,
                                 "ZeRO-1 shards over one stage's replicas of one TP degree; a plan with replicas of "
                                 "different TP degrees in a stage, or a pipeline set, cannot shard its optimizer state")


@dataclass(frozen=True)
class _Part:
    """One segment a rank reduces, as its stage holds it.

    Attributes:
        sharded: every holder has the same TP degree (:attr:`Segment.sharded`).
        first_rank: the first rank of this rank's replica (the broadcast's source).
        reduce_group, tp_group: the all-reduce's group (``None``: this rank sends nothing) and the
            broadcast's (``None``: no broadcast).
        params: the stage's parameters of the segment, in order.
        start, stop: their slice of the stage's gradient buffer (``0, 0`` without one).
    """

    sharded: bool
    first_rank: int
    reduce_group: Any
    tp_group: Any
    params: list[nn.Parameter]
    start: int
    stop: int


class SegmentSync:
    """The segment all-reduces of global rank ``rank`` in a run of ``slots`` (module docstring).

    Creating it creates the run's process groups for them: every rank of the world must create
    it, with the same ``slots``, at the same point (groups of identical ranks are made once).
    """

    def __init__(self, slots: Sequence[PipelineSlot], rank: int) -> None:
        check_segment_run(slots)
        self.rank = rank
        self.segments = plan_segments(slots)
        made: dict[tuple[int, ...], Any] = {}

        def group(ranks: tuple[int, ...]) -> Any:
            if len(ranks) < 2:
                return None
            if ranks not in made:
                made[ranks] = dist.new_group(list(ranks))
            return made[ranks]

        # (segment, the group reducing this rank's part, this rank's TP group for the broadcast)
        self._mine: list[tuple[Segment, Any, Any]] = []
        self._parts_of: tuple[nn.Module, list[_Part]] | None = None  # (stage, its parts): see _parts
        for seg in self.segments:
            if len(seg.holders) < 2:
                continue
            if seg.sharded:
                groups = [group(tuple(h[t] for h in seg.holders)) for t in range(len(seg.holders[0]))]
                own = seg.holder_of(rank)
                if own is not None:
                    self._mine.append((seg, groups[own.index(rank)], None))
            else:
                reduce_group = group(tuple(h[0] for h in seg.holders))
                tp_groups = {h: group(h) for h in seg.holders}
                own = seg.holder_of(rank)
                if own is not None:
                    self._mine.append((seg, reduce_group if rank == own[0] else None, tp_groups[own]))

    def written_layers(self) -> frozenset[int]:
        """Layers whose parameters and optimizer state this rank writes into a checkpoint: those of
        the segments whose first holder it belongs to."""
        return frozenset(i for seg in self.segments if self.rank in seg.holders[0] for i in range(seg.first, seg.last))

    def reduce(self, stage: nn.Module, grad_buffer: torch.Tensor | None = None) -> None:
        """Sum every gradient of ``stage`` (a :class:`~heteroplan.runtime.worker.LayerRange`, children
        named by global layer index) over the replicas holding its layers, in place.

        ``grad_buffer``: the one buffer whose consecutive slices are the gradients of ``stage``'s
        parameters in order (:func:`~heteroplan.runtime.worker.flat_gradients`); a segment's slice is
        then reduced where it lies, without a flat copy (``4 P`` bytes on the rank's peak otherwise)."""
        for part in self._parts(stage, grad_buffer is not None):
            grads = local_gradients(part.params)  # a zero gradient where this rank's microbatches left none
            if grad_buffer is not None:  # no DTensor: the segment's gradients are one slice of the buffer
                flat = grad_buffer[part.start:part.stop]
                if part.reduce_group is not None:
                    dist.all_reduce(flat, group=part.reduce_group)
                if part.tp_group is not None:  # TP ranks of a replicated layer: the first's sum for all
                    dist.broadcast(flat, src=part.first_rank, group=part.tp_group)
            elif part.tp_group is None and part.sharded:
                self._reduce_shards(grads, part.reduce_group)
            else:
                self._reduce_whole(part.params, part.first_rank, part.reduce_group, part.tp_group)

    def _parts(self, stage: nn.Module, buffered: bool) -> list[_Part]:
        """The segments this rank reduces, with ``stage``'s parameters of each and, ``buffered``,
        their slice of the stage's gradient buffer. Worked out at the first step and kept: the stage
        and its parameters stay the same objects from step to step."""
        if self._parts_of is not None and self._parts_of[0] is stage:
            return self._parts_of[1]
        offsets: dict[int, int] = {}
        at = 0
        for p in (p for p in stage.parameters() if p.requires_grad):
            offsets[id(p)] = at
            at += p.numel()
        parts = []
        for seg, reduce_group, tp_group in self._mine:
            params = [p for i in range(seg.first, seg.last) for p in stage.get_submodule(str(i)).parameters()
                      if p.requires_grad]
            if params:
                start = offsets[id(params[0])] if buffered else 0
                stop = start + sum(p.numel() for p in params) if buffered else 0
                own = seg.holder_of(self.rank)
                assert own is not None  # _mine holds only the segments this rank holds
                parts.append(_Part(seg.sharded, own[0], reduce_group, tp_group, params, start, stop))
        self._parts_of = (stage, parts)
        return parts

    @staticmethod
    def _reduce_shards(grads: list[torch.Tensor], group: Any) -> None:
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, group=group)
        copy_slices(grads, flat)

    @staticmethod
    def _reduce_whole(params: list[nn.Parameter], first_rank: int, reduce_group: Any, tp_group: Any) -> None:
        """Whole gradients: gathered in the TP group, summed over the holders' first ranks,
        broadcast back, each rank keeping its shard."""
        whole = [p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad for p in params]
        flat = torch.cat([w.reshape(-1) for w in whole])
        if reduce_group is not None:
            dist.all_reduce(flat, group=reduce_group)
        if tp_group is not None:
            dist.broadcast(flat, src=first_rank, group=tp_group)
        for p, part in zip(params, torch.split(flat, [w.numel() for w in whole]), strict=True):
            local_tensor(p.grad).copy_(_shard_of(part.view(p.shape), p))


def _shard_of(whole: torch.Tensor, param: nn.Parameter) -> torch.Tensor:
    """This rank's piece of ``whole`` as ``param`` is laid out (a DTensor's local shard; else all of it)."""
    if not hasattr(param, "device_mesh"):
        return whole
    from torch.distributed.tensor import distribute_tensor

    return distribute_tensor(whole, param.device_mesh, param.placements, src_data_rank=None).to_local()
