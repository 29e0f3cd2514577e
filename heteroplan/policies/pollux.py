"""Pollux (OSDI'21) as the Sia paper runs it: goodput-optimizing but heterogeneity-unaware.

Pollux maximizes the fitness ``((1/J) sum_j speedup_j ** p) ** (1/p)`` with ``p = -1``,
``speedup_j`` = goodput on the chosen GPUs over goodput on one GPU. It does not know that GPU
types differ: every job's goodput is estimated as if all GPUs were of one reference type (the
type the job runs on, else the first one its model knows). We solve Pollux's problem exactly
with the same multiple-choice ILP as Sia over one pooled GPU kind (minimizing
``sum speedup ** -1`` is equivalent to maximizing the p = -1 fitness); Pollux itself uses a
genetic algorithm, so this is the best Pollux could do with its model. Placement is type-blind.

:class:`PolluxPolicy` runs that problem (the ``"pooled-type"`` mechanism, ``pollux``).
:class:`~heteroplan.policies.pollux_artifact.PolluxArtifactPolicy` (``pollux-sia``; its own
module, a subclass with the artifact's defaults and placement) is the Sia artifact's heterogeneity-unaware Pollux:
the cluster is pooled into identical 4-GPU virtual nodes (8-GPU nodes split in two), a job gets
at most 16 replicas, its replicas are packed onto the fewest virtual nodes, largest jobs first,
the virtual nodes taken in a seeded random order (``vnode_order="shuffled"``: the artifact's
genetic algorithm is type-blind and has no node preference; ``"node"``: cluster order), and an
allocation spanning GPU types keeps only the GPUs of its majority type (ties: the faster type,
as the artifact's ``prio_order``): the dropped GPUs stay idle and are not counted, and what is
kept is the job's allocation from then on (the artifact's base state is its repaired
allocation; a job keeping its GPU count keeps its virtual nodes). Its jobs pay their
application's restore delay (cifar10 50 s, deepspeech2 25 s, yolov3 80 s, bert 120 s, imagenet
250 s: the artifact's ``rescale_time``, as under Sia), while its fitness prices every restart at
30 s (``restart_price_s``: the artifact GA's ``delay = 30``), and a job restoring a checkpoint is
not pinned (``pin_restoring=False``: the artifact's jobs are all preemptible). The optimiser plans each job with the
artifact's merged profile (``merged_profile=True``, the default there): one throughput fit per
job across GPU types, the first observation of a (nodes, GPUs, local batch) shape winning, a
linear speed-up before any observation (:mod:`heteroplan.policies.pollux_profile`); the
simulator still runs the job at the true rate of the GPUs it holds. The optimiser is the exact ILP above, not the
artifact's genetic algorithm. Its fitness is the artifact's (``speedup_base="fair-share"``, the
default for ``pollux-sia``): speed-ups against the goodput of a fair share (GPUs / active jobs,
rounded up, at most the 16 GPUs a job may hold, on one node), 250 per job without GPUs (the artifact's ``1 / (0 + 1e-3)``), and
``restart_unallocated`` (default on for ``pollux-sia``) scales a job without GPUs by its restart
factor, as the artifact's GA penalizes every state that differs from the job's (empty) base
state. Under load this fitness gives every job GPUs before it gives any job more (an admitted
job is worth about 250 against at most a few for a doubling); ``"one-gpu"`` (the default of
:class:`PolluxPolicy`) measures speed-ups against one GPU with ``lam = 1.1`` per job
without GPUs, which queues jobs under load (see docs/sia.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

import numpy as np

from heteroplan.cluster import Cluster
from heteroplan.errors import InputError, check_seconds
from heteroplan.formulations.sia import (
    ConfigSet,
    SiaResult,
    build_sia_model,
    check_utility,
    restart_factor,
)
from heteroplan.inputs import enum_choice
from heteroplan.perf.protocols import RecordsObservations
from heteroplan.policies.base import Allocation, JobState, PerfModel
from heteroplan.policies.common import GoodputCache, ScaleFrom, choosable_columns, place_blind
from heteroplan.policies.pollux_profile import MergedProfile, ProfileState
from heteroplan.policies.sia_solve import SolveMode, check_solve_options, solve_sia
from heteroplan.policies.state import GeneratorState, PolicyState, expect_state

__all__ = ["PolluxPolicy", "PolluxState", "SpeedupBase", "fair_share_goodput"]

# The artifact's fitness term for a job without GPUs, 1 / (0 + 1e-3), in units of 1 / speed-up
# (its speed-ups are scaled by virtual nodes / GPUs = 1/4): with speed-ups relative to a fair
# share a job's 1-GPU term exceeds 1, so Sia's lambda = 1.1 would leave jobs unscheduled.
FAIR_SHARE_LAMBDA = 250.0


class SpeedupBase(StrEnum):
    """What a job's speed-ups in Pollux's fitness are measured against."""

    ONE_GPU = "one-gpu"  # its goodput on one GPU (Pollux's own; lam = 1.1 per job without GPUs)
    FAIR_SHARE = "fair-share"  # its goodput on a fair share (the Sia artifact's; lam = 250)


@dataclass(frozen=True)
class PolluxState(PolicyState):
    """What Pollux remembers between rounds (:meth:`PolluxPolicy.state`).

    Attributes:
        virtual_nodes: per job, the (virtual node index, GPUs) pairs it holds (kept while its GPU
            count stays; :class:`~heteroplan.policies.pollux_artifact.PolluxArtifactPolicy` only).
        profiles: per job, its merged profile (``merged_profile=True``).
        rng: the generator that orders the virtual nodes (``PolluxArtifactPolicy`` with
            ``vnode_order="shuffled"``; ``None``: a policy drawing no random numbers).
    """

    virtual_nodes: Mapping[str, tuple[tuple[int, int], ...]]
    profiles: Mapping[str, ProfileState]
    rng: GeneratorState | None

    def to_json(self) -> dict[str, Any]:
        return {"virtual_nodes": {j: [list(p) for p in parts] for j, parts in self.virtual_nodes.items()},
                "profiles": {j: p.to_json() for j, p in self.profiles.items()},
                "rng": None if self.rng is None else self.rng.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PolluxState:
        rng = data["rng"]
        return cls({str(j): tuple((int(v), int(c)) for v, c in parts) for j, parts in data["virtual_nodes"].items()},
                   {str(j): ProfileState.from_json(p) for j, p in data["profiles"].items()},
                   None if rng is None else GeneratorState.from_json(rng))


@dataclass
class PolluxPolicy:
    """Heterogeneity-unaware goodput optimization (Pollux fitness, p = -1) over one pooled GPU kind.

    ``scale_up`` / ``scale_up_from``: at most ``scale_up`` x the most GPUs the job has run on
    (``"max"``, Pollux's simulator: 2 x the largest profiled replica count) or x its current
    allocation (``"current"``). ``speedup_base``: a :class:`SpeedupBase` (or its value);
    ``lam``: the penalty per job without GPUs (``None``: 1.1 for ``"one-gpu"``, 250 for
    ``"fair-share"``). ``merged_profile``: plan with the artifact's one profile per job
    (:mod:`heteroplan.policies.pollux_profile`). ``restart_unallocated``: a job without GPUs
    pays its restart factor too (``"fair-share"`` only). ``restart_price_s``: seconds the
    restart factor prices a restart at (``None``: what the job pays, its ``restart_delay``).
    ``pin_restoring``: a job restoring a checkpoint keeps its allocation. :attr:`mechanism` is
    the class's own (``"pooled-type"``; the Sia artifact's is
    :class:`~heteroplan.policies.pollux_artifact.PolluxArtifactPolicy`, the registry's
    ``mechanism`` option picks the class).

    ``mode``, ``auto_limit``, ``threads``, ``time_limit`` and ``mip_gap`` choose the solve as
    :class:`~heteroplan.policies.sia.SiaPolicy`'s do (default ``"auto"``: the LP relaxation
    rounded, kept when its gap to the LP bound is at most ``mip_gap``, else the MILP);
    ``last_result`` holds the latest round's :class:`~heteroplan.formulations.sia.SiaResult`
    (which solve chose, objective, bound and gap).
    """

    p: float = -1.0
    lam: float | None = None
    scale_up: float = 2.0
    scale_up_from: ScaleFrom = ScaleFrom.MAX
    mode: SolveMode = SolveMode.AUTO
    auto_limit: int | None = 20_000
    threads: int | None = None
    time_limit: float = 10.0
    mip_gap: float = 1e-3
    name: str = "pollux"
    round_length: float = 60.0
    elastic: bool = True
    forking: bool = False
    speedup_base: SpeedupBase | str = SpeedupBase.ONE_GPU
    merged_profile: bool = False
    restart_unallocated: bool = False
    restart_price_s: float | None = None
    pin_restoring: bool = True
    last_result: SiaResult | None = field(default=None, repr=False)
    _cache: dict[int, ConfigSet] = field(default_factory=dict, repr=False)
    _profiles: dict[str, MergedProfile] = field(default_factory=dict, repr=False)
    _goodputs: GoodputCache = field(default_factory=GoodputCache, repr=False)

    MECHANISM: ClassVar[str] = "pooled-type"  # the ``mechanism`` this class runs

    def __post_init__(self) -> None:
        check_seconds("time_limit", self.time_limit)
        check_seconds("round_length", self.round_length)
        self.mode = check_solve_options(self.mode, self.threads, self.auto_limit, self.mip_gap)
        self.scale_up_from = enum_choice(ScaleFrom, "scale_up_from", self.scale_up_from)
        self.speedup_base = enum_choice(SpeedupBase, "speedup_base", self.speedup_base)
        for flag in ("merged_profile", "restart_unallocated", "pin_restoring"):
            if not isinstance(getattr(self, flag), bool):
                raise InputError(flag, getattr(self, flag), "must be true or false")
        if self.restart_price_s is not None:
            check_seconds("restart_price_s", self.restart_price_s)
        if self.lam is None:
            self.lam = FAIR_SHARE_LAMBDA if self.speedup_base is SpeedupBase.FAIR_SHARE else 1.1
        check_utility(self.p, self.lam)

    @property
    def mechanism(self) -> str:
        """The name of this class's mechanism (``"pooled-type"`` or ``"sia-artifact"``)."""
        return self.MECHANISM

    @property
    def profiles(self) -> Mapping[str, MergedProfile]:
        """Per job, the merged profile it is planned with (``merged_profile=True``)."""
        return self._profiles

    def state(self) -> PolluxState:
        """What the policy remembers between rounds: each job's merged profile; a copy."""
        return PolluxState({}, {j: p.snapshot() for j, p in self._profiles.items()}, None)

    def restore_state(self, state: PolicyState) -> None:
        """Continue from ``state`` (a :meth:`state` of a Pollux policy with the same options)."""
        state = expect_state(state, PolluxState, self.name)
        self._profiles = {j: MergedProfile.restore(p) for j, p in state.profiles.items()}

    def pool_shape(self, cluster: Cluster) -> tuple[int, int]:
        """(most GPUs a job may ask for, GPUs per pooled node) of the pooled configurations.

        Jobs run on one type (placement is type-blind), so no job asks for more GPUs than the
        largest type holds; the capacity row is still the whole cluster."""
        return max(cluster.capacity().values()), max(t.gpus_per_node for t in cluster.gpu_types)

    def pooled(self, cluster: Cluster) -> ConfigSet:
        """The configurations of one pooled GPU kind the optimiser chooses from (kept per cluster)."""
        key = id(cluster)
        if key not in self._cache:
            self._cache = {key: ConfigSet.pooled(*self.pool_shape(cluster))}
        return self._cache[key]

    def place(self, cluster: Cluster, jobs: Sequence[JobState], counts: dict[str, int]) -> dict[str, Allocation]:
        """Where each job's chosen GPU count goes: type-blind, on one type
        (:func:`~heteroplan.policies.common.place_blind`)."""
        return place_blind(cluster, jobs, counts)

    def merged_view(self, job: JobState, cluster: Cluster) -> JobState:
        """``job`` with the artifact's merged profile as its estimator (see
        :mod:`heteroplan.policies.pollux_profile`), updated with its new observations; unchanged
        when its estimator does not record observations (an oracle model)."""
        est = job.estimator
        if not isinstance(est, RecordsObservations):
            return job
        types = cluster.type_names
        profile = self._profiles.get(job.job_id)
        if profile is None:
            profile = self._profiles[job.job_id] = MergedProfile.start(est, types)
        profile.update(est, types)
        return job.with_estimator(profile.model(est, types))

    def allocate(self, cluster: Cluster, jobs: Sequence[JobState], now: float) -> dict[str, Allocation]:
        if not jobs or cluster.num_gpus == 0:  # nothing to give (an empty cluster has no configurations)
            self.last_result = None  # no solve this round
            return {}
        configs = self.pooled(cluster)
        if self.merged_profile:
            self._profiles = {j.job_id: self._profiles[j.job_id] for j in jobs if j.job_id in self._profiles}
            jobs = [self.merged_view(job, cluster) for job in jobs]
        fair_share = self.speedup_base is SpeedupBase.FAIR_SHARE
        G, base = self._goodput_rows(cluster, jobs, configs, fair_share)
        current = np.array([configs.index_of("any", j.allocation.num_gpus) if j.allocation else -1 for j in jobs])
        restart = restart_factor(
            np.array([now - j.arrival_time for j in jobs]),
            np.array([j.num_restarts for j in jobs]),
            np.array([j.restart_delay if self.restart_price_s is None else self.restart_price_s for j in jobs]),
        )
        if self.restart_unallocated and fair_share:
            # The artifact's GA penalizes every state that differs from the job's base state,
            # and a job without GPUs has an empty one: its every configuration is a restart.
            # Speed-ups are relative to ``base`` here, so scaling the row scales them.
            G *= np.where(current < 0, restart, 1.0)[:, None]
        pinned = np.array([j.restoring and self.pin_restoring for j in jobs], dtype=bool)
        capacity = np.array([float(cluster.num_gpus)])
        problem = build_sia_model(G, configs, capacity, current, restart, pinned, self.p, float(self.lam or 0.0),
                                  base if fair_share else None)
        result = solve_sia(problem, self.mode, self.time_limit, self.mip_gap, self.threads, self.auto_limit)
        self.last_result = result
        counts = {j.job_id: int(configs.num_gpus[c]) for j, c in zip(jobs, result.choice, strict=True) if c >= 0}
        return self.place(cluster, jobs, counts)

    def _goodput_rows(self, cluster: Cluster, jobs: Sequence[JobState], configs: ConfigSet,
                      fair_share: bool) -> tuple[np.ndarray, np.ndarray]:
        """(jobs, configurations) goodputs as if every configuration were of the job's reference
        type (the one it runs on, else the first its model knows), and, with ``fair_share``,
        each job's goodput on a fair share (estimator units/s; kept across rounds)."""
        G = np.zeros((len(jobs), len(configs)))
        base = np.zeros(len(jobs))
        # The artifact's fair share, ceil(GPUs / jobs), capped at the most GPUs a job may hold:
        # the same on its 64-GPU cluster with 4 or more jobs; uncapped, a 1-GPU job on a
        # 1536-GPU cluster would be worth less to the fitness than leaving it without GPUs.
        fair = min(math.ceil(cluster.num_gpus / len(jobs)), int(configs.num_gpus.max()))
        cache = self._goodputs
        cache.keep_only([j.job_id for j in jobs])
        for i, job in enumerate(jobs):
            if job.estimator is None:
                continue
            ref = job.allocation.gpu_type if job.allocation else _first_type(job, cluster)
            cols = choosable_columns(job, configs, self.scale_up, self.scale_up_from)
            if len(cols):  # goodputs as if every configuration were of type ``ref``, kept across rounds
                G[i, cols] = cache.row(job, configs, cols, cache.typed_names(configs, ref))
            if fair_share:
                base[i] = cache.value(job, (ref, fair), lambda job=job, ref=ref: fair_share_goodput(job, ref, fair))
        return G, base


def _first_type(job: JobState, cluster: Cluster) -> str:
    # A user's model may answer goodput() alone (a GoodputRate, as the session takes): it runs on every type.
    known = (job.estimator.gpu_types if isinstance(job.estimator, PerfModel) else ()) or cluster.type_names
    for t in cluster.type_names:
        if t in known:
            return t
    return cluster.type_names[0]


def fair_share_goodput(job: JobState, gpu_type: str, fair_gpus: int) -> float:
    """Goodput (estimator units/s) of ``job`` on ``fair_gpus`` GPUs of ``gpu_type`` in one node: the
    Sia artifact's Pollux measures speed-ups against this fair share (GPUs / active jobs, rounded
    up, on one node); 0 when the estimator has none."""
    if job.estimator is None:
        return 0.0
    value = np.asarray(job.estimator.goodput(np.array([gpu_type], dtype=object), np.array([1]),
                                             np.array([fair_gpus]), progress=job.progress), dtype=float)
    return float(value.reshape(-1)[0]) if value.size and np.isfinite(value.reshape(-1)[0]) else 0.0
