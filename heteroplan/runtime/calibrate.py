"""Measure a few plans for real and refit the simulator to them (the planner's measure-and-refit loop).

A profile (:mod:`heteroplan.runtime.profiler`) times each layer alone. :func:`calibrate` runs
small *calibration plans* of the same model with the runtime — by default one process at the
smallest and the largest profiled microbatch size, and, with two or more processes, 2
data-parallel replicas and a 2-stage pipeline at both — measures their iteration time, fits
the simulator's ``compute_scale``, ``microbatch_overhead_s``, ``transfer_latency_s`` and
``straggler_cv`` (:func:`heteroplan.planner.model.calibration.fit_sim_config`) and writes them to the profile's
directory (``sim_config.json``), where ``simulate`` and ``plan_job`` pick them up.

By default the plans are timed together in one set of processes, taking turns in short visits
(:func:`~heteroplan.runtime.interleave.measure_interleaved`), and a plan's time is the median of
its iterations: every plan then sees the same mix of the machine's fast and slow spells. With
``interleaved=False`` each plan is run on its own, ``rounds`` times, interleaved run by run
(:func:`measure_plans`); a run's time is the 25th percentile of its iterations after warm-up and
a plan's time its fastest run (:func:`best_of`), the rule of ``timeit``. On the 2-core CI VM
runs of one plan spread 7-75% and the fastest run of a two-rank plan sometimes caught a rare
fast spell; see docs/runtime.md. Profile with ``profile_layers(..., sweeps=9)``.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from heteroplan.cluster import GPUType
from heteroplan.errors import InputError, check_fraction, check_int
from heteroplan.perf.sailor_profiles import load_model_profile
from heteroplan.planner.model.calibration import (
    TIME_CONSTANTS,
    Calibration,
    fit_sim_config,
    time_constants_for,
)
from heteroplan.planner.model.sim_config import PROFILED_CONFIG, load_sim_config
from heteroplan.planner.plan import Plan, ReplicaGroup, Stage
from heteroplan.runtime.config import RunConfig
from heteroplan.runtime.interleave import measure_interleaved
from heteroplan.runtime.launch import run_plan
from heteroplan.runtime.models import TrainTask

__all__ = ["calibration_plans", "measure_plans", "best_of", "fit_runs", "calibrate"]


def best_of(runs: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """The fastest run's seconds per iteration of each plan (runs as :func:`measure_plans` returns them)."""
    return {name: min(times) for name, times in runs.items()}


def calibration_plans(
    model: str, num_layers: int, microbatch_sizes: Sequence[int], global_batch_size: int, processes: int,
    gpu_type: str = "cpu", zone: str = "local",
) -> dict[str, Plan]:
    """The default calibration plans, by label.

    ``1 process`` at the smallest and the largest microbatch size ``m``, ``M`` (together they
    separate the compute scale from the time per microbatch); with ``processes >= 2`` also
    ``DP 2`` (two ranks sharing the machine, an all-reduce per iteration) and ``PP 2`` (stages
    split at ``num_layers // 2``: the same work plus point-to-point transfers, few and many of
    them), each at ``M`` and ``m``. Six plans for four constants: one slow run cannot be fitted
    exactly (with exactly as many plans as constants, a refit on one run's data gave 29.5% on a
    held-out plan, 15% with one plan more). ``global_batch_size`` must be a multiple of ``2 M``.
    """
    check_int("num_layers", num_layers, 2)
    check_int("processes", processes, 1)
    sizes = sorted(set(microbatch_sizes))
    if not sizes:
        raise InputError("microbatch_sizes", microbatch_sizes, "need at least one microbatch size")
    small, large = sizes[0], sizes[-1]
    check_int("global_batch_size", global_batch_size, 1)
    if global_batch_size % (2 * large):
        raise InputError("global_batch_size", global_batch_size, f"must be a multiple of 2 x the largest microbatch ({large})")
    one = ReplicaGroup(gpu_type, zone)
    plans = {f"1 process, mbs {m}": Plan(model, global_batch_size, m, (Stage(0, num_layers, (one,)),))
             for m in dict.fromkeys((small, large))}
    if processes >= 2:
        two = ReplicaGroup(gpu_type, zone, 1, 2)
        half = num_layers // 2
        for m in dict.fromkeys((large, small)):
            plans[f"DP 2, mbs {m}"] = Plan(model, global_batch_size, m, (Stage(0, num_layers, (two,)),))
        for m in dict.fromkeys((large, small)):
            plans[f"PP 2, mbs {m}"] = Plan(model, global_batch_size, m, (Stage(0, half, (one,)), Stage(half, num_layers, (one,))))
    return plans


