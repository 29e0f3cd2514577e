"""Single-process training on the whole global batch: the oracle the runtime must match."""

from __future__ import annotations

from torch import nn

from heteroplan.errors import check_int
from heteroplan.runtime.config import RunConfig, make_optimizer
from heteroplan.runtime.models import TrainTask

__all__ = ["train_reference"]


def train_reference(task: TrainTask, global_batch_size: int, config: RunConfig) -> tuple[nn.Sequential, list[float]]:
    """Train ``task`` for ``config.steps`` iterations of ``global_batch_size`` samples in one process.

    Returns the model and the loss of each iteration (mean over the batch).
    """
    check_int("global_batch_size", global_batch_size, 1)
    model = task.build_model()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = make_optimizer(params, config)
    losses = []
    for step in range(config.steps):
        x, y = task.batch(step, 0, global_batch_size)
        loss = task.loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
    return model, losses
