"""What Hadar does with the current slot once its gangs are planned: keep nodes, fill idle GPUs, fork.

Each step is a function from the slot's allocations so far to new ones (nothing is changed in
place): :func:`keep_nodes` moves re-planned gangs back onto their last nodes, :func:`fill_idle`
gives the idle GPUs, priced 0, to queued jobs, :func:`fork` (HadarE) gives them to extra copies
of active jobs. The last two read a :class:`Residual`: the slot's free GPUs per node, the jobs
concerned and their rates. Units: GPUs, seconds, estimator work units.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from heteroplan.policies.base import Allocation, JobState
from heteroplan.policies.hadar_schedule import Current
from heteroplan.policies.hadar_state import ClusterIndex
from heteroplan.policies.packing import free_gpus, make_allocation, take_gpus

__all__ = ["Residual", "fill_idle", "fork", "keep_nodes", "residual"]

Placement = tuple[tuple[str, int], ...]


@dataclass(frozen=True, eq=False)
class Residual:
    """What is left of the current slot: ``free`` GPUs per node after ``allocations``, the
    ``jobs`` concerned and their ``rates`` (J, K) (estimator units/s of the whole job per GPU type)."""

    index: ClusterIndex
    allocations: Mapping[str, Allocation]
    free: Mapping[str, int]
    jobs: tuple[JobState, ...]
    rates: np.ndarray

    def idle_of_type(self, free: Mapping[str, int]) -> np.ndarray:
        """Idle GPUs per type under ``free``."""
        return np.array([sum(free[n] for n in names) for names in self.index.type_nodes], dtype=float)


def residual(index: ClusterIndex, allocations: Mapping[str, Allocation], jobs: Sequence[JobState],
             rates: Sequence[np.ndarray]) -> Residual:
    """The :class:`Residual` of ``jobs`` (with their ``rates``) after ``allocations``."""
    matrix = np.stack(list(rates)) if len(rates) else np.zeros((0, len(index.types)))
    return Residual(index, dict(allocations), free_gpus(index.cluster, allocations.values()), tuple(jobs), matrix)


def keep_nodes(index: ClusterIndex, jobs: Sequence[JobState], out: Mapping[str, Allocation]) -> dict[str, Allocation]:
    """The current slot's placements ``out`` with every job that keeps its GPU types on its last nodes.

    Rates depend on the types a gang uses, not on which nodes of a type (the pace and the
    prices of this slot are the same), but a move costs a restore: a re-planned job whose
    GPUs per type are unchanged keeps its last nodes; the others keep their planned nodes
    where still free, else take what is left of each type.
    """
    cluster = index.cluster
    last = {j.job_id: j.allocation.placement for j in jobs
            if j.allocation is not None and j.allocation.placement and index.knows(j.allocation.placement)}
    free = {n.name: n.num_gpus for n in cluster.nodes}
    result: dict[str, Allocation] = {}

    def fits(placement: Placement) -> bool:
        return all(free[n] >= c for n, c in placement)

    def take(jid: str, placement: Placement) -> None:
        for n, c in placement:
            free[n] -= c
        result[jid] = out[jid] if placement == out[jid].placement else make_allocation(placement, cluster)

    for jid, a in out.items():
        old = last.get(jid)
        if old is not None and index.type_counts(old) == index.type_counts(a.placement) and fits(old):
            take(jid, old)
    for jid, a in out.items():
        if jid not in result and fits(a.placement):
            take(jid, a.placement)
    for jid, a in out.items():
        if jid in result:
            continue
        parts: list[tuple[str, int]] = []
        for k, c in enumerate(index.type_counts(a.placement)):
            got = take_gpus(free, index.type_nodes[k], c) if c > 0 else ()
            if got is None:  # cannot happen: the plan's GPUs per type fit
                raise AssertionError(f"{jid}: no {c} {index.types[k]} GPUs left")
            parts.extend(got)
        for n, c in parts:
            free[n] += c
        take(jid, tuple(parts))
    return result


def fill_idle(queued: Residual, currents: Sequence[Current | None], slot: float) -> dict[str, Allocation]:
    """Allocations of the current slot's idle GPUs to the ``queued`` jobs (none of which holds
    GPUs in ``queued.allocations``; ``currents``: where each ran last), at price 0.

    Once every active job is planned, nobody else can use this slot's idle GPUs: no job
    arrives within the slot and the slot is gone at its end, so their dual price is 0 while
    they outnumber the queued demand for them (the prices of later slots, which future
    arrivals may want, keep the OASiS function). A queued job's payoff from running now is
    then the completion time it saves, ``r_m (slot - d) / (slot r_best)`` slots (``r_m`` its
    pace on the idle GPUs, ``r_best`` its best rate, ``d`` the restore; 0 if it stays on its
    last placement), positive whenever ``d < slot``. Where the queued gangs outnumber the idle
    GPUs, they go to the highest saving per GPU, ``/ W_j``, first (the greedy of the
    slot's knapsack). A gang takes the slowest eligible types first (its pace is set by
    the slowest anyway), keeping faster idle GPUs for others.
    """
    jobs, rates, index = queued.jobs, queued.rates, queued.index
    free = dict(queued.free)
    best = rates.max(axis=1) if len(jobs) else np.zeros(0)
    w = np.array([j.requested_gpus for j in jobs])
    delay = np.array([j.restart_delay for j in jobs], dtype=float)
    left = np.ones(len(jobs), dtype=bool)
    given: dict[str, Allocation] = {}
    while left.any():
        idle = queued.idle_of_type(free)
        order = np.argsort(-rates, axis=1, kind="stable")  # each job's types, fastest first
        held = np.cumsum(np.take_along_axis(np.broadcast_to(idle, rates.shape), order, axis=1), axis=1)
        fits = (held >= w[:, None]) & (np.take_along_axis(rates, order, axis=1) > 0)
        pace = np.where(fits.any(axis=1), order[np.arange(len(jobs)), fits.argmax(axis=1)], -1)
        # staying on its last placement (if idle) saves the restore; moving runs at ``pace``
        stay_rate = np.array([rates[i, cur.pace] if cur is not None and all(
            free[n] >= c for n, c in index.placement(cur.counts)) else 0.0
            for i, cur in enumerate(currents)])
        move = np.where(pace >= 0, rates[np.arange(len(jobs)), np.maximum(pace, 0)] * (slot - delay), 0.0)
        stays = stay_rate * slot >= move
        work = np.maximum(stay_rate * slot, move)  # work done this slot, estimator units
        saving = np.where(left & (work > 0), work / (slot * np.where(best > 0, best, 1.0) * w), -np.inf)
        i = int(np.argmax(saving))
        if not np.isfinite(saving[i]):
            break
        left[i] = False
        cur = currents[i]
        if stays[i] and cur is not None:
            placement = index.placement(cur.counts)
            for n, c in placement:
                free[n] -= c
        else:
            placement = _slowest_first(free, index, rates[i], int(pace[i]), int(w[i]), idle)
        given[jobs[i].job_id] = make_allocation(placement, index.cluster)
    return given


def _slowest_first(free: dict[str, int], index: ClusterIndex, rates: np.ndarray, pace: int, need: int,
                   idle: np.ndarray) -> Placement:
    """``need`` GPUs of types at least as fast as ``pace``, the slowest types first (debits ``free``)."""
    parts: list[tuple[str, int]] = []
    for k in np.argsort(rates, kind="stable"):  # slowest eligible type first
        if need == 0 or rates[k] < rates[pace]:
            continue
        c = min(need, int(idle[k]))
        got = take_gpus(free, index.type_nodes[k], c) if c > 0 else ()
        parts.extend(got or ())
        need -= c
    return tuple(parts)


def fork(active: Residual, slot: float) -> dict[str, Allocation]:
    """HadarE: ``active.allocations`` with the idle GPUs given to extra single-type copies (W_j
    GPUs each) of the ``active`` jobs, per type the copy that finishes its job soonest first."""
    index, jobs = active.index, active.jobs
    free = dict(active.free)
    rates = {j.job_id: r for j, r in zip(jobs, active.rates, strict=True)}
    out = dict(active.allocations)
    planned = dict.fromkeys(rates, 0.0)  # work per slot of each job's gang, estimator units
    for jid, a in out.items():
        counts = index.type_counts(a.placement)
        planned[jid] = min(rates[jid][k] for k, c in enumerate(counts) if c > 0) * slot
    for k in range(len(index.types)):
        while True:
            copy = _fastest_finish(jobs, rates, planned, k, sum(free[n] for n in index.type_nodes[k]), slot)
            if copy is None:
                break
            placement = take_gpus(free, index.type_nodes[k], copy.requested_gpus)
            if placement is None:
                break
            jid = copy.job_id
            old = out.get(jid)
            merged: dict[str, int] = dict(old.placement) if old else {}
            for n, c in placement:
                merged[n] = merged.get(n, 0) + c
            out[jid] = make_allocation(tuple(merged.items()), index.cluster)
            planned[jid] += rates[jid][k] * slot
    return out


def _fastest_finish(jobs: Sequence[JobState], rates: Mapping[str, np.ndarray], planned: Mapping[str, float],
                    k: int, idle: int, slot: float) -> JobState | None:
    """The job whose extra copy on type ``k`` (``idle`` GPUs there) finishes it soonest."""
    best_job, best_key = None, math.inf
    for j in jobs:
        r = rates[j.job_id][k]
        if r <= 0 or j.requested_gpus > idle:
            continue
        key = float(j.remaining_work) / (planned[j.job_id] / slot + r)  # finishing time with this copy (s)
        if key < best_key:
            best_job, best_key = j, key
    return best_job
