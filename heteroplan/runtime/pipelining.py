"""One rank's pipeline stage under ``torch.distributed.pipelining``.

Every data-parallel replica ``d`` and TP index ``t`` forms one pipeline (process group
``(d, t)``: TP rank ``t`` of replica ``d`` on every stage, see
:func:`heteroplan.runtime.tensor_parallel.create_groups`). Its stages are ``PipelineStage``\\ s
(shapes inferred from the first microbatch) driven by the replica's own schedule with the
replica's own ``n_microbatches`` (:func:`heteroplan.runtime.schedule.choose_pipeline`), so
replicas of different speeds run different microbatch counts. Gradients are not scaled by the
schedule (``scale_grads=False``): the loss of each microbatch is scaled by ``mbs / global batch``
instead, so the sum over every replica's microbatches is the gradient of the global batch's mean
loss, and the data-parallel all-reduce that follows (in the worker) sums it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

__all__ = ["TorchPipeline"]


class TorchPipeline:
    """This rank's ``PipelineStage`` and schedule.

    Args:
        module: the stage's layers (sharded already when the stage is tensor-parallel).
        stage_index, num_stages: this stage and the pipeline's length.
        device: where the stage runs.
        group: the pipeline's process group (group rank = stage index).
        n_microbatches: microbatches of this replica per iteration.
        schedule: ``"Schedule1F1B"`` or ``"ScheduleGPipe"``.
        loss_fn: ``(output, target) -> scaled mean loss`` of one microbatch (last stage).
    """

    def __init__(self, module: nn.Module, stage_index: int, num_stages: int, device: torch.device, group: Any,
                 n_microbatches: int, schedule: str, loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
        from torch.distributed import pipelining

        self.first, self.last = stage_index == 0, stage_index == num_stages - 1
        self.stage = pipelining.PipelineStage(module, stage_index, num_stages, device, group=group)
        schedule_class = getattr(pipelining, schedule)
        self.schedule = schedule_class(self.stage, n_microbatches, loss_fn=loss_fn, scale_grads=False)

    def run(self, inputs: torch.Tensor | None, target: torch.Tensor | None) -> float:
        """One iteration: forwards and backwards of every microbatch (gradients accumulate in the
        stage's parameters); ``inputs`` (first stage) and ``target`` (last stage) hold the replica's
        samples of the iteration, split into equal microbatches along dimension 0. Returns the sum
        of the microbatches' scaled losses on the last stage, 0 elsewhere."""
        losses: list[torch.Tensor] = []
        # torch < 2.13 checks each microbatch's strides against the first one's: a slice such as
        # tokens[:, :-1] (stride seq + 1) fails there with PipeliningShapeError, so pass dense copies
        inputs = inputs.contiguous() if inputs is not None else None
        target = target.contiguous() if target is not None else None
        args = (inputs,) if self.first else ()
        if self.last:
            self.schedule.step(*args, target=target, losses=losses, return_outputs=False)
        else:
            self.schedule.step(*args, return_outputs=False)
        return float(sum(float(loss.detach()) for loss in losses))
