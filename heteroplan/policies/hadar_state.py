"""Hadar's books: the cluster as its arrays index it, the committed-GPU timeline, the prices and the saved state.

- :class:`ClusterIndex`: nodes, GPU types and capacity per node of the cluster a round runs on.
- :class:`Timeline`: GPUs committed on each node, piecewise constant over slots.
- :class:`Prices`: a round's price of the next GPU on each node, ``L * (U / L) ** (g / C_h)``
  (:func:`price`; ``L`` and ``U`` given, or the active jobs' density bounds, :func:`density_range`).
- :class:`Commitments`: the timeline with each admitted job's committed pieces, its admission
  record, the refusals and the commitment version; :class:`RateBook`: the per-type rates read
  of each job's model.
- :class:`HadarState`: all of that as a frozen snapshot converting to and from JSON (what a
  saved session keeps; the JSON form is unchanged since sessions first saved it).

Slots are absolute slot indices (slot = round length); GPU counts are per node in the cluster's order.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from heteroplan.cluster import Cluster
from heteroplan.errors import InputError
from heteroplan.formulations.hadar import density_bounds, pace_slots
from heteroplan.policies.base import JobState
from heteroplan.policies.packing import rate_of
from heteroplan.policies.state import PolicyState

__all__ = ["Admission", "ClusterIndex", "Commitments", "HadarState", "Piece", "Prices", "RateBook", "Timeline",
           "density_range", "price", "round_prices"]

Piece = tuple[int, int, np.ndarray]  # [first slot, end slot) -> GPUs per node


def price(committed: np.ndarray, capacity: np.ndarray, lower: float, upper: np.ndarray) -> np.ndarray:
    """Price of the next GPU unit: ``L * (U / L) ** (committed / capacity)`` (elementwise)."""
    return lower * (upper / lower) ** (np.asarray(committed, float) / capacity)


@dataclass(frozen=True, eq=False)
class ClusterIndex:
    """The cluster as Hadar's arrays index it (built from the cluster whenever it changes).

    Attributes:
        cluster: the cluster itself.
        nodes: node names, in the cluster's order (the index of every per-node array).
        node_index: node name -> its index.
        types: GPU type names, in the cluster's order (the index of every per-type array).
        node_type: per node, the index of its GPU type.
        type_nodes: per type, its node names in the cluster's order.
        capacity: per node, its GPUs (float).
    """

    cluster: Cluster
    nodes: tuple[str, ...]
    node_index: Mapping[str, int]
    types: tuple[str, ...]
    node_type: np.ndarray
    type_nodes: tuple[tuple[str, ...], ...]
    capacity: np.ndarray

    @classmethod
    def of(cls, cluster: Cluster) -> ClusterIndex:
        nodes = tuple(n.name for n in cluster.nodes)
        types = tuple(cluster.type_names)
        return cls(cluster, nodes, {n: i for i, n in enumerate(nodes)}, types,
                   np.array([types.index(n.gpu_type) for n in cluster.nodes]),
                   tuple(tuple(n.name for n in cluster.nodes_of_type(k)) for k in types),
                   np.array([n.num_gpus for n in cluster.nodes], dtype=float))

    def placement(self, counts: np.ndarray) -> tuple[tuple[str, int], ...]:
        """``(node, GPUs)`` pairs of per-node GPU ``counts``."""
        return tuple((self.nodes[h], int(c)) for h, c in enumerate(counts) if c > 0)

    def knows(self, placement: Sequence[tuple[str, int]]) -> bool:
        """Every node of ``placement`` is one of this cluster's."""
        return all(n in self.node_index for n, _ in placement)

    def node_counts(self, placement: Sequence[tuple[str, int]]) -> np.ndarray:
        """GPUs per node of ``placement`` (its nodes must be known)."""
        counts = np.zeros(len(self.nodes), dtype=np.int64)
        for n, c in placement:
            counts[self.node_index[n]] += c
        return counts

    def type_counts(self, placement: Sequence[tuple[str, int]]) -> tuple[int, ...]:
        """GPUs per type of ``placement``."""
        counts = np.zeros(len(self.types), dtype=np.int64)
        for n, c in placement:
            counts[self.node_type[self.node_index[n]]] += c
        return tuple(int(c) for c in counts)


