"""Hadar's offline problem: the time-slotted MILP the online algorithm is measured against.

Data: jobs j with arrival slot ``a_j``, ``W_j`` tasks, ``E_j`` steps; ``T[j, m]`` = steps/s of
the whole job when its slowest task runs on type m (0: cannot run there); nodes h with
``C_h`` GPUs of type ``k(h)``; ``S`` slots of ``slot`` seconds; ``f[j, c]`` = utility of
finishing at the end of slot c.

Variables (all vectorized blocks):

- ``y[j, t, m]`` binary: j runs in slot t at pace m (m = slowest type it uses);
- ``x[j, h, t, m]`` integer: GPUs of node h given to j in slot t under pace m, allowed only
  when ``T[j, k(h)] >= T[j, m]`` (a task on h is at least as fast as the pace);
- ``z[j, c]`` binary: j completes at the end of slot c.

Constraints::

    sum_h x[j,h,t,m] = W_j y[j,t,m]                       gang: all W_j tasks or none
    sum_m y[j,t,m] <= 1                                   one pace per slot
    sum_{j,m} x[j,h,t,m] <= C_h                           node capacity
    sum_{t<=c} sum_m slot*T[j,m] y[j,t,m] >= E_j sum_{c'<=c} z[j,c']   work done by completion
    sum_m y[j,t,m] + sum_{c<t} z[j,c] <= 1                nothing after completion
    sum_c z[j,c] <= 1;  y = x = z = 0 before a_j

Objective: maximize ``sum_{j,c} f[j,c] z[j,c]``. Progress in a slot at pace m is
``W_j * slot * r_j^m = slot * T[j, m]``: the slowest task sets the pace, so choosing m as the
slowest used type is optimal and the model is exact for the task-level heterogeneous problem.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from heteroplan.errors import InputError
from heteroplan.inputs import is_count, real_value
from heteroplan.milp import Model
from heteroplan.milp.args import numbers_array

__all__ = ["HadarInstance", "at_least_as_fast", "completion_utility", "density_bounds", "hadar_milp", "hadar_utility", "makespan_bound_lp",
           "pace_slots"]


MAX_SLOTS = 2000
"""Most time slots of an offline instance (the MILP holds dense ``slots x slots`` blocks per job:
32 MB at 2000 slots; 2000 slots of 360 s are 8 days)."""


@dataclass(frozen=True)
class HadarInstance:
    """A small offline instance (arrays; see module docstring for symbols).

    Attributes:
        arrival: ``(J,)`` arrival slot of each job.
        tasks: ``(J,)`` W_j.
        steps: ``(J,)`` E_j.
        rates: ``(J, K)`` whole-job steps/s per pace type.
        capacity: ``(H,)`` GPUs per node.
        node_type: ``(H,)`` type index of each node.
        slots: number of slots S.
        slot: slot length (s).
    """

    arrival: np.ndarray
    tasks: np.ndarray
    steps: np.ndarray
    rates: np.ndarray
    capacity: np.ndarray
    node_type: np.ndarray
    slots: int
    slot: float = 360.0

    def __post_init__(self) -> None:
        rates = numbers_array("instance.rates", self.rates)
        if rates.ndim != 2:
            raise InputError("instance.rates.shape", rates.shape, "must be (jobs, types)")
        j, k = rates.shape
        for name, arr, shape in (
            ("arrival", self.arrival, (j,)),
            ("tasks", self.tasks, (j,)),
            ("steps", self.steps, (j,)),
            ("node_type", self.node_type, np.shape(self.capacity)),
        ):
            if np.shape(arr) != shape:
                raise InputError(f"instance.{name}.shape", np.shape(arr), f"must be {shape}")
        if not is_count(self.slots) or self.slots < 1:  # 2.5 was a shape error below
            raise InputError("instance.slots", self.slots, "must be an integer >= 1")
        if self.slots > MAX_SLOTS:  # the model holds dense (slots x slots) blocks: 10**7 slots never answered
            raise InputError("instance.slots", self.slots, f"must be at most {MAX_SLOTS:,} (an offline instance is small)")
        if not (math.isfinite(real_value(self.slot)) and real_value(self.slot) > 0):
            raise InputError("instance.slot", self.slot, "must be a finite number of seconds > 0")
        if not (np.isfinite(rates) & (rates >= 0)).all():  # NaN failed in the model's constants, named 'constant'
            raise InputError("instance.rates", self.rates, "must be finite and >= 0")
        for name, low, whole in (("arrival", 0, True), ("tasks", 1, True), ("steps", 0, False), ("capacity", 0, True)):
            arr = numbers_array(f"instance.{name}", getattr(self, name))  # NaN, -1, 0 tasks, 1.5 GPUs were taken
            if not (np.isfinite(arr) & (arr >= low)).all() or (whole and (arr != np.round(arr)).any()):
                raise InputError(f"instance.{name}", getattr(self, name),
                                 f"must be finite {'whole numbers' if whole else 'numbers'} >= {low}")
        node_type = np.asarray(self.node_type)
        if node_type.dtype.kind not in "iu" or (node_type >= k).any() or (node_type < 0).any():
            raise InputError("instance.node_type", self.node_type, f"must index the {k} types (integers)")
        cap_by_type = np.bincount(self.node_type, weights=self.capacity, minlength=k)
        usable = ((np.asarray(self.rates) > 0) * cap_by_type[None, :]).sum(axis=1)
        bad = np.flatnonzero(np.asarray(self.tasks) > usable)
        if bad.size:
            raise InputError(
                f"instance.tasks[{int(bad[0])}]", int(self.tasks[bad[0]]), f"exceeds {usable[bad[0]]:g} usable GPUs"
            )


def pace_slots(remaining: np.ndarray, rates: np.ndarray, slot: float, delay: float | np.ndarray = 0.0) -> np.ndarray:
    """Slots a job needs at each pace: ``ceil((E / (slot * T) + delay / slot))`` (inf where T = 0),
    at least one while work is left (a pace so fast that the work takes under a slot still takes one).

    ``remaining`` (J,) work left (steps), ``rates`` (J, K) whole-job steps/s per pace, ``slot`` s,
    ``delay`` s of checkpoint-restore paid before the work (0: none).
    """
    rates = np.asarray(rates, dtype=float)
    work = np.asarray(remaining, dtype=float).reshape(-1, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        seconds = np.where(rates > 0, work / np.where(rates > 0, rates, 1.0), np.inf)
    slots = np.ceil((seconds + np.asarray(delay, dtype=float).reshape(-1, 1)) / slot - 1e-9)
    return np.where(work > 0, np.maximum(slots, 1.0), slots)


def at_least_as_fast(rate: np.ndarray, pace_rate: np.ndarray) -> np.ndarray:
    """Whether a GPU of ``rate`` can run a job at a pace of ``pace_rate`` (steps/s, broadcast):
    ``rate >= pace_rate`` up to a relative 1e-12 (float noise), whatever unit the rates are in."""
    return np.asarray(rate, dtype=float) >= np.asarray(pace_rate, dtype=float) * (1 - 1e-12)


def completion_utility(slots_to_finish: np.ndarray, slowest_slots: np.ndarray) -> np.ndarray:
    """``f = max(0, 2 n_slow - d)``: utility of finishing ``d`` slots after the decision, in slots.

    The slope is -1 per slot of completion time, so total utility is a constant minus the sum
    of JCTs (the offline objective is average JCT). The offset ``2 n_slow`` (twice the job's
    time at its slowest pace) makes every pace worth at least ``n_slow`` on an idle cluster:
    a slower type is admissible whenever it finishes the job sooner than waiting (docs/hadar.md).
    """
    return np.maximum(0.0, 2.0 * np.asarray(slowest_slots, float) - np.asarray(slots_to_finish, float))


def density_bounds(slots: np.ndarray, tasks: np.ndarray) -> tuple[float, float]:
    """(lowest, highest) utility per GPU-slot of a schedule that starts at once at one pace.

    ``slots`` (J, K): slots at each pace (inf: cannot run); ``tasks`` (J,): W_j. A schedule at
    pace m uses ``W_j n_jm`` GPU-slots and earns :func:`completion_utility` of ``n_jm``. The
    primal-dual prices run between these two bounds (L and U).
    """
    n = np.asarray(slots, dtype=float)
    ok = np.isfinite(n)
    n_slow = np.where(ok, n, -np.inf).max(axis=1, keepdims=True)
    w = np.asarray(tasks, dtype=float).reshape(-1, 1)
    dens = completion_utility(np.where(ok, n, 1.0), n_slow) / (w * np.where(ok, n, 1.0))
    return float(dens[ok].min()), float(dens[ok].max())


def hadar_utility(instance: HadarInstance) -> np.ndarray:
    """``f[j, c] = max(0, 2 n_slow_j - (c - a_j + 1))`` for c >= a_j (0 before), with ``n_slow_j``
    the slots of job j at its slowest pace (:func:`completion_utility`, the utility :class:`HadarPolicy` uses)."""
    n = pace_slots(instance.steps, instance.rates, instance.slot)
    n_slow = np.where(np.isfinite(n), n, -np.inf).max(axis=1)
    d = np.arange(instance.slots)[None, :] - np.asarray(instance.arrival)[:, None] + 1
    return np.where(d >= 1, completion_utility(d, n_slow[:, None]), 0.0)


def hadar_milp(instance: HadarInstance, utility: np.ndarray | None = None) -> Model:
    """Build the offline MILP (blocks ``y``, ``x``, ``z``); ``utility`` defaults to :func:`hadar_utility`."""
    inst = instance
    tp = np.asarray(inst.rates, dtype=float)
    num_jobs, num_types = tp.shape
    num_nodes, num_slots = len(inst.capacity), int(inst.slots)
    f = hadar_utility(inst) if utility is None else np.asarray(utility, dtype=float)
    if f.shape != (num_jobs, num_slots):
        raise InputError("utility.shape", f.shape, f"must be ({num_jobs}, {num_slots})")
    t_idx = np.arange(num_slots)
    live = t_idx[None, :] >= np.asarray(inst.arrival)[:, None]  # (J, S)
    pace_ok = tp > 0  # (J, K)
    y_ub = live[:, :, None] & pace_ok[:, None, :]  # (J, S, K)
    node_rate = tp[:, inst.node_type]  # (J, H)
    fast_enough = at_least_as_fast(node_rate[:, :, None], tp[:, None, :]) & pace_ok[:, None, :]  # (J, H, K)
    x_ub = fast_enough[:, :, None, :] & live[:, None, :, None]  # (J, H, S, K)
    cap = np.asarray(inst.capacity, dtype=float)

    m = Model("hadar_offline")
    y = m.add_variables("y", (num_jobs, num_slots, num_types), lb=0, ub=y_ub.astype(float), integer=True)
    x = m.add_variables(
        "x",
        (num_jobs, num_nodes, num_slots, num_types),
        lb=0,
        ub=x_ub * cap[None, :, None, None],
        integer=True,
    )
    z = m.add_variables("z", (num_jobs, num_slots), lb=0, ub=live.astype(float), integer=True)

    m.add_constraints(x.sum(axis=1) - y * np.asarray(inst.tasks, float)[:, None, None] == 0, name="gang")
    m.add_constraints(y.sum(axis=2) <= 1, name="one_pace")
    m.add_constraints(x.sum(axis=(0, 3)) <= cap[:, None], name="capacity")
    m.add_constraints(z.sum(axis=1) <= 1, name="one_completion")
    progress = (y * (inst.slot * tp)[:, None, :]).sum(axis=2)  # (J, S) steps
    cum = sp.kron(sp.identity(num_jobs), sp.csr_matrix(np.tril(np.ones((num_slots, num_slots)))))
    before = sp.kron(sp.identity(num_jobs), sp.csr_matrix(np.tril(np.ones((num_slots, num_slots)), -1)))
    done = cum @ z.ravel()
    m.add_constraints(
        cum @ progress.ravel() - done * np.repeat(np.asarray(inst.steps, float), num_slots) >= 0, name="work"
    )
    m.add_constraints(y.sum(axis=2).ravel() + before @ z.ravel() <= 1, name="stop_after_completion")
    m.maximize((z * f).sum())
    return m


def makespan_bound_lp(work: np.ndarray, rates: np.ndarray, tasks: np.ndarray, capacity: np.ndarray) -> Model:
    """LP lower bound on the time to finish ``work`` with every job present from the start.

    ``y[j, k]`` = seconds job j runs on type k with its ``W_j`` GPUs (``rates[j, k]`` whole-job
    steps/s, 0: cannot run there); ``T`` = the bound::

        sum_k rates[j,k] y[j,k] >= work_j          every job gets its work done
        sum_j W_j y[j,k] <= capacity_k T           type k's GPU-seconds within T
        minimize T

    It drops gangs' sequencing and lets a job's work split across types (as HadarE's copies
    may), so it bounds every policy; :func:`heteroplan.sim.hadar_experiments.makespan_floor`
    adds the jobs' arrivals.
    """
    r = numbers_array("rates", rates)
    if r.ndim != 2:
        raise InputError("rates.shape", r.shape, "must be (jobs, types)")
    num_jobs, num_types = r.shape
    if np.shape(capacity) != (num_types,) or np.shape(tasks) != (num_jobs,) or np.shape(work) != (num_jobs,):
        raise InputError("makespan_bound_lp.shapes", (np.shape(work), r.shape, np.shape(tasks), np.shape(capacity)),
                         "need work (J,), rates (J, K), tasks (J,), capacity (K,)")
    for name, value, low in (("work", work, 0), ("rates", rates, 0), ("tasks", tasks, 1), ("capacity", capacity, 0)):
        arr = numbers_array(name, value)  # work -1 and 0 tasks were taken: a bound below every schedule
        if not (np.isfinite(arr) & (arr >= low)).all():
            raise InputError(name, value, f"must be finite numbers >= {low}")
    m = Model("hadar_makespan_bound")
    y = m.add_variables("y", (num_jobs, num_types), lb=0, ub=np.where(r > 0, np.inf, 0.0))
    t = m.add_variables("T", (1,), lb=0)
    m.add_constraints((y * r).sum(axis=1) >= np.asarray(work, dtype=float), name="work")
    cap = np.asarray(capacity, dtype=float)
    m.add_constraints((y * np.asarray(tasks, float)[:, None]).sum(axis=0) - t * cap <= 0, name="capacity")
    m.minimize(t.sum())
    return m
