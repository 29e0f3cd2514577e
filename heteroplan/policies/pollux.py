"""Pollux (OSDI'21) as the Sia paper runs it: goodput-optimizing but heterogeneity-unaware.

Pollux maximizes the fitness ``((1/J) sum_j speedup_j ** p) ** (1/p)`` with ``p = -1``,
``speedup_j`` = goodput on the chosen GPUs over goodput on one GPU. It does not know that GPU
types differ: every job's goodput is estimated as if all GPUs were of one reference type (the
type the job runs on, else the first one its model knows). We solve Pollux's problem exactly
with the same multiple-choice ILP as Sia over one pooled GPU kind (minimizing
``sum speedup ** -1`` is equivalent to maximizing the p = -1 fitness); Pollux itself uses a
genetic algorithm, so this is the best Pollux could do with its model. Placement is type-blind.

``mechanism="sia-artifact"`` (``pollux-sia``) is the Sia artifact's heterogeneity-unaware Pollux:
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
default for ``sia-artifact``): speed-ups against the goodput of a fair share (GPUs / active jobs,
rounded up, at most the 16 GPUs a job may hold, on one node), 250 per job without GPUs (the artifact's ``1 / (0 + 1e-3)``), and
``restart_unallocated`` (default on for ``sia-artifact``) scales a job without GPUs by its restart
factor, as the artifact's GA penalizes every state that differs from the job's (empty) base
state. Under load this fitness gives every job GPUs before it gives any job more (an admitted
job is worth about 250 against at most a few for a doubling); ``"one-gpu"`` (the default of the
``"pooled-type"`` mechanism) measures speed-ups against one GPU with ``lam = 1.1`` per job
without GPUs, which queues jobs under load (see docs/sia.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from heteroplan.cluster import Cluster
from heteroplan.errors import InputError, check_seconds
from heteroplan.formulations.sia import ConfigSet, SiaResult, build_sia_model, restart_factor
from heteroplan.policies.base import Allocation, JobState
from heteroplan.policies.common import GoodputCache, choosable_columns, place_blind
from heteroplan.policies.pollux_profile import MergedProfile, ProfileState
from heteroplan.policies.sia_solve import check_solve_options, solve_sia
from heteroplan.policies.state import GeneratorState, PolicyState, expect_state

__all__ = ["PolluxPolicy", "PolluxState", "POLLUX_MECHANISMS"]

POLLUX_MECHANISMS = ("pooled-type", "sia-artifact")
SPEEDUP_BASES = ("one-gpu", "fair-share")
VNODE_ORDERS = ("node", "shuffled")
VIRTUAL_NODE_GPUS = 4  # the Sia artifact's Pollux sees 4-GPU nodes only
ARTIFACT_MAX_REPLICAS = 16
# The artifact's fitness term for a job without GPUs, 1 / (0 + 1e-3), in units of 1 / speed-up
# (its speed-ups are scaled by virtual nodes / GPUs = 1/4): with speed-ups relative to a fair
# share a job's 1-GPU term exceeds 1, so Sia's lambda = 1.1 would leave jobs unscheduled.
FAIR_SHARE_LAMBDA = 250.0
ARTIFACT_RESTART_PRICE_S = 30.0  # the artifact GA's restart penalty prices every restart at 30 s
ARTIFACT_KEEP_ORDER = ("dgx-ext", "azure", "quad", "rtx", "aws")  # ties keep the earlier type


@dataclass(frozen=True)
class PolluxState(PolicyState):
    """What Pollux remembers between rounds (:meth:`PolluxPolicy.state`); only the Sia artifact's
    mechanism (``pollux-sia``) fills it, ``"pooled-type"`` keeps nothing.

    Attributes:
        virtual_nodes: per job, the (virtual node index, GPUs) pairs it holds (kept while its GPU
            count stays).
        profiles: per job, its merged profile (``merged_profile=True``).
        rng: the generator that orders the virtual nodes (``vnode_order="shuffled"``).
    """

    virtual_nodes: Mapping[str, tuple[tuple[int, int], ...]]
    profiles: Mapping[str, ProfileState]
    rng: GeneratorState

    def to_json(self) -> dict[str, Any]:
        return {"virtual_nodes": {j: [list(p) for p in parts] for j, parts in self.virtual_nodes.items()},
                "profiles": {j: p.to_json() for j, p in self.profiles.items()}, "rng": self.rng.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PolluxState:
        return cls({str(j): tuple((int(v), int(c)) for v, c in parts) for j, parts in data["virtual_nodes"].items()},
                   {str(j): ProfileState.from_json(p) for j, p in data["profiles"].items()},
                   GeneratorState.from_json(data["rng"]))


@dataclass
class PolluxPolicy:
    """Heterogeneity-unaware goodput optimization (Pollux fitness, p = -1).

    ``scale_up`` / ``scale_up_from``: at most ``scale_up`` x the most GPUs the job has run on
    (``"max"``, Pollux's simulator: 2 x the largest profiled replica count) or x its current
    allocation (``"current"``). ``restart_price_s``: seconds the restart factor prices a
    restart at (``None``: what the job pays, its ``restart_delay``; ``sia-artifact``: 30 s).
    ``pin_restoring``: a job restoring a checkpoint keeps its allocation (default on, off for
    ``sia-artifact``).

    ``mode``, ``auto_limit``, ``threads``, ``time_limit`` and ``mip_gap`` choose the solve as
    :class:`~heteroplan.policies.sia.SiaPolicy`'s do (default ``"auto"``: the LP relaxation
    rounded, kept when its gap to the LP bound is at most ``mip_gap``, else the MILP);
    ``last_result`` holds the latest round's :class:`~heteroplan.formulations.sia.SiaResult`
    (which solve chose, objective, bound and gap).
    """

    p: float = -1.0
    lam: float | None = None
    scale_up: float = 2.0
    scale_up_from: str = "max"
    mode: str = "auto"
    auto_limit: int | None = 20_000
    threads: int | None = None
    time_limit: float = 10.0
    mip_gap: float = 1e-3
    name: str = "pollux"
    round_length: float = 60.0
    elastic: bool = True
    forking: bool = False
    mechanism: str = "pooled-type"
    speedup_base: str | None = None
    vnode_order: str | None = None
    seed: int = 0
    merged_profile: bool | None = None
    restart_unallocated: bool | None = None
    restart_price_s: float | None = None
    pin_restoring: bool | None = None
    last_result: SiaResult | None = field(default=None, repr=False)
    _cache: dict[int, ConfigSet] = field(default_factory=dict, repr=False)
    _intended: dict[str, tuple[tuple[int, int], ...]] = field(default_factory=dict, repr=False)
    _profiles: dict[str, MergedProfile] = field(default_factory=dict, repr=False)
    _goodputs: GoodputCache = field(default_factory=GoodputCache, repr=False)
    _rng: np.random.Generator = field(init=False, repr=False)

    def __post_init__(self) -> None:
        check_seconds("time_limit", self.time_limit)
        check_seconds("round_length", self.round_length)
        check_solve_options(self.mode, self.threads, self.auto_limit, self.mip_gap)
        if self.mechanism not in POLLUX_MECHANISMS:
            raise InputError("mechanism", self.mechanism, f"choose one of {list(POLLUX_MECHANISMS)}")
        if self.speedup_base is None:
            self.speedup_base = "fair-share" if self.mechanism == "sia-artifact" else "one-gpu"
        if self.speedup_base not in SPEEDUP_BASES:
            raise InputError("speedup_base", self.speedup_base, f"choose one of {list(SPEEDUP_BASES)}")
        if self.vnode_order is None:
            self.vnode_order = "shuffled" if self.mechanism == "sia-artifact" else "node"
        if self.vnode_order not in VNODE_ORDERS:
            raise InputError("vnode_order", self.vnode_order, f"choose one of {list(VNODE_ORDERS)}")
        if self.merged_profile is None:
            self.merged_profile = self.mechanism == "sia-artifact"
        if not isinstance(self.merged_profile, bool):
            raise InputError("merged_profile", self.merged_profile, "must be true or false")
        if self.restart_unallocated is None:
            self.restart_unallocated = self.mechanism == "sia-artifact"
        if not isinstance(self.restart_unallocated, bool):
            raise InputError("restart_unallocated", self.restart_unallocated, "must be true or false")
        if self.restart_price_s is None and self.mechanism == "sia-artifact":
            self.restart_price_s = ARTIFACT_RESTART_PRICE_S
        if self.restart_price_s is not None:
            check_seconds("restart_price_s", self.restart_price_s)
        if self.pin_restoring is None:
            self.pin_restoring = self.mechanism != "sia-artifact"
        if not isinstance(self.pin_restoring, bool):
            raise InputError("pin_restoring", self.pin_restoring, "must be true or false")
        if self.lam is None:
            self.lam = FAIR_SHARE_LAMBDA if self.speedup_base == "fair-share" else 1.1
        if isinstance(self.lam, bool) or not isinstance(self.lam, (int, float)) or not (0 < self.lam < math.inf):
            raise InputError("lam", self.lam, "must be a penalty > 0 per job without GPUs")
        if isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)) or self.seed < 0:
            raise InputError("seed", self.seed, "must be an integer >= 0")
        self._rng = np.random.default_rng(self.seed)

    def state(self) -> PolluxState:
        """What the policy remembers between rounds: each job's virtual nodes and merged profile,
        and where its random generator stands; a copy."""
        return PolluxState(dict(self._intended), {j: p.snapshot() for j, p in self._profiles.items()},
                           GeneratorState.of(self._rng))

    def restore_state(self, state: PolicyState) -> None:
        """Continue from ``state`` (a :meth:`state` of a Pollux policy with the same options)."""
        state = expect_state(state, PolluxState, self.name)
        self._intended = dict(state.virtual_nodes)
        self._profiles = {j: MergedProfile.restore(p) for j, p in state.profiles.items()}
        self._rng = state.rng.generator()

    def _pooled(self, cluster: Cluster) -> ConfigSet:
        key = id(cluster)
        if key not in self._cache and self.mechanism == "sia-artifact":
            largest = min(cluster.num_gpus, ARTIFACT_MAX_REPLICAS)
            self._cache = {key: ConfigSet.pooled(largest, VIRTUAL_NODE_GPUS)}
        if key not in self._cache:
            # Jobs run on one type (placement is type-blind), so no job asks for more GPUs than
            # the largest type holds; the capacity row is still the whole cluster.
            per_node = max(t.gpus_per_node for t in cluster.gpu_types)
            largest = max(cluster.capacity().values())
            self._cache = {key: ConfigSet.pooled(largest, per_node)}
        return self._cache[key]

    def allocate(self, cluster: Cluster, jobs: Sequence[JobState], now: float) -> dict[str, Allocation]:
        if not jobs or cluster.num_gpus == 0:  # nothing to give (an empty cluster has no configurations)
            self.last_result = None  # no solve this round
            return {}
        configs = self._pooled(cluster)
        if self.merged_profile:
            self._profiles = {j.job_id: self._profiles[j.job_id] for j in jobs if j.job_id in self._profiles}
            jobs = [self._merged_view(job, cluster) for job in jobs]
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
            if self.speedup_base == "fair-share":
                base[i] = cache.value(job, (ref, fair), lambda job=job, ref=ref: fair_share_goodput(job, ref, fair))
        current = np.array([configs.index_of("any", j.allocation.num_gpus) if j.allocation else -1 for j in jobs])
        restart = restart_factor(
            np.array([now - j.arrival_time for j in jobs]),
            np.array([j.num_restarts for j in jobs]),
            np.array([j.restart_delay if self.restart_price_s is None else self.restart_price_s for j in jobs]),
        )
        if self.restart_unallocated and self.speedup_base == "fair-share":
            # The artifact's GA penalizes every state that differs from the job's base state,
            # and a job without GPUs has an empty one: its every configuration is a restart.
            # Speed-ups are relative to ``base`` here, so scaling the row scales them.
            G *= np.where(current < 0, restart, 1.0)[:, None]
        pinned = np.array([j.restoring and self.pin_restoring for j in jobs], dtype=bool)
        capacity = np.array([float(cluster.num_gpus)])
        problem = build_sia_model(G, configs, capacity, current, restart, pinned, self.p, float(self.lam or 0.0),
                                  base if self.speedup_base == "fair-share" else None)
        result = solve_sia(problem, self.mode, self.time_limit, self.mip_gap, self.threads, self.auto_limit)
        self.last_result = result
        counts = {j.job_id: int(configs.num_gpus[c]) for j, c in zip(jobs, result.choice, strict=True) if c >= 0}
        if self.mechanism == "sia-artifact":
            return self._place_virtual(cluster, jobs, counts)
        return place_blind(cluster, jobs, counts)

    def _merged_view(self, job: JobState, cluster: Cluster) -> JobState:
        """``job`` with the artifact's merged profile as its estimator (see
        :mod:`heteroplan.policies.pollux_profile`); unchanged when its estimator does not record
        observations (an oracle model)."""
        est = job.estimator
        if est is None or not hasattr(est, "observations"):
            return job
        types = cluster.type_names
        profile = self._profiles.get(job.job_id)
        if profile is None:
            profile = self._profiles[job.job_id] = MergedProfile.start(est, types)
        profile.update(est, types)
        return job.with_estimator(profile.model(est, types))

    def _place_virtual(self, cluster: Cluster, jobs: Sequence[JobState], counts: dict[str, int]) -> dict[str, Allocation]:
        """Pack replicas onto the fewest 4-GPU virtual nodes (in ``vnode_order``), keep the majority
        type's GPUs; what is kept is the job's state next round (a job keeping its GPU count keeps it)."""
        vnodes = [(n.name, n.gpu_type, min(VIRTUAL_NODE_GPUS, n.num_gpus - start))
                  for n in cluster.nodes for start in range(0, n.num_gpus, VIRTUAL_NODE_GPUS)]
        free = [size for *_, size in vnodes]
        self._intended = {jid: p for jid, p in self._intended.items() if jid in counts}
        intended: dict[str, tuple[tuple[int, int], ...]] = {}
        for jid, want in counts.items():  # a job keeping its GPU count keeps its virtual nodes
            prev = self._intended.get(jid)
            if prev and sum(c for _, c in prev) == want and all(free[v] >= c for v, c in prev):
                for v, c in prev:
                    free[v] -= c
                intended[jid] = prev
        for j in sorted(jobs, key=lambda j: -counts.get(j.job_id, 0)):  # largest first, fewest virtual nodes
            want = counts.get(j.job_id, 0)
            if want == 0 or j.job_id in intended:
                continue
            order = self._rng.permutation(len(free)) if self.vnode_order == "shuffled" else np.arange(len(free))
            got = _fewest_virtual_nodes(free, want, order)
            if got is not None:
                intended[j.job_id] = got
        self._intended = intended
        out: dict[str, Allocation] = {}
        for jid, parts in intended.items():
            per_type: dict[str, int] = {}
            for v, c in parts:
                per_type[vnodes[v][1]] = per_type.get(vnodes[v][1], 0) + c
            keep = max(per_type, key=lambda t: (per_type[t], -_keep_rank(t, cluster)))
            per_node: dict[str, int] = {}
            for v, c in parts:
                if vnodes[v][1] == keep:
                    per_node[vnodes[v][0]] = per_node.get(vnodes[v][0], 0) + c
            out[jid] = Allocation(keep, sum(per_node.values()), tuple(per_node.items()))
            intended[jid] = tuple((v, c) for v, c in parts if vnodes[v][1] == keep)  # the artifact's base state
        return out


def _first_type(job: JobState, cluster: Cluster) -> str:
    known = (job.estimator.gpu_types if job.estimator is not None else ()) or cluster.type_names
    for t in cluster.type_names:
        if t in known:
            return t
    return cluster.type_names[0]


def _keep_rank(gpu_type: str, cluster: Cluster) -> int:
    """Tie-break of the majority-type fix-up: the Sia artifact keeps the faster type (dgx-ext,
    azure, quad, rtx, aws); other types after those, in cluster order."""
    if gpu_type in ARTIFACT_KEEP_ORDER:
        return ARTIFACT_KEEP_ORDER.index(gpu_type)
    return len(ARTIFACT_KEEP_ORDER) + cluster.type_names.index(gpu_type)


def fair_share_goodput(job: JobState, gpu_type: str, fair_gpus: int) -> float:
    """Goodput (estimator units/s) of ``job`` on ``fair_gpus`` GPUs of ``gpu_type`` in one node: the
    Sia artifact's Pollux measures speed-ups against this fair share (GPUs / active jobs, rounded
    up, on one node); 0 when the estimator has none."""
    if job.estimator is None:
        return 0.0
    value = np.asarray(job.estimator.goodput(np.array([gpu_type], dtype=object), np.array([1]),
                                             np.array([fair_gpus]), progress=job.progress), dtype=float)
    return float(value.reshape(-1)[0]) if value.size and np.isfinite(value.reshape(-1)[0]) else 0.0


def _fewest_virtual_nodes(free: list[int], want: int, order: np.ndarray) -> tuple[tuple[int, int], ...] | None:
    """Whole free virtual nodes in ``order``, then the remainder best-fit (Pollux's speed-up model
    favours few nodes; ties go to the earlier node in ``order``); debits ``free``; ``None`` (no
    change) when ``want`` GPUs are not free."""
    if sum(free) < want:
        return None
    size = VIRTUAL_NODE_GPUS
    rank = np.empty(len(free), dtype=int)
    rank[order] = np.arange(len(free))
    got: list[tuple[int, int]] = []
    for v in order:
        if want >= size and free[v] == size:
            got.append((int(v), size))
            free[v] = 0
            want -= size
    while want > 0:
        fits = [v for v in range(len(free)) if free[v] >= want]
        v = min(fits, key=lambda v: (free[v], rank[v])) if fits else max(range(len(free)), key=lambda v: (free[v], -rank[v]))
        c = min(want, free[v])
        got.append((v, c))
        free[v] -= c
        want -= c
    return tuple(got)
