"""Hadar's dual subroutine: the best schedule of one job against the committed timeline's prices.

A schedule runs the job's W_j tasks at pace m (the slowest GPU type it uses) from a start
slot, in every slot with W_j free GPUs of types at least as fast as m (the W_j cheapest), and
skips the others, until its ``n_m`` slots are done; or, from now, at the fastest pace free in
each slot (:func:`variable_pace`). Payoff = :func:`~heteroplan.formulations.hadar.completion_utility`
minus the summed prices; the best is kept (:func:`best_schedule`) and committed on the
timeline (:func:`commit_schedule`). Units: slots, GPUs, utility in slots.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from heteroplan.formulations.hadar import at_least_as_fast, completion_utility, pace_slots
from heteroplan.policies.base import JobState
from heteroplan.policies.hadar_state import ClusterIndex, Piece, Prices, Timeline

__all__ = ["Current", "Quote", "Rules", "Schedule", "best_schedule", "commit_schedule", "current_of",
           "slot_costs", "variable_pace"]


@dataclass(frozen=True, eq=False)
class Current:
    """Where a job runs now: ``pace`` (index of its slowest GPU type), ``counts`` (GPUs per node)."""

    pace: int
    counts: np.ndarray


@dataclass(frozen=True, eq=False)
class Quote:
    """One job as the dual subroutine sees it: ``tasks`` (W_j GPUs), ``rates`` (estimator units/s
    of the whole job per GPU type), ``remaining`` work, ``restart_delay`` (s, paid by a schedule
    that does not continue its ``current`` placement)."""

    tasks: int
    rates: np.ndarray
    remaining: float
    restart_delay: float
    current: Current | None


@dataclass(frozen=True)
class Rules:
    """The policy's options the subroutine reads: ``slot`` (s), ``horizon`` (latest start, slots
    after the decision slot), ``max_slot`` (schedules end before it; ``None``: no limit) and
    ``exact_keep`` (a job keeps its placement only on its very nodes; else on as many GPUs of
    each of its types, the nodes being kept afterwards)."""

    slot: float
    horizon: int
    max_slot: int | None
    exact_keep: bool


@dataclass(frozen=True)
class Schedule:
    """A candidate schedule: slots ``[start, end)``, ``pace`` of its first slot, ``paces``: for a
    variable pace, (segment start slots, pace from each on) (``None``: ``pace`` throughout)."""

    payoff: float
    start: int
    end: int  # exclusive
    pace: int
    utility: float
    cost: float
    paces: tuple[tuple[int, ...], tuple[int, ...]] | None = None


def job_prices(quote: Quote, prices: Prices, usage: np.ndarray) -> np.ndarray:
    """(S, H, W) unit prices for ``quote``'s job, its current units a hair cheaper (to keep its placement)."""
    units = prices.units(usage, quote.tasks)
    if quote.current is not None:
        keep = np.arange(units.shape[2])[None, :] < quote.current.counts[:, None]  # (H, w)
        units = np.where(keep[None], units * (1 - 1e-9), units)
    return units


