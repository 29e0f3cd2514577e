"""Per-layer profiles of a tensor-parallel model: what one rank of a TP group measures.

:func:`profile_tensor_parallel` starts ``tp`` local processes (one TP group, gloo on CPU, NCCL on
CUDA), shards the task's model with :func:`heteroplan.runtime.tensor_parallel.shard_layers` and
runs :func:`heteroplan.runtime.profiler.profile_layers` on every rank in lock-step (the sharded
layers' all-reduces are inside the timed forward and backward). Rank 0's measurement is
returned: times per microbatch, and sizes of the shard one GPU holds (``params_floats`` of a
column-parallel linear is ``1 / tp`` of the layer's), so ``LayerProfile.write(..., tp=tp)``
gives the planner its ``tp`` entries of ``llm_info.json`` and ``profiles/<model>/<gpu>.json``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from heteroplan.errors import InputError, check_int
from heteroplan.run_options import Device, Optimizer
from heteroplan.runtime.config import RunConfig
from heteroplan.runtime.launch import RankProcesses
from heteroplan.runtime.models import TrainTask
from heteroplan.runtime.profiler import LayerProfile, profile_layers
from heteroplan.runtime.tensor_parallel import shard_layers
from heteroplan.runtime.worker import follow_launcher, join_process_group, report_failure_and_exit

__all__ = ["profile_tensor_parallel"]


def profile_tensor_parallel(
    task: TrainTask,
    tp: int,
    microbatch_sizes: Sequence[int] = (1, 2, 4),
    loss_fn: Callable[[Any], Any] | None = None,
    warmup: int = 2,
    repeats: int = 5,
    optimizer: Optimizer | str = Optimizer.SGD,
    sweeps: int = 1,
    device: str = "cpu",
    timeout_s: float = 600.0,
) -> LayerProfile:
    """Profile ``task``'s model sharded over ``tp`` local processes; returns rank 0's :class:`LayerProfile`.

    Arguments as :func:`~heteroplan.runtime.profiler.profile_layers` (``loss_fn`` must be
    picklable: a module-level function); ``timeout_s`` bounds the whole measurement (seconds).
    """
    check_int("tp", tp, 1)
    heads = getattr(task, "n_heads", None)
    if isinstance(heads, int) and heads % tp:
        raise InputError("tp", tp, f"must divide the model's n_heads={heads}")
    config = RunConfig(device=device, timeout_s=timeout_s, startup_timeout_s=timeout_s)
    ranks = RankProcesses(tp, _profile_entry, (task, tuple(microbatch_sizes), loss_fn, warmup, repeats, optimizer,
                                               sweeps, config),
                          timeout_s=timeout_s, startup_timeout_s=timeout_s)
    ranks.wait_all(timeout=timeout_s)
    return ranks.results[0]


def _profile_entry(rank: int, world_size: int, init_method: str, task: TrainTask, sizes: tuple[int, ...],
                   loss_fn: Callable[[Any], Any] | None, warmup: int, repeats: int, optimizer: Optimizer | str, sweeps: int,
                   config: RunConfig, stop_event: Any, queue: Any) -> None:  # pragma: no cover - spawned
    try:
        import warnings

        import torch
        import torch.distributed as dist

        # the update timing draws random gradients for replicated DTensor parameters
        warnings.filterwarnings("ignore", message="DTensor random operators")
        follow_launcher()
        join_process_group(config, init_method, rank, world_size)
        torch.set_num_threads(config.threads_per_rank)
        device = torch.device("cuda", rank) if config.device is Device.CUDA else torch.device("cpu")
        model = task.build_model().to(device)
        if world_size > 1:
            shard_layers(model, dist.group.WORLD, world_size, device.type)
        profile = profile_layers(model, lambda mbs: task.batch(0, 0, mbs)[0], sizes, loss_fn, device, warmup, repeats,
                                 optimizer, sweeps)
        queue.put(("done", rank, profile if rank == 0 else None))
        dist.destroy_process_group()
    except BaseException:  # noqa: BLE001 - report anything to the parent, then fail
        report_failure_and_exit(queue, rank)
