"""Single-process training on the whole global batch: the oracle the runtime must match."""

from __future__ import annotations

from torch import nn

from heteroplan.errors import InputError, check_int
from heteroplan.inputs import enum_choice
from heteroplan.planner.plan import Precision, Recomputation
from heteroplan.runtime.config import RunConfig, make_optimizer
from heteroplan.runtime.dimensions import compute_context, run_layers, set_matmul_precision
from heteroplan.runtime.launch import check_task
from heteroplan.runtime.models import TrainTask

__all__ = ["train_reference"]


def train_reference(task: TrainTask, global_batch_size: int, config: RunConfig,
                    precision: Precision = Precision.FP32,
                    recompute: Recomputation = Recomputation.NONE) -> tuple[nn.Sequential, list[float]]:
    """Train ``task`` for ``config.steps`` iterations of ``global_batch_size`` samples in one process,
    the forward and loss under ``precision`` and every layer under ``recompute`` (as a plan's
    stages apply them, :mod:`heteroplan.runtime.dimensions`).

    Returns the model and the loss of each iteration (mean over the batch).
    """
    check_int("global_batch_size", global_batch_size, 1)
    check_task(task)  # a string was an AttributeError, a dict config one from make_optimizer
    if not isinstance(config, RunConfig):
        raise InputError("config", type(config).__name__, "must be a heteroplan.runtime.RunConfig")
    precision = enum_choice(Precision, "precision", precision)
    recompute = enum_choice(Recomputation, "recompute", recompute)
    set_matmul_precision(precision)
    model = task.build_model()
    layers = list(model)
    device_type = next((p.device.type for p in model.parameters()), "cpu")
    params = [p for p in model.parameters() if p.requires_grad]
    opt = make_optimizer(params, config)
    losses = []
    for step in range(config.steps):
        x, y = task.batch(step, 0, global_batch_size)
        with compute_context(precision, device_type, recompute):
            loss = task.loss(run_layers(layers, x, recompute), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
    return model, losses