class Timeline:
    """GPUs committed per node, piecewise constant over slots; the last segment runs forever."""

    def __init__(self, num_nodes: int, start: int) -> None:
        self.starts: list[int] = [start]
        self.usage: list[np.ndarray] = [np.zeros(num_nodes, dtype=np.int64)]

    @classmethod
    def laid(cls, starts: Sequence[int], usage: Sequence[Sequence[int]]) -> Timeline:
        """A timeline with these segments (as :meth:`Commitments.snapshot` wrote them)."""
        timeline = cls(len(usage[0]), starts[0])
        timeline.starts = list(starts)
        timeline.usage = [np.array(u, dtype=np.int64) for u in usage]
        return timeline

    def split(self, t: int) -> int:
        """Index of the segment starting at ``t`` (created if needed; ``t >= starts[0]``)."""
        i = int(np.searchsorted(self.starts, t, side="right")) - 1
        if self.starts[i] == t:
            return i
        self.starts.insert(i + 1, t)
        self.usage.insert(i + 1, self.usage[i].copy())
        return i + 1

    def drop_before(self, t: int) -> bool:
        """Forget slots before ``t``; True when a breakpoint was passed."""
        i = int(np.searchsorted(self.starts, t, side="right")) - 1
        passed = i > 0
        if i > 0:
            del self.starts[:i]
            del self.usage[:i]
        self.starts[0] = max(self.starts[0], t)
        return passed

    def compact(self) -> None:
        """Merge neighbouring segments with equal usage."""
        starts, usage = [self.starts[0]], [self.usage[0]]
        for st, u in zip(self.starts[1:], self.usage[1:], strict=True):
            if np.array_equal(u, usage[-1]):
                continue
            starts.append(st)
            usage.append(u)
        self.starts, self.usage = starts, usage

    def add(self, start: int, end: int, counts: np.ndarray, sign: int = 1) -> None:
        """Commit (``sign=1``) or release (``-1``) ``counts`` GPUs per node over slots ``[start, end)``."""
        a = self.split(start)
        b = self.split(end)
        for i in range(a, b):
            self.usage[i] = self.usage[i] + sign * counts


@dataclass(frozen=True, eq=False)
class Prices:
    """A round's GPU prices: ``lower`` (``L``, an idle GPU), ``upper`` per node (``U``, >= L: a
    full node), ``capacity`` per node (GPUs). Utility units (slots) per GPU-slot."""

    lower: float
    upper: np.ndarray
    capacity: np.ndarray

    @property
    def bounds(self) -> tuple[float, float]:
        """``(L, max U)``."""
        return self.lower, float(self.upper.max())

    def units(self, usage: np.ndarray, w: int) -> np.ndarray:
        """(S, H, w) prices of up to ``w`` units on each node in each of the S segments of
        ``usage`` (S, H) (inf beyond idle GPUs). As in OASiS, a decision pays the price at the
        utilization before it, per unit."""
        g = usage[:, :, None] + np.zeros(w)[None, None, :]
        p = price(g, self.capacity[None, :, None], self.lower, self.upper[None, :, None])
        room = (usage[:, :, None] + np.arange(w)[None, None, :]) < self.capacity[None, :, None]
        return np.where(room, p, np.inf)


def density_range(rates: np.ndarray, remaining: np.ndarray, tasks: np.ndarray, slot: float) -> tuple[float, float]:
    """(half the lowest, the highest) utility per GPU-slot of any schedule the jobs (rows of
    ``rates`` (J, K), estimator units/s; ``remaining`` work; ``tasks`` W_j) can run: the ``L``
    and ``U`` the competitive-ratio argument asks of the prices (``L`` halved so the least dense
    schedule is strictly admissible); ``(nan, nan)`` when no job can run."""
    live = (remaining > 0) & (rates > 0).any(axis=1)
    if not live.any():
        return math.nan, math.nan
    lo, hi = density_bounds(pace_slots(remaining[live], rates[live], slot), tasks[live])
    return lo / 2.0, hi


def round_prices(index: ClusterIndex, lower: float | None, upper: float | Mapping[str, float] | None,
                 density: tuple[float, float]) -> Prices:
    """The round's :class:`Prices`: ``lower`` / ``upper`` (a number or ``{gpu_type: U_k}``) where
    given, else ``density`` (:func:`density_range`; 1 where that is not a number)."""
    lo, hi = density
    low = float(lower) if lower is not None else (lo if math.isfinite(lo) else 1.0)
    if isinstance(upper, Mapping):
        missing = [k for k in index.types if k not in upper]
        if missing:
            raise InputError("upper", dict(upper), f"no U for GPU type(s) {missing}")
        u_type = np.array([float(upper[k]) for k in index.types])
    elif upper is not None:
        u_type = np.full(len(index.types), float(upper))
    else:
        u_type = np.full(len(index.types), max(hi, low) if math.isfinite(hi) else low)
    return Prices(low, np.maximum(u_type[index.node_type], low), index.capacity)


