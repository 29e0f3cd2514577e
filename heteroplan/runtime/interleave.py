"""Time several plans in one set of processes, visiting them in turn, so they share the machine's moods.

On a shared machine the speed drifts in spells of a fraction of a second to tens of seconds
(on the 2-core CI VM: 13-18% per core over 0.25 s windows, 7-9% over 20 s). Runs of one plan
after another (:func:`heteroplan.runtime.calibrate.measure_plans`) each catch a different spell:
runs of one plan spread 7-75% there, and a comparison between plans is only as good as the
luck of their runs. Here every rank holds every plan at once (its own layers, optimizer and
groups per plan) and the plans take turns: each round visits every plan once, in a fresh
random order, for ``warmup`` untimed and ``iterations`` timed iterations. Over many short
visits every plan sees the same mix of spells, so their times compare; a plan's time is the
median of its timed iterations (:func:`median_times`).

A plan of ``n`` ranks runs on global ranks ``0 .. n-1``; ranks beyond wait at a barrier
(blocked, not spinning) while it runs, as idle cores would.

Memory: every rank holds every plan's layers and optimizer state at once, so a rank needs the
sum over the plans it takes part in. For a model near the device's memory, time the plans in
runs of their own instead (``calibrate(..., interleaved=False)``).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch.distributed as dist

from heteroplan.errors import InputError, check_int
from heteroplan.planner.plan import Plan
from heteroplan.run_options import PipelineEngine
from heteroplan.runtime.config import RunConfig
from heteroplan.runtime.launch import RankProcesses, check_task
from heteroplan.runtime.layout import rank_layout
from heteroplan.runtime.models import TrainTask
from heteroplan.runtime.tensor_parallel import create_groups
from heteroplan.runtime.worker import (
    StageTrainer,
    follow_launcher,
    join_process_group,
    pipeline_choice,
    report_failure_and_exit,
)

__all__ = ["measure_interleaved", "median_times", "visit_order"]


def visit_order(num_plans: int, rounds: int, warmup_rounds: int = 1, seed: int = 0) -> list[tuple[int, bool]]:
    """``(plan index, timed)`` per visit: ``warmup_rounds`` untimed rounds, then ``rounds`` timed
    ones, each visiting every plan once in a random order (``seed``)."""
    rng = np.random.default_rng(seed)
    return [(int(i), r >= warmup_rounds) for r in range(warmup_rounds + rounds) for i in rng.permutation(num_plans)]


def median_times(times: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """Each plan's median seconds per iteration (times as :func:`measure_interleaved` returns them)."""
    return {name: statistics.median(t) for name, t in times.items()}


def measure_interleaved(
    plans: Mapping[str, Plan], task: TrainTask, *, rounds: int = 30, iterations: int = 2, warmup: int = 1,
    warmup_rounds: int = 1, seed: int = 0, config: RunConfig | None = None,
    pipelines: Mapping[str, str] | None = None, progress: Callable[[str], None] | None = None,
) -> dict[str, list[float]]:
    """Time every plan in one set of processes, interleaved; seconds of each timed iteration, by label.

    Args:
        plans: plans of ``task``'s model by label; the world is as wide as the widest plan.
        rounds: timed rounds; each visits every plan once, in a random order.
        iterations: timed iterations per visit (``rounds * iterations`` per plan in all).
        warmup: untimed iterations at the start of each visit (caches filled by the plan before
            are the plan's own again).
        warmup_rounds: untimed rounds first (allocator, first use of each link).
        seed: of the visit order.
        config: how to train (default: SGD, one thread per rank); steps and checkpoints are ignored.
        pipelines: per label, the ``RunConfig.pipeline`` engine of that plan (default: ``config``'s),
            to compare torch's pipelining with heteroplan's loop on one plan.
        progress: called with a line after every timed round.

    Raises :class:`~heteroplan.errors.RankFailure` when a rank fails or stalls for
    ``config.timeout_s`` (nothing hangs forever).
    """
    if not plans:
        raise InputError("plans", plans, "need at least one plan")
    check_int("rounds", rounds, 1)
    check_int("iterations", iterations, 1)
    check_int("warmup", warmup, 0)
    check_int("warmup_rounds", warmup_rounds, 0)
    names = list(plans)
    for name in names:
        check_task(task, plans[name], f"plans[{name!r}].stages")
    run_config = replace(config or RunConfig(optimizer="sgd", lr=0.01, threads_per_rank=1), checkpoint_dir=None)
    unknown = sorted(set(pipelines or {}) - set(names))
    if unknown:
        raise InputError("pipelines", unknown, "must name plans of `plans`")
    configs = [replace(run_config, pipeline=(pipelines or {}).get(n, run_config.pipeline)) for n in names]
    for name, plan_config in zip(names, configs, strict=True):
        pipeline_choice(plans[name], plan_config)  # InputError now, not in the ranks
    world = max(len(rank_layout(plans[n])) for n in names)
    order = visit_order(len(names), rounds, warmup_rounds, seed)
    ranks = RankProcesses(world, interleaved_entry, ([plans[n].to_dict() for n in names], task, configs, order,
                                                     warmup, iterations),
                          timeout_s=run_config.timeout_s, startup_timeout_s=run_config.startup_timeout_s)
    times: dict[str, list[float]] = {n: [] for n in names}
    per_round = len(names)

    def collect(report: tuple[int, int, list[float]]) -> None:
        visit, index, seconds = report
        times[names[index]].extend(seconds)
        if progress is not None and order[visit][1] and (visit + 1) % per_round == 0:
            done = (visit + 1) // per_round - warmup_rounds
            progress(f"round {done}/{rounds}: " + ", ".join(f"{n} {statistics.median(t):.4f} s" for n, t in times.items()))

    ranks.wait_all(on_report=collect)
    return times


def interleaved_entry(rank: int, world_size: int, init_method: str, plan_dicts: list[dict], task: TrainTask,
                      configs: list[RunConfig], order: list[tuple[int, bool]], warmup: int, iterations: int,
                      stop_event: Any, queue: Any) -> None:
    """Process target of :func:`measure_interleaved`: build every plan's share of this rank, then
    run the visits in ``order``; rank 0 reports ``(visit, plan index, [seconds of each timed
    iteration])`` after every visit (an empty list for an untimed one). ``configs``: one per plan."""
    try:
        follow_launcher()
        join_process_group(configs[0], init_method, rank, world_size)
        trainers: list[StageTrainer | None] = []
        for plan, config in zip(map(Plan.from_dict, plan_dicts), configs, strict=True):
            width = len(rank_layout(plan))
            # every rank creates every group, in the same order
            groups = create_groups(plan, pipelines=pipeline_choice(plan, config).engine is PipelineEngine.TORCH)
            group = dist.new_group(list(range(width))) if 1 < width < world_size else None
            trainers.append(StageTrainer(plan, task, config, rank, groups, group) if rank < width else None)
        steps = [0] * len(trainers)
        for visit, (index, timed) in enumerate(order):
            dist.barrier()
            trainer, seconds = trainers[index], []
            if trainer is not None:
                for i in range(warmup + iterations):
                    metrics, _ = trainer.step(steps[index])
                    steps[index] += 1
                    if timed and i >= warmup:
                        seconds.append(metrics.iteration_time)
            if rank == 0:
                queue.put(("step", rank, (visit, index, seconds)))
        dist.barrier()
        queue.put(("done", rank, len(order)))
        dist.destroy_process_group()
    except BaseException:  # noqa: BLE001 - report anything to the parent, then fail
        report_failure_and_exit(queue, rank)