def slot_costs(quote: Quote, index: ClusterIndex, m: int, units: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per segment: price of the W cheapest units of types at least as fast as pace ``m``
    (the job's current units first on ties), and whether W such units are free."""
    w = quote.tasks
    ok = at_least_as_fast(quote.rates[index.node_type], quote.rates[m])
    pm = np.where(ok[None, :, None], units, np.inf).reshape(len(units), -1)
    cost = np.partition(pm, w - 1, axis=1)[:, :w].sum(axis=1)
    return np.where(np.isfinite(cost), cost, 0.0), np.isfinite(cost)


def can_keep(current: Current, usage: np.ndarray, index: ClusterIndex, rules: Rules) -> bool:
    """Whether a job on ``current`` can stay where it is in the slot of ``usage`` (H,)."""
    if rules.exact_keep:
        return bool((usage + current.counts <= index.capacity).all())
    k = len(index.types)
    idle = np.bincount(index.node_type, weights=index.capacity - usage, minlength=k)
    return bool((np.bincount(index.node_type, weights=current.counts, minlength=k) <= idle + 1e-9).all())


@dataclass(frozen=True, eq=False)
class _Window:
    """The timeline as one job's schedules read it, decided in slot ``t0``."""

    t0: int
    starts: np.ndarray  # segment start slots
    lengths: np.ndarray  # slots per segment (the last ~forever)
    begins: np.ndarray  # candidate start slots
    n_fresh: np.ndarray  # slots per pace, paying a restore
    n_plain: np.ndarray  # slots per pace, without
    n_slow: float  # slots at the slowest pace
    keeps: bool  # the job can stay on its current placement now


def best_schedule(quote: Quote, timeline: Timeline, prices: Prices, index: ClusterIndex, rules: Rules,
                  t0: int) -> Schedule | None:
    """The best schedule for the job decided in slot ``t0`` (highest payoff); None if none fits."""
    rates, remaining = quote.rates, quote.remaining
    if remaining <= 0 or not (rates > 0).any():
        return None
    starts = np.array(timeline.starts, dtype=np.int64)
    usage = np.stack(timeline.usage).astype(float)
    units = job_prices(quote, prices, usage)
    n_plain = pace_slots(np.array([remaining]), rates[None, :], rules.slot)[0]
    cand = starts[(starts > t0) & (starts <= t0 + rules.horizon)]
    window = _Window(t0, starts, np.diff(np.append(starts, starts[-1] + 10**9)).astype(float),
                     np.concatenate(([t0], cand)).astype(np.int64),
                     pace_slots(np.array([remaining]), rates[None, :], rules.slot, quote.restart_delay)[0],
                     n_plain, float(n_plain[np.isfinite(n_plain)].max()),
                     quote.current is not None and can_keep(quote.current, usage[0], index, rules))
    best: Schedule | None = None
    per_pace = {}
    for m in np.flatnonzero(rates > 0):
        cost, feas = slot_costs(quote, index, int(m), units)
        per_pace[int(m)] = (cost, feas)
        found = _single_pace(quote, window, rules, int(m), cost, feas)
        if found is not None and (best is None or found.payoff > best.payoff):
            best = found
    varied = variable_pace(quote, window, rules, per_pace)
    if varied is not None and (best is None or varied.payoff > best.payoff):
        best = varied
    return best


def _single_pace(quote: Quote, window: _Window, rules: Rules, m: int, cost: np.ndarray,
                 feas: np.ndarray) -> Schedule | None:
    """The best schedule at pace ``m`` over the candidate starts (``cost``, ``feas``: :func:`slot_costs`)."""
    if not feas.any():
        return None
    starts, lengths, s_all, t0 = window.starts, window.lengths, window.begins, window.t0
    qf = np.concatenate(([0.0], np.cumsum(lengths * feas)))
    qc = np.concatenate(([0.0], np.cumsum(lengths * cost * feas)))

    def at(t: np.ndarray, q: np.ndarray, per: np.ndarray) -> np.ndarray:
        i = np.searchsorted(starts, t, side="right") - 1
        return q[i] + (t - starts[i]) * per[i]

    n = np.full(len(s_all), window.n_fresh[m])
    if window.keeps and quote.current is not None and quote.current.pace == m:
        n[0] = window.n_plain[m]
    f0 = at(s_all, qf, feas.astype(float))
    target = f0 + n
    i = np.searchsorted(qf, target, side="left") - 1
    valid = (i < len(starts)) & (i >= 0)
    i = np.clip(i, 0, len(starts) - 1)
    e_all = np.where(valid, starts[i] + (target - qf[i]), np.inf)
    e_int = np.where(valid, e_all, 0).astype(np.int64)
    win_cost = at(e_int, qc, cost * feas) - at(s_all, qc, cost * feas)
    utility = completion_utility(np.where(valid, e_all - t0, np.inf), window.n_slow)
    payoff = np.where(valid, utility - win_cost, -np.inf)
    if rules.max_slot is not None:
        payoff = np.where(e_all <= rules.max_slot, payoff, -np.inf)
    k = int(np.argmax(payoff))
    if not np.isfinite(payoff[k]):
        return None
    return Schedule(float(payoff[k]), int(s_all[k]), int(e_int[k]), m, float(utility[k]), float(win_cost[k]))


def variable_pace(quote: Quote, window: _Window, rules: Rules,
                  per_pace: dict[int, tuple[np.ndarray, np.ndarray]]) -> Schedule | None:
    """From now, each slot at the fastest pace that has W_j free GPUs (none: skip the slot):
    the schedule that changes pace as GPUs free up, paying a restore at each change."""
    rates, starts, lengths, slot = quote.rates, window.starts, window.lengths, rules.slot
    current, keeps = quote.current, window.keeps and quote.current is not None
    paces = sorted(per_pace, key=lambda m: -rates[m])
    chosen = np.full(len(starts), -1)
    for m in paces:
        chosen = np.where((chosen < 0) & per_pace[m][1], m, chosen)
    if chosen[0] < 0:
        return None  # nothing free now: the single-pace schedules cover waiting
    r_seg = np.where(chosen >= 0, rates[np.maximum(chosen, 0)], 0.0) * slot  # work per slot
    c_seg = np.array([per_pace[int(m)][0][i] if m >= 0 else 0.0 for i, m in enumerate(chosen)])
    restart = 0.0 if keeps and current is not None and current.pace == chosen[0] else quote.restart_delay
    # a restore at the start (unless it keeps its placement) and at every change of pace
    changes = np.concatenate(([restart > 0], (chosen[1:] != chosen[:-1]) & (chosen[1:] >= 0)))
    lost = np.where(changes, quote.restart_delay * r_seg / slot, 0.0)  # work lost per segment
    with np.errstate(over="ignore"):  # work beyond a float's range is more than any job has: inf
        done = np.concatenate(([0.0], np.cumsum(lengths * r_seg - lost)))
    i = int(np.searchsorted(done, quote.remaining * (1 - 1e-9), side="left")) - 1
    if i >= len(starts) or i < 0 or r_seg[i] <= 0:
        return None
    need = quote.remaining + lost[i]  # the restore of the last segment is counted in it
    end = int(starts[i] + max(1, math.ceil((need - done[i]) / r_seg[i] - 1e-9)))  # work left takes a slot
    if rules.max_slot is not None and end > rules.max_slot:
        return None
    cost = float((lengths[:i] * c_seg[:i]).sum() + (end - starts[i]) * c_seg[i])
    utility = float(completion_utility(np.array([end - window.t0]), window.n_slow)[0])
    keep = slice(0, i + 1)
    return Schedule(utility - cost, window.t0, end, int(chosen[0]), utility, cost,
                    (tuple(int(x) for x in starts[keep]), tuple(int(x) for x in chosen[keep])))


def commit_schedule(quote: Quote, sched: Schedule, timeline: Timeline, prices: Prices,
                    index: ClusterIndex) -> tuple[Piece, ...]:
    """Take the W_j cheapest eligible units in every slot of ``sched`` that has them (added to
    ``timeline``); the committed pieces."""
    w = quote.tasks
    a = timeline.split(sched.start)
    b = timeline.split(sched.end)
    bounds = timeline.starts[a : b + 1]
    if sched.paces is None:
        pace = np.full(b - a, sched.pace)
    else:
        seg_starts, seg_paces = (np.array(x) for x in sched.paces)
        pace = seg_paces[np.searchsorted(seg_starts, np.array(bounds[:-1]), side="right") - 1]
    ok = at_least_as_fast(quote.rates[index.node_type][None, :], quote.rates[pace][:, None])  # (segments, H)
    units = job_prices(quote, prices, np.stack(timeline.usage[a:b]).astype(float))
    flat = np.where(ok[:, :, None] & (pace >= 0)[:, None, None], units, np.inf).reshape(b - a, -1)
    pick = np.argpartition(flat, w - 1, axis=1)[:, :w]
    room = np.isfinite(np.take_along_axis(flat, pick, axis=1)).all(axis=1)
    pieces: list[Piece] = []
    for r, i in enumerate(range(a, b)):
        if not room[r]:
            continue  # the schedule skips this segment
        counts = np.bincount(pick[r] // w, minlength=len(index.nodes))
        timeline.usage[i] = timeline.usage[i] + counts
        pieces.append((bounds[r], bounds[r + 1], counts))
    return tuple(pieces)


def current_of(job: JobState, index: ClusterIndex, rates: np.ndarray) -> Current | None:
    """Where ``job`` (whole-job ``rates`` per type) runs now; None if not running a full gang on this cluster."""
    a = job.allocation
    if a is None or not a.placement or not index.knows(a.placement):
        return None
    counts = index.node_counts(a.placement)
    if counts.sum() != job.requested_gpus:
        return None
    used = np.unique(index.node_type[counts > 0])
    return Current(int(used[np.argmin(rates[used])]), counts)
