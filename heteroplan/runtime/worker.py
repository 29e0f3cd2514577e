"""The training loop of one rank, and the entry points that start it.

``train_rank`` assumes ``torch.distributed`` is initialised; it is called by the local
launcher (:mod:`heteroplan.runtime.launch`, one process per rank) and by ``torchrun``
(``python -m heteroplan.runtime.worker``) across nodes.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from heteroplan.commands.training_args import add_training_arguments, run_config_kwargs
from heteroplan.planner.plan import Plan
from heteroplan.runtime import checkpoint as ckpt
from heteroplan.runtime.comm import TAG_ACTIVATION, TAG_GRADIENT, Links, PendingSend
from heteroplan.runtime.config import RunConfig, StepMetrics, make_optimizer
from heteroplan.runtime.layout import RankInfo, check_runnable, rank_layout
from heteroplan.runtime.models import TrainTask
from heteroplan.runtime.schedule import SCHEDULES

__all__ = ["train_rank", "rank_entry", "main"]


def _dp_groups(plan: Plan) -> list[Any]:
    """Create every stage's data-parallel group (all ranks must create all, in order); None when dp = 1."""
    dp = plan.dp
    return [dist.new_group(list(range(s * dp, (s + 1) * dp))) if dp > 1 else None for s in range(plan.pp)]


def _device(config: RunConfig, rank: int) -> torch.device:
    if config.device == "cuda":
        local = int(os.environ.get("LOCAL_RANK", rank % max(torch.cuda.device_count(), 1)))
        torch.cuda.set_device(local)
        return torch.device("cuda", local)
    return torch.device("cpu")


def train_rank(
    plan: Plan,
    task: TrainTask,
    config: RunConfig,
    should_stop: Callable[[], bool] = lambda: False,
    report: Callable[[StepMetrics], None] = lambda m: None,
) -> int:
    """Train this rank's share of ``plan``; returns the iterations done in total.

    Every replica of a stage runs its own microbatch count; gradients are summed over the
    samples of the global batch (each microbatch loss is scaled by ``mbs / global_batch``) and
    all-reduced within the stage, so the update equals single-process training on the whole batch.
    """
    rank, world = dist.get_rank(), dist.get_world_size()
    layout = rank_layout(plan)
    if world != len(layout):
        raise RuntimeError(f"world size {world} but the plan has {len(layout)} ranks")
    me: RankInfo = layout[rank]
    device = _device(config, rank)
    torch.set_num_threads(config.threads_per_rank)
    full = task.build_model()
    check_runnable(plan, len(full))
    stage = nn.Sequential(*list(full)[me.first_layer : me.last_layer]).to(device)
    del full
    params = [p for p in stage.parameters() if p.requires_grad]
    optimizer = make_optimizer(params, config)
    dp_group = _dp_groups(plan)[me.stage]
    first, last = me.stage == 0, me.stage == plan.pp - 1
    prev_rank = rank - plan.dp if not first else None
    next_rank = rank + plan.dp if not last else None
    mbs, gbs = plan.microbatch_size, plan.global_batch_size
    ops = SCHEDULES[config.schedule](plan.pp, me.stage, me.num_microbatches)
    links = Links()

    start = 0
    resume = ckpt.latest_checkpoint(config.checkpoint_dir) if config.resume else None
    if resume is not None:
        ckpt.load_layers(resume, me.first_layer, stage, optimizer)
        start = resume.step
    deadline = time.monotonic() + config.max_seconds if config.max_seconds else None
    control = torch.zeros(2, dtype=torch.float64, device=device)
    done = start
    for step in range(start, config.steps):
        if config.fault is not None and tuple(config.fault[1:]) == (rank, step):
            if config.fault[0] == "exit":
                os._exit(17)  # die without a word, as a crashed node would
            time.sleep(10 * config.timeout_s)  # hang, as a wedged GPU would
        t0 = time.perf_counter()
        pending: list[PendingSend] = []
        saved: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        loss_sum = 0.0
        for op in ops:
            offset = me.sample_offset + op.microbatch * mbs
            if op.kind == "F":
                if first:
                    x = task.batch(step, offset, mbs)[0].to(device)
                else:
                    x = links.recv(prev_rank, TAG_ACTIVATION, device)
                    if not x.is_floating_point():
                        raise RuntimeError(f"stage {me.stage} receives {x.dtype} activations: cannot backpropagate")
                    x.requires_grad_(True)
                y = stage(x)
                if last:
                    target = task.batch(step, offset, mbs)[1].to(device)
                    y = task.loss(y, target) * (mbs / gbs)
                    loss_sum += float(y.detach())
                else:
                    pending.append(links.send(y, next_rank, TAG_ACTIVATION))
                saved[op.microbatch] = (x, y)
            else:
                x, y = saved.pop(op.microbatch)
                if last:
                    y.backward()
                else:
                    y.backward(links.recv(next_rank, TAG_GRADIENT, device))
                if not first:
                    pending.append(links.send(x.grad, prev_rank, TAG_GRADIENT))
        for send in pending:
            send.wait()
        t_sync = time.perf_counter()
        if dp_group is not None:
            grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
            flat = torch.cat([g.reshape(-1) for g in grads])
            dist.all_reduce(flat, group=dp_group)
            for p, g in zip(params, torch.split(flat, [q.numel() for q in params]), strict=True):
                p.grad = g.view_as(p)
        sync_time = time.perf_counter() - t_sync
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        control.zero_()
        if rank == 0 and (should_stop() or (deadline is not None and time.monotonic() > deadline)):
            control[0] = 1.0
        if last:
            control[1] = loss_sum
        dist.all_reduce(control)
        stop = bool(control[0] > 0)
        done = step + 1
        loss = float(control[1])
        if rank == 0:
            report(StepMetrics(done, loss, time.perf_counter() - t0, sync_time))
        due = config.checkpoint_every and done % config.checkpoint_every == 0
        if config.checkpoint_dir and (due or stop or done == config.steps):
            _checkpoint(plan, config, me, stage, optimizer, done, loss)
        if stop:
            break
    return done


