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

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from heteroplan.errors import InputError
from heteroplan.milp import Model

__all__ = ["HadarInstance", "hadar_milp", "hadar_utility"]


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
        j, k = np.shape(self.rates)
        for name, arr, shape in (
            ("arrival", self.arrival, (j,)),
            ("tasks", self.tasks, (j,)),
            ("steps", self.steps, (j,)),
            ("node_type", self.node_type, np.shape(self.capacity)),
        ):
            if np.shape(arr) != shape:
                raise InputError(f"instance.{name}.shape", np.shape(arr), f"must be {shape}")
        if self.slots < 1:
            raise InputError("instance.slots", self.slots, "must be >= 1")
        if (np.asarray(self.rates) < 0).any():
            raise InputError("instance.rates", self.rates, "must be >= 0")
        if (np.asarray(self.node_type) >= k).any() or (np.asarray(self.node_type) < 0).any():
            raise InputError("instance.node_type", self.node_type, f"must index the {k} types")
        cap_by_type = np.bincount(self.node_type, weights=self.capacity, minlength=k)
        usable = ((np.asarray(self.rates) > 0) * cap_by_type[None, :]).sum(axis=1)
        bad = np.flatnonzero(np.asarray(self.tasks) > usable)
        if bad.size:
            raise InputError(
                f"instance.tasks[{int(bad[0])}]", int(self.tasks[bad[0]]), f"exceeds {usable[bad[0]]:g} usable GPUs"
            )


def hadar_utility(instance: HadarInstance) -> np.ndarray:
    """``f[j, c] = W_j * n0_j**2 / (c - a_j + 1)`` for c >= a_j (0 before), with
    ``n0_j = ceil(E_j / (slot * max_k T[j, k]))`` — the utility :class:`HadarPolicy` uses."""
    best = np.asarray(instance.rates, float).max(axis=1)
    n0 = np.ceil(instance.steps / (instance.slot * best) - 1e-9)
    d = np.arange(instance.slots)[None, :] - np.asarray(instance.arrival)[:, None] + 1
    return np.where(d >= 1, instance.tasks[:, None] * n0[:, None] ** 2 / np.maximum(d, 1), 0.0)


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
    fast_enough = (node_rate[:, :, None] >= tp[:, None, :] - 1e-12) & pace_ok[:, None, :]  # (J, H, K)
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