def measure_plans(
    plans: Mapping[str, Plan], task: TrainTask, *, rounds: int = 4, steps: int = 15, warmup_steps: int = 3,
    config: RunConfig | None = None, progress: Callable[[str], None] | None = None, quantile: float = 0.25,
) -> dict[str, list[float]]:
    """Run every plan ``rounds`` times, interleaved; seconds per iteration of each run, by label.

    Each run trains ``steps`` iterations (SGD, one thread per rank unless ``config`` says
    otherwise); its first ``warmup_steps`` are not counted and it counts the ``quantile`` of the
    others (:meth:`RunResult.iteration_time_quantile`; default 0.25, the edge of its fastest
    quarter: a slow spell of the machine during part of a run does not count, a few fast
    outliers do not either; 0.5 is the median).
    """
    check_int("rounds", rounds, 1)
    check_int("warmup_steps", warmup_steps, 0)
    check_int("steps", steps, warmup_steps + 1)
    check_fraction("quantile", quantile)
    run_config = config or RunConfig(optimizer="sgd", lr=0.01, threads_per_rank=1)
    run_config = replace(run_config, steps=steps, checkpoint_dir=None)
    times: dict[str, list[float]] = {name: [] for name in plans}
    for r in range(rounds):
        for name, plan in plans.items():
            result = run_plan(plan, task, run_config)
            times[name].append(result.iteration_time_quantile(quantile, skip=warmup_steps))
            if progress is not None:
                progress(f"round {r + 1}/{rounds}  {name}: {times[name][-1]:.4f} s/iteration")
    return times


def calibrate(
    task: TrainTask,
    data_dir: str | Path,
    model: str,
    *,
    gpu_type: str = "cpu",
    zone: str = "local",
    processes: int = 2,
    global_batch_size: int | None = None,
    plans: Mapping[str, Plan] | None = None,
    interleaved: bool = True,
    rounds: int | None = None,
    steps: int = 15,
    config: RunConfig | None = None,
    write: bool = True,
    progress: Callable[[str], None] | None = None,
) -> Calibration:
    """Run calibration plans of ``model`` (profiled in ``data_dir``) and fit the simulator to them.

    Args:
        task: the task the profile was taken of (same layers).
        data_dir: directory holding the profile of ``model`` on ``gpu_type`` (and the network
            curve of ``zone`` for multi-process plans).
        model: the profiled model's name.
        processes: ranks this machine can run at once (2 or more adds the DP and PP plans).
        global_batch_size: samples per iteration (default: 4 x the largest profiled microbatch).
        plans: your own calibration plans instead of :func:`calibration_plans`.
        interleaved: time the plans together, in turns (default), rather than run by run.
        rounds: visits of every plan (default 30, 2 timed iterations each; see
            :func:`~heteroplan.runtime.interleave.measure_interleaved`), or with
            ``interleaved=False`` runs of every plan (default 4; see :func:`measure_plans`).
        steps: iterations per run with ``interleaved=False`` (the first 3 are warm-up).
        config: how to train (default: SGD, one thread per rank).
        write: store the fitted constants in ``data_dir/sim_config.json``.
        progress: called with a line per finished round (interleaved) or run.

    Returns the :class:`Calibration` (fitted config; errors before, with the directory's
    current constants, and after), fitted to each plan's median iteration (interleaved) or
    fastest run (:func:`best_of`) from the directory's current constants. ``transfer_latency_s`` (``straggler_cv``) is fitted only
    when a plan has a pipeline (data parallelism), and never more constants than plans.
    """
    profile = load_model_profile(model, data_dir)
    if gpu_type not in profile.gpu_types:
        raise InputError("gpu_type", gpu_type, f"{model} is profiled in {data_dir} on {list(profile.gpu_types)} only")
    sizes = profile.microbatch_sizes(gpu_type)
    if plans is None:
        gbs = global_batch_size if global_batch_size is not None else 4 * max(sizes)
        plans = calibration_plans(model, profile.num_layers, sizes, gbs, processes, gpu_type, zone)
    if not plans:
        raise InputError("plans", plans, "need at least one calibration plan")
    counts = {} if rounds is None else {"rounds": rounds}  # None: each measurement's own default
    if interleaved:
        times = measure_interleaved(plans, task, config=config, progress=progress, **counts)
        return fit_runs(plans, times, data_dir, gpu_type=gpu_type, write=write, statistic=statistics.median)
    runs = measure_plans(plans, task, steps=steps, config=config, progress=progress, **counts)
    return fit_runs(plans, runs, data_dir, gpu_type=gpu_type, write=write)


def fit_runs(
    plans: Mapping[str, Plan], runs: Mapping[str, Sequence[float]], data_dir: str | Path, *,
    gpu_type: str = "cpu", write: bool = True, statistic: Callable[[Sequence[float]], float] = min,
) -> Calibration:
    """Fit the simulator to measured times of ``plans`` (seconds per iteration by label): each
    plan's ``statistic`` of its times (``min``: the fastest of :func:`measure_plans`'s runs;
    ``statistics.median`` for :func:`~heteroplan.runtime.interleave.measure_interleaved`'s
    iterations), from the directory's current constants; the constants of :func:`~heteroplan.planner.model.calibration.time_constants_for` the
    plans, never more than plans. The other time constants start from :data:`PROFILED_CONFIG`'s
    values (a refit keeps nothing of an older calibration's). With ``write``, the fit goes to
    ``data_dir/sim_config.json``.
    """
    width = max(p.num_gpus for p in plans.values())
    device = GPUType(gpu_type, memory_gb=1e6, gpus_per_node=max(width, 1))
    constants = time_constants_for(plans)[: len(plans)]
    stale = {c: getattr(PROFILED_CONFIG, c) for c in TIME_CONSTANTS if c not in constants}
    calibration = fit_sim_config(
        plans, [float(statistic(runs[name])) for name in plans], constants=constants,
        base=replace(load_sim_config(data_dir, gpu_type), **stale), data_dir=data_dir, gpu_types={gpu_type: device},
    )
    if write:
        calibration.config.write(data_dir, gpu_type)  # the platform's row of the constants table
    return calibration
