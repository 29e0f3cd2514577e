"""The Policy protocol shared by the simulator and the runtime.

A policy sees the cluster and a read-only view of each active job, and returns the
allocation (GPU type, GPU count, placement on nodes) of every job it runs this round.
Jobs absent from the returned mapping get no GPUs. No simulator internals leak here:
the runtime builds the same :class:`JobState` objects from real jobs.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from numbers import Integral
from typing import Any, Protocol, runtime_checkable

from heteroplan._html import table, title
from heteroplan.cluster import Cluster
from heteroplan.errors import ClusterError, InputError, PolicyError
from heteroplan.perf.protocols import GoodputRate
from heteroplan.policies.state import NO_STATE, NoState, PolicyState, expect_state

__all__ = ["Allocation", "AllocationError", "JobState", "Policy", "PolicyBase", "PerfModel",
           "ReportsSolveGap", "SolveReport", "check_allocations", "counts_by_type"]


class AllocationError(PolicyError, InputError):
    """A policy returned an allocation that breaks the cluster's or the job's rules (a policy bug)."""


@dataclass(frozen=True)
class Allocation:
    """GPUs given to one job for one round.

    Attributes:
        gpu_type: GPU type name (all GPUs of a job share one type), or, for a task-level
            heterogeneous allocation (Hadar), a label of its types (``"k80+v100"``): build it with
            :meth:`spanning`, read it with :attr:`gpu_types` / :attr:`mixed`; then ``placement``
            carries the truth (see :func:`counts_by_type`).
        num_gpus: number of GPUs.
        placement: ``(node name, GPUs on that node)`` pairs; empty until placed.
    """

    gpu_type: str
    num_gpus: int
    placement: tuple[tuple[str, int], ...] = ()

    TYPE_SEPARATOR = "+"  # joins the types of a mixed allocation's label; never part of a type name

    @classmethod
    def spanning(cls, gpu_types: Sequence[str], placement: tuple[tuple[str, int], ...]) -> Allocation:
        """A gang over several GPU types (task-level heterogeneity): ``gpu_types`` in the cluster's
        order, ``placement`` the (node, GPUs) pairs that carry the truth."""
        if not gpu_types:
            raise InputError("allocation.gpu_types", gpu_types, "must name at least one GPU type")
        return cls(cls.TYPE_SEPARATOR.join(gpu_types), sum(c for _, c in placement), tuple(placement))

    @property
    def gpu_types(self) -> tuple[str, ...]:
        """The GPU types of the gang: one, or several for a mixed (task-level heterogeneous) one."""
        return tuple(self.gpu_type.split(self.TYPE_SEPARATOR))

    @property
    def mixed(self) -> bool:
        """The gang spans several GPU types."""
        return self.TYPE_SEPARATOR in self.gpu_type

    @property
    def num_nodes(self) -> int:
        """Nodes spanned (1 when not yet placed and num_gpus > 0)."""
        return len(self.placement) if self.placement else int(self.num_gpus > 0)

    def same_resources(self, other: Allocation | None) -> bool:
        """True when ``other`` has the same type and count (a change forces a restart)."""
        return other is not None and other.gpu_type == self.gpu_type and other.num_gpus == self.num_gpus

    def _repr_html_(self) -> str:
        head = title("Allocation", f"{self.num_gpus} x {self.gpu_type} on {self.num_nodes} node(s)")
        if not self.placement:
            return head + " (not placed)"
        return head + table(("node", "GPUs"), self.placement)


@runtime_checkable
class PerfModel(GoodputRate, Protocol):
    """The one performance model every policy reads (see :mod:`heteroplan.perf`).

    ``goodput`` is the job's rate of useful work on ``num_gpus`` GPUs of ``gpu_type`` spread
    over ``num_nodes`` nodes, in *work units per second*: M0-equivalent samples/s for an elastic
    job's goodput model (:class:`~heteroplan.perf.goodput.GoodputModel`), steps/s or samples/s
    of the whole job for a rigid job's throughput table
    (:class:`~heteroplan.perf.goodput.ThroughputTable`). ``remaining_work / goodput`` is
    therefore seconds. 0 means the job cannot run there. Arguments broadcast (numpy arrays);
    ``gpu_type`` may be an array of type names. ``progress`` is the fraction of the job done.
    ``gpu_types`` lists the types the model has data for. Optional capabilities (a refit from
    measured steps, a version, a per-batch throughput, ...) are the protocols of
    :mod:`heteroplan.perf.protocols`.
    """

    @property
    def gpu_types(self) -> tuple[str, ...]: ...


@dataclass(frozen=True)
class JobState:
    """Read-only view of an active job that policies receive each round.

    Times in seconds, service in GPU-seconds, work in the units of the job's ``estimator``
    (:class:`PerfModel`: samples for goodput models, steps for throughput tables), so that
    ``remaining_work / estimator.goodput(...)`` is seconds.

    Attributes:
        requested_gpus: GPUs a rigid scheduler gives the job (its gang size, W).
        elastic: whether the policy may change the job's GPU count (and batch size).
        max_gpus: most GPUs the job may ever use.
        allocation: what it holds now (``None``: not running).
        restoring: it is restoring a checkpoint this round (pin it).
        num_restarts: restarts so far.
        attained_service: GPU-seconds run so far.
        progress: fraction of the job done, in ``[0, 1]``.
        remaining_work: work left (estimator units, >= 0).
        restart_delay: seconds a restart costs the job.
        estimator: the job's performance model as the policy sees it.
        max_gpus_run: most GPUs it has ever run on (0: never ran).
        last_gpus: GPUs of its current or, when stopped, last allocation (0: never ran).
        batch_size: total batch size (samples) it runs with now, or was given (rigid jobs).
        requested_batch: total batch size (samples) its workload requested (0: none given).
    """

    job_id: str
    application: str
    arrival_time: float
    requested_gpus: int = 1
    elastic: bool = True
    max_gpus: int = 64
    allocation: Allocation | None = None
    restoring: bool = False
    num_restarts: int = 0
    attained_service: float = 0.0
    progress: float = 0.0
    remaining_work: float = 0.0
    restart_delay: float = 0.0
    estimator: PerfModel | None = None
    max_gpus_run: int = 0
    last_gpus: int = 0
    batch_size: int = 0
    requested_batch: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.requested_gpus, bool) or not isinstance(self.requested_gpus, Integral) \
                or self.requested_gpus < 1:
            raise InputError(f"job[{self.job_id}].requested_gpus", self.requested_gpus, "must be an integer >= 1")
        if not 0.0 <= self.progress <= 1.0:
            raise InputError(f"job[{self.job_id}].progress", self.progress, "must be the fraction done, in [0, 1]")
        if not self.remaining_work >= 0.0:
            raise InputError(f"job[{self.job_id}].remaining_work", self.remaining_work, "must be >= 0 work units")

    def with_estimator(self, estimator: PerfModel | None) -> JobState:
        """This job as a policy sees it through another performance model (a merged profile, a
        batch-limited view): a copy with ``estimator`` replaced, the other fields as checked
        already (``dataclasses.replace`` would check them again, every job every round)."""
        view = copy.copy(self)
        object.__setattr__(view, "estimator", estimator)
        return view


@runtime_checkable
class Policy(Protocol):
    """A round-based cluster scheduler, and what a round loop needs to know about it.

    Attributes:
        name: short name (results, tables).
        round_length: seconds per scheduling round the policy is designed for.
        elastic: ``True``: it chooses each elastic job's GPU count and batch size (Sia,
            Pollux); ``False``: every job runs rigidly on ``requested_gpus`` GPUs (Gavel,
            FIFO, Tiresias, YARN-CS, Hadar).
        forking: it may give a rigid job several gangs (copies) of ``requested_gpus`` GPUs
            whose progress adds up (HadarE).

    A policy that remembers anything between rounds (Gavel, ``pollux-sia``, Hadar) also has
    ``state()`` and ``restore_state(state)`` (:class:`~heteroplan.policies.state.StatefulPolicy`),
    so that a saved scheduling session restored elsewhere decides as the original.
    """

    name: str
    round_length: float
    elastic: bool
    forking: bool

    def allocate(
        self, cluster: Cluster, jobs: Sequence[JobState], now: float
    ) -> Mapping[str, Allocation]:
        """Allocations for this round keyed by ``job_id``, with placements filled in."""
        ...


class SolveReport(Protocol):
    """How a round's optimization ended: ``gap``, its answer's relative distance to the best
    bound proven (0: optimal)."""

    gap: float


@runtime_checkable
class ReportsSolveGap(Protocol):
    """A policy that solves each round to a measured gap (Sia, Pollux): ``last_result`` is the
    latest round's :class:`SolveReport` (``None`` before a solve, or when a round had nothing to
    solve). A scheduling session passes its gap on as ``RoundDecisions.solve_gap``."""

    last_result: SolveReport | None


class PolicyBase:
    """A base class that gives a custom policy the defaults a round loop reads; override what
    differs (class attributes or constructor arguments) and write :meth:`allocate`.

    Attributes:
        name: short name (default: the class name in lower case).
        round_length: seconds per round (60).
        elastic: it chooses elastic jobs' GPU counts (``False``: rigid, every job runs on its
            ``requested_gpus``).
        forking: it may give a rigid job several gangs of ``requested_gpus`` (``False``).
        restart_delay_s: seconds every (re)start of its jobs costs, or ``None``: each job's own
            measured delay.

    A policy that remembers anything between rounds overrides :meth:`state` and
    :meth:`restore_state` (see :mod:`heteroplan.policies.state`), so that a saved scheduling
    session restored elsewhere decides as the original; the defaults say it keeps nothing.
    """

    name: str = ""
    round_length: float = 60.0
    elastic: bool = False
    forking: bool = False
    restart_delay_s: float | None = None

    def __init__(self, **options: Any) -> None:
        for key, value in options.items():
            if key not in ("name", "round_length", "elastic", "forking", "restart_delay_s"):
                raise InputError(f"policy.{key}", value, "unknown option; PolicyBase takes name, round_length, "
                                 "elastic, forking, restart_delay_s")
            setattr(self, key, value)
        if not self.name:
            self.name = type(self).__name__.lower()
        if isinstance(self.round_length, bool) or not isinstance(self.round_length, int | float) \
                or not self.round_length > 0:
            raise InputError("policy.round_length", self.round_length, "must be a number of seconds > 0")

    def allocate(self, cluster: Cluster, jobs: Sequence[JobState], now: float) -> Mapping[str, Allocation]:
        """Allocations for this round keyed by ``job_id``, with placements filled in."""
        raise NotImplementedError(f"{type(self).__name__}.allocate")

    def state(self) -> PolicyState:
        """What the policy remembers between rounds: nothing (:data:`~heteroplan.policies.state.NO_STATE`)."""
        return NO_STATE

    def restore_state(self, state: PolicyState) -> None:
        """Take back a :meth:`state` (nothing to restore for a stateless policy)."""
        expect_state(state, NoState, self.name)


def counts_by_type(allocation: Allocation, cluster: Cluster) -> dict[str, int]:
    """GPUs per type of an allocation, from its placement (node types) when it has one.

    Unplaced allocations must name a single type. Unknown nodes raise ``ClusterError``.
    """
    if not allocation.placement:
        if allocation.mixed:
            raise InputError("allocation.placement", (), f"mixed type {allocation.gpu_type!r} needs a placement")
        return {allocation.gpu_type: allocation.num_gpus} if allocation.num_gpus else {}
    types = cluster.node_types
    out: dict[str, int] = {}
    for node, count in allocation.placement:
        if node not in types:
            raise ClusterError("allocation.placement.node", node, "unknown node")
        out[types[node]] = out.get(types[node], 0) + count
    return out


def check_allocations(cluster: Cluster, allocations: Any, active: Iterable[str | JobState], *,
                      policy: str = "", forking: bool = False,
                      rigid: Collection[str] | None = None) -> dict[str, Allocation]:
    """Validate a policy's answer; raises :class:`AllocationError` naming the policy, the job, the
    field and the value.

    Checked: a mapping of active jobs to :class:`Allocation`; integer GPU counts >= 1; only GPU
    types and nodes ``cluster`` has, each node of the allocation's type(s) and listed at most once,
    the placement holding exactly ``num_gpus``; no node and no type over-committed; and, for the
    jobs given as :class:`JobState`: at most ``max_gpus``; a rigid job on exactly ``requested_gpus``
    (under a ``forking`` policy a job that is not elastic gets a whole number of such gangs).

    Args:
        cluster: the cluster the policy allocated.
        allocations: the policy's answer (job id -> allocation).
        active: the jobs the policy was shown (their ids, or their :class:`JobState` views).
        policy: the policy's name, for the message.
        forking: the policy may give a rigid job several gangs (HadarE).
        rigid: the ids of the jobs that must run on exactly ``requested_gpus`` (default: every job
            whose view is not elastic; a scheduling session names the jobs submitted with
            ``elastic=False``).
    """
    where = f"policy[{policy}]." if policy else ""
    try:
        allocations = dict(allocations)
    except (TypeError, ValueError) as exc:
        raise AllocationError(f"{where}allocation", type(allocations).__name__,
                              f"must be a mapping of job id -> Allocation ({exc})") from None
    shown = list(active)
    views = {j.job_id: j for j in shown if isinstance(j, JobState)}
    ids = set(views) | {j for j in shown if isinstance(j, str)}
    node_type = cluster.node_types
    used = dict.fromkeys(node_type, 0)
    for jid, alloc in allocations.items():
        if not isinstance(jid, str) or jid not in ids:
            raise AllocationError(f"{where}allocation.job", jid, "not an active job")
        used_by = _check_one(f"{where}allocation[{jid}]", alloc, node_type, set(cluster.type_names))
        for node, count in used_by.items():
            used[node] += count
    capacity = {n.name: n.num_gpus for n in cluster.nodes}
    over = [n for n, u in used.items() if u > capacity[n]]
    if over:
        raise AllocationError(f"{where}allocation.node", over[0],
                              f"over-committed: {used[over[0]]} > {capacity[over[0]]} GPUs")
    by_type: dict[str, int] = {}
    for node, count in used.items():
        by_type[node_type[node]] = by_type.get(node_type[node], 0) + count
    type_capacity = cluster.capacity()
    for gpu_type, count in by_type.items():  # implied by the nodes' capacity; said per type
        if count > type_capacity[gpu_type]:
            raise AllocationError(f"{where}allocation.gpu_type", gpu_type,
                                  f"over-committed: {count} > {type_capacity[gpu_type]} GPUs")
    fixed = {j for j, v in views.items() if not v.elastic} if rigid is None else set(rigid)
    for jid, alloc in allocations.items():
        if jid in views:
            _check_job_rules(f"{where}allocation[{jid}].num_gpus", alloc.num_gpus, views[jid], forking, jid in fixed)
    return allocations


def _check_one(field: str, alloc: object, node_type: Mapping[str, str], types: set[str]) -> dict[str, int]:
    """One allocation's own rules (see :func:`check_allocations`); its GPUs per node."""
    if not isinstance(alloc, Allocation):
        raise AllocationError(field, alloc, "must be an Allocation")
    n = alloc.num_gpus
    if isinstance(n, bool) or not isinstance(n, Integral) or n < 1:
        raise AllocationError(f"{field}.num_gpus", n, "must be an integer >= 1 GPUs")
    if not isinstance(alloc.gpu_type, str) or any(t not in types for t in alloc.gpu_types):
        raise AllocationError(f"{field}.gpu_type", alloc.gpu_type, f"not a GPU type of the cluster {sorted(types)}")
    placement = alloc.placement
    if not isinstance(placement, tuple) or not all(isinstance(p, tuple) and len(p) == 2 for p in placement):
        raise AllocationError(f"{field}.placement", placement, "must be a tuple of (node, GPUs) pairs")
    allowed = set(alloc.gpu_types)
    per_node: dict[str, int] = {}
    for node, count in placement:
        if isinstance(count, bool) or not isinstance(count, Integral) or count < 1:
            raise AllocationError(f"{field}.placement", placement, f"{node}: GPU count must be an integer > 0")
        if not isinstance(node, str) or node not in node_type:
            raise AllocationError(f"{field}.node", node, "unknown node")
        if node in per_node:
            raise AllocationError(f"{field}.node", node, "listed twice in one placement")
        if node_type[node] not in allowed:
            raise AllocationError(f"{field}.node", node, f"holds {node_type[node]}, not {alloc.gpu_type}")
        per_node[node] = int(count)
    if sum(per_node.values()) != n:
        raise AllocationError(f"{field}.placement", placement, f"must hold {n} GPUs")
    return per_node


def _check_job_rules(field: str, num_gpus: int, job: JobState, forking: bool, rigid: bool) -> None:
    """Within ``max_gpus``; a rigid job on its gang (whole gangs of a job not elastic when forking)."""
    if forking and not job.elastic:
        if num_gpus % job.requested_gpus:
            raise AllocationError(field, num_gpus, f"not a whole number of gangs of {job.requested_gpus} GPUs")
    elif rigid:
        if num_gpus != job.requested_gpus:
            raise AllocationError(field, num_gpus, f"a rigid job runs on exactly its requested {job.requested_gpus} GPUs")
    elif num_gpus > job.max_gpus:
        raise AllocationError(field, num_gpus, f"above the job's max_gpus ({job.max_gpus})")