@dataclass(frozen=True)
class Admission:
    """Record of one admitted job's latest schedule (slots are absolute slot indices)."""

    job_id: str
    decided: int
    start: int
    end: int  # last slot (inclusive)
    pace: str
    utility: float
    cost: float


_RESTORED = object()  # stands for a job's model object in rates taken back from a HadarState


class RateBook:
    """Per job, its whole-job rate (estimator units/s at its requested GPUs) on each GPU type,
    asked of its model once (again when the job's model object changes)."""

    def __init__(self, restored: Mapping[str, Sequence[float]] | None = None) -> None:
        self._rates: dict[str, tuple[object, np.ndarray]] = {
            j: (_RESTORED, np.array(r, dtype=float)) for j, r in (restored or {}).items()}

    def keep_only(self, job_ids: set[str]) -> None:
        """Forget the jobs not in ``job_ids``."""
        self._rates = {k: v for k, v in self._rates.items() if k in job_ids}

    def of(self, job: JobState, index: ClusterIndex) -> np.ndarray:
        """Rates of ``job`` per type of ``index`` (0: cannot run there)."""
        cached = self._rates.get(job.job_id)
        if cached is not None and cached[0] is _RESTORED:  # read before a save: the job's model then
            self._rates[job.job_id] = cached = (job.estimator, cached[1])
        if cached is not None and cached[0] is job.estimator:
            return cached[1]
        if job.estimator is None:
            raise InputError(f"job[{job.job_id}].estimator", None, "Hadar needs per-type throughputs")
        w = job.requested_gpus
        rates = np.array([max(0.0, rate_of(job.estimator, k, w, index.cluster.gpu_type(k).gpus_per_node))
                          for k in index.types])
        self._rates[job.job_id] = (job.estimator, rates)
        return rates

    def snapshot(self) -> dict[str, tuple[float, ...]]:
        return {j: tuple(float(x) for x in r) for j, (_, r) in self._rates.items()}


class Commitments:
    """What Hadar has committed: the timeline, each admitted job's pieces (in admission order),
    its latest :class:`Admission`, the jobs dropped for good, the version at which each job was
    last refused, and the commitment version (bumped whenever commitments are released)."""

    def __init__(self) -> None:
        self.plans: dict[str, tuple[Piece, ...]] = {}
        self.admissions: dict[str, Admission] = {}
        self.rejected: set[str] = set()
        self.tried: dict[str, int] = {}
        self.version = 0
        self._timeline: Timeline | None = None
        self._nodes: tuple[str, ...] | None = None
        self._saved: tuple[tuple[str, ...], tuple[int, ...], tuple[tuple[int, ...], ...]] | None = None

    def timeline(self, index: ClusterIndex, t: int) -> Timeline:
        """The timeline on ``index``'s nodes: a restored one, the one already laid on them, else an
        empty one from slot ``t``: the commitments on another cluster's nodes are dropped, whether
        the cluster changed under a live policy or between a save and a load (a node lost while
        the scheduler was down), so a restored policy decides as the live one would have."""
        if self._saved is not None:
            nodes, starts, usage = self._saved
            self._saved, self._timeline, self._nodes = None, Timeline.laid(starts, usage), nodes
        if self._timeline is None or self._nodes != index.nodes:
            if self._timeline is not None:  # the cluster's nodes changed: what was committed on them is gone
                self.plans = {}
                self.version += 1
            self._timeline, self._nodes = Timeline(len(index.nodes), t), index.nodes
        return self._timeline

    def release(self, job_id: str, t: int, timeline: Timeline) -> None:
        """Give back what ``job_id`` committed from slot ``t`` on."""
        for lo, hi, counts in self.plans.pop(job_id):
            lo = max(lo, t)
            if lo < hi:
                timeline.add(lo, hi, counts, sign=-1)
        self.version += 1

    def at(self, t: int) -> Iterator[tuple[str, np.ndarray]]:
        """``(job id, GPUs per node)`` of the pieces running in slot ``t``, in admission order."""
        for jid, pieces in self.plans.items():
            for lo, hi, counts in pieces:
                if lo <= t < hi:
                    yield jid, counts
                    break

    def snapshot(self, rates: RateBook, bounds: tuple[float, float]) -> HadarState:
        """A :class:`HadarState` of these commitments, ``rates`` and the last round's ``bounds``."""
        if self._timeline is not None:
            nodes: tuple[str, ...] | None = self._nodes
            starts: Sequence[int] = self._timeline.starts
            usage: Sequence[Sequence[int]] = [tuple(int(c) for c in u) for u in self._timeline.usage]
        else:  # not run since set up, or restored and not yet laid on a cluster
            nodes, starts, usage = self._saved or (None, (), ())
        lo, hi = bounds
        return HadarState(
            nodes=nodes, segment_starts=tuple(int(t) for t in starts),
            segment_usage=tuple(tuple(int(c) for c in u) for u in usage),
            plans={j: tuple((int(lo), int(hi), tuple(int(c) for c in counts)) for lo, hi, counts in p)
                   for j, p in self.plans.items()},
            admissions=dict(self.admissions), rejected=tuple(sorted(self.rejected)), tried=dict(self.tried),
            version=self.version, rates=rates.snapshot(),
            bounds=(lo if math.isfinite(lo) else None, hi if math.isfinite(hi) else None),
        )

    @classmethod
    def restored(cls, state: HadarState) -> Commitments:
        """The commitments ``state`` holds; its timeline is laid on the cluster at the next round."""
        books = cls()
        books._saved = None if state.nodes is None else (state.nodes, state.segment_starts, state.segment_usage)
        books.plans = {j: tuple((lo, hi, np.array(c, dtype=np.int64)) for lo, hi, c in pieces)
                       for j, pieces in state.plans.items()}
        books.admissions = dict(state.admissions)
        books.rejected = set(state.rejected)
        books.tried = dict(state.tried)
        books.version = state.version
        return books


