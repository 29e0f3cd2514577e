"""The planner's request: one job, the GPUs it may use, what to optimize, and the search knobs.

:class:`PlanRequest` is what every planner entry point takes (:func:`heteroplan.planner.api.plan`,
the :class:`~heteroplan.planner.search.searcher.Searcher`, the baselines, the resource MILP); build it
with :meth:`PlanRequest.build`, which validates the arguments and loads the profile, network
and simulator constants. ``dataclasses.replace`` gives variants (another pool, another
:class:`~heteroplan.planner.goal.Goal`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from heteroplan.cluster import SAILOR_GPU_TYPES, Cluster, GPUType
from heteroplan.errors import InputError
from heteroplan.inputs import enum_choice, is_count, strict_int
from heteroplan.perf.sailor_network import NetworkModel, load_network
from heteroplan.perf.sailor_profiles import ModelProfile, load_model_profile
from heteroplan.planner.goal import Goal, Objective
from heteroplan.planner.model.sim_config import (
    SHIPPED_PLATFORMS,
    PlatformConfigs,
    SimConfig,
    as_platforms,
    load_platforms,
)
from heteroplan.planner.model.simulator import check_model_inputs
from heteroplan.planner.plan import MAX_BATCH, OptimizerSharding, Recomputation

__all__ = ["SearchOptions", "PlanRequest", "normalize_pool"]

Pool = tuple[str, str]  # (gpu_type, zone)


@dataclass(frozen=True)
class SearchOptions:
    """Knobs of the search.

    Attributes:
        max_pp: deepest pipeline tried (default: min(layers, 16)).
        max_blocks: (type, zone) blocks per pipeline: 1 = homogeneous pipelines only, 2, or 3
            (three-block pipelines: with pruning, over three distinct pools, one chain per
            sequence of GPU types, around the best plan's microbatch size and ``dp``).
        span_zones: also homogeneous pipelines whose data-parallel replicas span zones of one
            GPU type (the all-reduce ring crosses the zone links; priced in time and egress).
        mixed_stages: also plans whose stages mix two pipeline kinds (e.g. A100 and V100 replicas
            in one stage, faster replicas running more microbatches; :mod:`heteroplan.planner.search.mixed_stages`).
            Exact scan without pruning; with pruning, kinds added on the GPUs the best plan leaves idle.
            Needs ``max_blocks >= 2`` (``max_blocks=1`` asks for one (type, zone) per plan).
        microbatch_sizes: restrict the microbatch sizes (default: all profiled).
        prune: apply Sailor's pruning (False scans the whole space; slower).
        patience: dp / pp values without improvement before the scan stops.
        max_split_dp_calls: cap on threshold DP calls per layout (None = exact).
        narrow_with_milp: first choose GPUs per (type, zone) with the resource MILP
            (:mod:`heteroplan.formulations.sailor`) and search only that part of the pool
            (falls back to the whole pool if nothing fits there).
        config: simulator constants, one for every GPU type or a table per type (default: the shipped table).
        recompute: activation recomputation of every stage of the plans searched (``FULL`` needs a
            profile that measured memory: ``profile_layers`` / ``heteroplan profile``).
            :func:`~heteroplan.planner.plan_job` tries ``FULL`` by itself when no plan fits
            memory without it.
        optimizer_sharding: the optimizer-state sharding the search may give a stage with several
            replicas (``ZERO1``, the default: where it fits and keeping the whole state does not, or
            where it is faster; only ``tp == 1`` stages, which the runtime shards; needs a profile
            that measured memory) or ``NONE`` (never).
    """

    max_pp: int | None = None
    max_blocks: int = 3
    span_zones: bool = True
    mixed_stages: bool = True
    microbatch_sizes: tuple[int, ...] | None = None
    prune: bool = True
    patience: int = 2
    max_split_dp_calls: int | None = 4096
    narrow_with_milp: bool = False
    config: SimConfig | PlatformConfigs = SHIPPED_PLATFORMS
    recompute: Recomputation = Recomputation.NONE
    optimizer_sharding: OptimizerSharding = OptimizerSharding.ZERO1

    def __post_init__(self) -> None:  # as the CLI refuses --max-pp 0: checked where the options enter
        if self.max_pp is not None:
            strict_int("options.max_pp", self.max_pp, 1)
        if not 1 <= strict_int("options.max_blocks", self.max_blocks, 1) <= 3:
            raise InputError("options.max_blocks", self.max_blocks, "must be 1, 2 or 3")
        strict_int("options.patience", self.patience, 1)
        if self.max_split_dp_calls is not None:
            strict_int("options.max_split_dp_calls", self.max_split_dp_calls, 1)
        if self.microbatch_sizes is not None:
            if isinstance(self.microbatch_sizes, str | bytes) or not isinstance(self.microbatch_sizes, Iterable):
                raise InputError("options.microbatch_sizes", self.microbatch_sizes, "must be a list of sizes or None")
            object.__setattr__(self, "microbatch_sizes", tuple(
                strict_int("options.microbatch_sizes", size, 1) for size in self.microbatch_sizes))
        as_platforms(self.config)  # a SimConfig or a PlatformConfigs, refused by name otherwise
        object.__setattr__(self, "recompute", enum_choice(Recomputation, "options.recompute", self.recompute))
        object.__setattr__(self, "optimizer_sharding",
                           enum_choice(OptimizerSharding, "options.optimizer_sharding", self.optimizer_sharding))
        for name in ("span_zones", "mixed_stages", "prune", "narrow_with_milp"):
            if not isinstance(getattr(self, name), bool):
                raise InputError(f"options.{name}", getattr(self, name), "must be True or False")


@dataclass(frozen=True)
class PlanRequest:
    """One planning request, validated and with its data loaded.

    Attributes:
        profile: the model's layer profiles.
        network: the network model (bandwidth, latency per zone pair).
        gpu_types: GPU catalog by name (memory GB, GPUs per node, $/h).
        pool: GPUs that may be rented, ``{(gpu_type, zone): count}`` (profiled types only, > 0).
        gbs: global batch size (samples per iteration).
        goal: what to optimize and under which bound (:class:`~heteroplan.planner.goal.Goal`: max
            iter/s under an optional budget in $/iteration, or min $/iteration under an optional
            floor in iter/s).
        options: search knobs.
    """

    profile: ModelProfile
    network: NetworkModel
    gpu_types: Mapping[str, GPUType]
    pool: Mapping[Pool, int]
    gbs: int
    goal: Goal = Goal()
    options: SearchOptions = SearchOptions()

    def __post_init__(self) -> None:
        object.__setattr__(self, "gbs", _check_gbs(self.gbs))
        if not isinstance(self.goal, Goal):
            raise InputError("goal", type(self.goal).__name__, "must be a Goal (objective, budget, min_throughput)")

    @classmethod
    def build(
        cls,
        model: str,
        gbs: int,
        pool: Cluster | Mapping[Pool, int],
        goal: Goal | Objective | str | None = None,
        *,
        gpu_types: tuple[GPUType, ...] = SAILOR_GPU_TYPES,
        options: SearchOptions | None = None,
        network: NetworkModel | None = None,
        data_dir: str | Path | None = None,
    ) -> PlanRequest:
        """Validate the arguments of :func:`~heteroplan.planner.api.plan_job` and load their data.

        ``goal``: a :class:`~heteroplan.planner.goal.Goal`, or an objective alone (no bound); default
        ``Goal()``, the most iterations/s at any cost. ``options`` default to ``SearchOptions()``
        with the simulator constants of ``data_dir`` (its ``sim_config.json``) when one is given;
        ``network`` defaults to ``data_dir``'s.
        """
        if goal is None:
            goal = Goal()
        elif isinstance(goal, str):  # an objective alone (Objective is a StrEnum)
            goal = Goal(goal)
        elif not isinstance(goal, Goal):
            raise InputError("goal", type(goal).__name__, "must be a Goal, an Objective or its value")
        gbs = _check_gbs(gbs)  # before loading anything
        check_model_inputs(None, network)
        profile = load_model_profile(model, data_dir)
        counts, types = normalize_pool(pool, _catalog(gpu_types))
        usable = {k: v for k, v in counts.items() if k[0] in profile.gpu_types and v > 0}
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
        elif not isinstance(options, SearchOptions):
            raise InputError("options", type(options).__name__, "must be a SearchOptions or None")
        return cls(profile, network, types, usable, gbs, goal, options)

    def unconstrained(self, objective: Objective | str) -> PlanRequest:
        """The same request with ``objective`` and neither budget nor throughput floor."""
        return replace(self, goal=Goal(objective))


def _check_gbs(gbs: object) -> int:
    """``gbs`` as an ``int`` (numpy's integers taken) in ``[1, MAX_BATCH]``."""
    if not is_count(gbs) or gbs < 1:
        raise InputError("gbs", gbs, "must be an integer >= 1")
    if gbs > MAX_BATCH:  # type: ignore[operator]  # a plan file holds no more: the plan could not be written and run
        raise InputError("gbs", gbs, f"must be at most {MAX_BATCH:,} samples per iteration (what a plan file holds)")
    return int(gbs)  # type: ignore[call-overload]


def _catalog(gpu_types: object) -> dict[str, GPUType]:
    """The GPU catalog ``gpu_types`` (GPUType objects) by name."""
    if isinstance(gpu_types, str | GPUType) or not isinstance(gpu_types, Iterable):
        raise InputError("gpu_types", gpu_types, "must be a tuple of GPUType")
    catalog = {}
    for t in gpu_types:
        if not isinstance(t, GPUType):
            raise InputError("gpu_types", t, "each entry must be a GPUType")
        catalog[t.name] = t
    return catalog


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
            if not is_count(n) or n < 0:
                raise InputError(f"pool[{key!r}]", n, "GPU count must be an integer >= 0")
            counts[key] = counts.get(key, 0) + int(n)
    else:
        raise InputError("pool", type(pool).__name__, "give a Cluster or a dict {(gpu_type, zone): count}")
    for t, _ in counts:
        if t not in types:
            raise InputError("pool.gpu_type", t, f"unknown GPU type; known: {sorted(types)}")
    if sum(counts.values()) == 0:
        raise InputError("pool", dict(counts), "no GPUs available")
    return counts, types
