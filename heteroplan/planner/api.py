"""Public entry point of the Sailor planner: :func:`plan_job`."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from heteroplan._html import table
from heteroplan.cluster import SAILOR_GPU_TYPES, Cluster, GPUType
from heteroplan.errors import InfeasibleError, InputError
from heteroplan.perf.sailor_network import NetworkModel, load_network
from heteroplan.perf.sailor_profiles import load_model_profile
from heteroplan.planner.plan import Plan
from heteroplan.planner.search import Searcher, SearchOptions
from heteroplan.planner.sim_config import load_platforms
from heteroplan.planner.simulator import simulate

_log = logging.getLogger(__name__)

__all__ = ["PlanResult", "plan_job", "normalize_pool", "OBJECTIVES"]

OBJECTIVES = ("throughput", "cost")


@dataclass(frozen=True)
class PlanResult:
    """The plan found and what the simulator predicts for it.

    Attributes:
        plan: the training plan.
        iteration_time: seconds per iteration.
        throughput: iterations per second.
        cost_per_iteration: $ per iteration (GPU rental + egress).
        memory_per_gpu: peak GB per GPU of each stage.
        search_time: seconds the search took.
        evaluated: block layouts whose layer split was optimized.
    """

    plan: Plan
    iteration_time: float
    throughput: float
    cost_per_iteration: float
    memory_per_gpu: tuple[float, ...]
    search_time: float
    evaluated: int = 0
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def peak_memory_gb(self) -> float:
        return max(self.memory_per_gpu)

    def to_dict(self) -> dict[str, Any]:
        return {
            "plan": self.plan.to_dict(),
            "iteration_time_s": self.iteration_time,
            "throughput_iter_s": self.throughput,
            "cost_per_iteration": self.cost_per_iteration,
            "memory_per_gpu_gb": list(self.memory_per_gpu),
            "peak_memory_gb": self.peak_memory_gb,
            "search_time_s": self.search_time,
            "evaluated": self.evaluated,
            "gpus": {f"{t}@{z}": n for (t, z), n in self.plan.gpus_by_type_zone().items()},
            "uncalibrated_gpu_types": list(self.extra.get("uncalibrated_gpu_types", [])),
        }

    def describe(self) -> str:
        lines = [self.plan.describe()]
        lines.append(
            f"  predicted: {self.iteration_time:.4g} s/iteration = {self.throughput:.4g} iter/s, "
            f"${self.cost_per_iteration:.4g}/iteration, peak memory {self.peak_memory_gb:.3g} GB/GPU "
            f"(per stage: {', '.join(f'{m:.3g}' for m in self.memory_per_gpu)})"
        )
        lines.append(f"  search: {self.search_time:.3g} s, {self.evaluated} layouts")
        if self.extra.get("uncalibrated_gpu_types"):
            lines.append("  no simulator calibration for " + ", ".join(self.extra["uncalibrated_gpu_types"])
                         + ": predicted with the uncalibrated default constants")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        metrics = table(
            ("iteration time (s)", "throughput (iter/s)", "$/iteration", "peak memory (GB/GPU)", "search (s)"),
            [(self.iteration_time, self.throughput, self.cost_per_iteration, f"{self.peak_memory_gb:.3g}",
              f"{self.search_time:.3g}")],
        )
        return self.plan.html_title() + metrics + self.plan.html_table(self.memory_per_gpu)


def normalize_pool(
    pool: Cluster | Mapping[tuple[str, str], int], gpu_types: Mapping[str, GPUType]
) -> tuple[dict[tuple[str, str], int], dict[str, GPUType]]:
    """``{(type, zone): count}`` and the GPU types, from a Cluster or a dict; validated."""
    types = dict(gpu_types)
    if isinstance(pool, Cluster):
        types.update({t.name: t for t in pool.gpu_types})
        counts = pool.capacity_by_zone()
    elif isinstance(pool, Mapping):
        counts = {}
        for key, n in pool.items():
            if not (isinstance(key, tuple) and len(key) == 2 and all(isinstance(x, str) for x in key)):
                raise InputError("pool", key, "keys must be (gpu_type, zone) tuples")
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise InputError(f"pool[{key!r}]", n, "GPU count must be an integer >= 0")
            counts[key] = counts.get(key, 0) + n
    else:
        raise InputError("pool", type(pool).__name__, "give a Cluster or a dict {(gpu_type, zone): count}")
    for t, _ in counts:
        if t not in types:
            raise InputError("pool.gpu_type", t, f"unknown GPU type; known: {sorted(types)}")
    if sum(counts.values()) == 0:
        raise InputError("pool", dict(counts), "no GPUs available")
    return counts, types


def plan_job(
    model: str,
    gbs: int,
    pool: Cluster | Mapping[tuple[str, str], int],
    objective: str = "throughput",
    budget: float | None = None,
    min_throughput: float | None = None,
    *,
    gpu_types: tuple[GPUType, ...] = SAILOR_GPU_TYPES,
    options: SearchOptions | None = None,
    network: NetworkModel | None = None,
    data_dir: str | Path | None = None,
) -> PlanResult:
    """Find the best training plan of ``model`` with global batch ``gbs`` over ``pool``.

    Args:
        model: a model with profiles in ``data_dir``
            (``heteroplan.perf.sailor_profiles.available_models(data_dir)``).
        gbs: global batch size (samples per iteration).
        pool: GPUs that can be rented, as a Cluster or ``{(gpu_type, zone): count}``.
        objective: ``"throughput"`` (max iter/s, optionally under ``budget`` $/iteration) or
            ``"cost"`` (min $/iteration, optionally under a floor ``min_throughput`` iter/s).
        gpu_types: GPU catalog (memory, GPUs per node, $/h).
        options: search knobs; default ``SearchOptions()``, whose simulator constants are the
            shipped table per GPU type (``SHIPPED_PLATFORMS``) for shipped data and, when
            ``data_dir`` is given, its ``sim_config.json`` (``heteroplan profile --calibrate``) over
            ``PROFILED_CONFIG``; ``result.extra["uncalibrated_gpu_types"]`` names the plan's GPU types that had none.
        network: network model (default: that of ``data_dir``).
        data_dir: directory of profiles and network files written by
            :mod:`heteroplan.runtime.profiler` (default: the shipped Sailor data).

    Raises:
        InputError: bad arguments (names the field).
        InfeasibleError: no plan satisfies the request; ``reason`` says why.
    """
    if objective not in OBJECTIVES:
        raise InputError("objective", objective, f"must be one of {OBJECTIVES}")
    if isinstance(gbs, bool) or not isinstance(gbs, int) or gbs < 1:
        raise InputError("gbs", gbs, "must be an integer >= 1")
    for name, value in (("budget", budget), ("min_throughput", min_throughput)):
        if value is not None and (not isinstance(value, int | float) or not value > 0):
            raise InputError(name, value, "must be a number > 0")
    profile = load_model_profile(model, data_dir)
    counts, types = normalize_pool(pool, {t.name: t for t in gpu_types})
    usable = {k: v for k, v in counts.items() if k[0] in profile.gpu_types}
    if not usable:
        raise InputError(
            "pool", sorted({t for t, _ in counts}), f"no GPU type of the pool is profiled for {model}: {profile.gpu_types}"
        )
    network = network or load_network(data_dir)
    for _, z in usable:
        if z not in network.zones:
            raise InputError("pool.zone", z, f"no network measurements; known zones: {list(network.zones)}")
    if options is None:
        options = SearchOptions() if data_dir is None else SearchOptions(config=load_platforms(data_dir))
    t0 = time.perf_counter()
    extra: dict[str, Any] = {}
    search_pool = usable
    if options.narrow_with_milp:
        from heteroplan.formulations.sailor import choose_resources, narrow_pool, replica_kinds

        try:
            kinds = replica_kinds(profile, usable, gbs, types, network=network, config=options.config)
            choice = choose_resources(kinds, usable, gbs, objective, budget, min_throughput)
            search_pool = narrow_pool(choice, usable)
            extra["milp_gpus"] = {f"{t}@{z}": n for (t, z), n in choice.gpus.items()}
        except InfeasibleError:
            search_pool = usable
    try:
        best, stats = Searcher(profile, network, types, search_pool, gbs, objective, budget, min_throughput, options).run()
    except InfeasibleError:
        try:
            best, stats = Searcher(profile, network, types, usable, gbs, objective, budget, min_throughput, options).run()
        except InfeasibleError as exc:
            raise _explain(exc, profile, network, types, usable, gbs, objective, budget, min_throughput, options) from None
    sim = simulate(best.plan, profile=profile, network=network, gpu_types=types, config=options.config)
    if sim.uncalibrated:
        extra["uncalibrated_gpu_types"] = list(sim.uncalibrated)
        _log.warning("no simulator calibration for %s: planned with the uncalibrated default constants",
                     ", ".join(sim.uncalibrated))
    return PlanResult(
        best.plan,
        sim.iteration_time,
        sim.throughput,
        sim.cost_per_iteration,
        sim.memory_per_stage,
        time.perf_counter() - t0,
        stats["evaluated"],
        extra | {"search_iteration_time": best.iteration_time, "search_cost": best.cost_per_iteration},
    )


def _explain(
    exc: InfeasibleError, profile, network, types, pool, gbs, objective, budget, min_throughput, options
) -> InfeasibleError:
    """Sharpen a constrained infeasibility with the unconstrained optimum (one more search)."""
    if objective == "throughput" and budget is not None:
        try:
            cheapest, _ = Searcher(profile, network, types, pool, gbs, "cost", None, None, options).run()
        except InfeasibleError:
            return exc
        return InfeasibleError(
            f"no feasible plan: budget too small — the cheapest plan costs "
            f"${cheapest.cost_per_iteration:.4g}/iteration > budget ${budget:.4g}"
        )
    if objective == "cost" and min_throughput is not None:
        try:
            fastest, _ = Searcher(profile, network, types, pool, gbs, "throughput", None, None, options).run()
        except InfeasibleError:
            return exc
        return InfeasibleError(
            f"no feasible plan: throughput floor too high — the fastest plan reaches "
            f"{1 / fastest.iteration_time:.4g} iter/s < {min_throughput:.4g}"
        )
    return exc