@dataclass(frozen=True)
class HadarState(PolicyState):
    """What Hadar remembers between rounds (:meth:`~heteroplan.policies.hadar.HadarPolicy.state`);
    slots are absolute slot indices, GPU counts are per node in ``nodes`` order.

    Attributes:
        nodes: the cluster's node names when the commitments were set up (``None``: never ran).
        segment_starts: first slot of each piece of the committed-GPU timeline (the last runs forever).
        segment_usage: per piece, the GPUs committed on each node.
        plans: per admitted job, its committed ``(first slot, end slot (exclusive), GPUs per node)`` pieces.
        admissions: each admitted job's latest schedule.
        rejected: jobs dropped for good (``COMMITTED`` with ``retry=False``).
        tried: per job, the commitment version at which it was last refused (``COMMITTED`` retries
            a job only after the prices changed).
        version: the commitment version (bumped whenever commitments are released).
        rates: per job, the rates (estimator units/s at its requested GPUs, per GPU type in the
            cluster's order) read from its model, which the policy keeps while the job's model
            object stays the same.
        bounds: the last round's ``(L, max U)`` (``None``: not a number).
    """

    nodes: tuple[str, ...] | None
    segment_starts: tuple[int, ...]
    segment_usage: tuple[tuple[int, ...], ...]
    plans: Mapping[str, tuple[tuple[int, int, tuple[int, ...]], ...]]
    admissions: Mapping[str, Admission]
    rejected: tuple[str, ...]
    tried: Mapping[str, int]
    version: int
    rates: Mapping[str, tuple[float, ...]]
    bounds: tuple[float | None, float | None]

    def to_json(self) -> dict[str, Any]:
        return {
            "nodes": None if self.nodes is None else list(self.nodes),
            "segment_starts": list(self.segment_starts), "segment_usage": [list(u) for u in self.segment_usage],
            "plans": {j: [[lo, hi, list(c)] for lo, hi, c in pieces] for j, pieces in self.plans.items()},
            "admissions": {j: asdict(a) for j, a in self.admissions.items()},
            "rejected": list(self.rejected), "tried": dict(self.tried), "version": self.version,
            "rates": {j: list(r) for j, r in self.rates.items()}, "bounds": list(self.bounds),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HadarState:
        lo, hi = data["bounds"]
        return cls(
            nodes=None if data["nodes"] is None else tuple(str(n) for n in data["nodes"]),
            segment_starts=tuple(int(t) for t in data["segment_starts"]),
            segment_usage=tuple(tuple(int(c) for c in u) for u in data["segment_usage"]),
            plans={str(j): tuple((int(a), int(b), tuple(int(c) for c in counts)) for a, b, counts in pieces)
                   for j, pieces in data["plans"].items()},
            admissions={str(j): Admission(**a) for j, a in data["admissions"].items()},
            rejected=tuple(str(j) for j in data["rejected"]),
            tried={str(j): int(v) for j, v in data["tried"].items()}, version=int(data["version"]),
            rates={str(j): tuple(float(x) for x in r) for j, r in data["rates"].items()},
            bounds=(None if lo is None else float(lo), None if hi is None else float(hi)),
        )