def _checkpoint(plan: Plan, config: RunConfig, me: RankInfo, stage: nn.Sequential,
                optimizer: torch.optim.Optimizer, step: int, loss: float) -> None:
    if me.replica == 0:
        ckpt.save_layers(config.checkpoint_dir, step, me.first_layer, stage, optimizer)
    dist.barrier()
    if me.rank == 0:
        ckpt.write_manifest(config.checkpoint_dir, step, plan.num_layers, {"loss": loss, "plan": plan.to_dict()})
        ckpt.prune(config.checkpoint_dir, config.keep_checkpoints)


def rank_entry(rank: int, world_size: int, init_method: str, plan_dict: dict, task: TrainTask,
               config: RunConfig, stop_event: Any, queue: Any) -> None:
    """Process target of the local launcher: init, train, report to the parent through ``queue``."""
    try:
        dist.init_process_group(config.resolved_backend, init_method=init_method, rank=rank,
                                world_size=world_size, timeout=timedelta(seconds=config.timeout_s))
        plan = Plan.from_dict(plan_dict)
        done = train_rank(plan, task, config, stop_event.is_set, lambda m: queue.put(("step", rank, m)))
        queue.put(("done", rank, done))
        dist.destroy_process_group()
    except BaseException:  # noqa: BLE001 - report anything to the parent, then fail
        queue.put(("error", rank, traceback.format_exc(limit=8)))
        sys.stdout.flush()
        os._exit(1)


def main(argv: list[str] | None = None) -> int:
    """``torchrun ... -m heteroplan.runtime.worker --plan plan.json`` (env:// rendezvous)."""
    from heteroplan.runtime.models import TinyGPTTask

    parser = argparse.ArgumentParser(prog="python -m heteroplan.runtime.worker")
    parser.add_argument("--plan", required=True, help="plan JSON (Plan.to_json or Sailor plan_config)")
    add_training_arguments(parser, steps=10, optimizer="sgd", lr=0.05)
    args = parser.parse_args(argv)
    plan = Plan.from_json(args.plan)
    config = RunConfig(**run_config_kwargs(args))
    task = TinyGPTTask(n_layers=args.layers or plan.num_layers - 2)
    dist.init_process_group(config.resolved_backend, timeout=timedelta(seconds=config.timeout_s))

    def show(m: StepMetrics) -> None:
        print(f"step {m.step:5d}  loss {m.loss:.4f}  {m.iteration_time * 1e3:8.1f} ms", flush=True)

    done = train_rank(plan, task, config, report=show)
    dist.destroy_process_group()
    return 0 if done >= config.steps else 1


if __name__ == "__main__":
    sys.exit(main())
