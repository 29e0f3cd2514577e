"""Hadar experiments: the pure online algorithm on an offline instance, against the MILP.

:func:`evaluate_online` runs :class:`~heteroplan.policies.hadar.HadarPolicy` (``retry=False``)
in the round loop on a :class:`~heteroplan.formulations.hadar.HadarInstance` and scores it
with the instance's utility, directly comparable with the offline optimum
(:func:`~heteroplan.formulations.hadar.hadar_milp`); :func:`density_lower_bound` gives the
price floor ``L`` under which the first job is always admitted.
"""

from __future__ import annotations

import math

import numpy as np

from heteroplan.cluster import Cluster, GPUType, Node
from heteroplan.errors import InputError
from heteroplan.formulations.hadar import HadarInstance, hadar_utility
from heteroplan.policies.hadar import HadarPolicy
from heteroplan.sim.loop import simulate
from heteroplan.workload.rigid import RigidJob

__all__ = ["density_lower_bound", "evaluate_online"]


def density_lower_bound(instance: HadarInstance) -> float:
    """Smallest over jobs of the best utility per GPU-slot a job can earn (idle cluster).

    Job j started at arrival at pace m finishes after ``n_m`` slots and earns
    ``W_j n0**2 / n_m`` for ``W_j n_m`` GPU-slots; its best density is ``max_m (n0 / n_m)**2``.
    ``L`` at or below this value lets the first job always be admitted (the OASiS condition).
    """
    rates = np.asarray(instance.rates, dtype=float)
    steps = np.asarray(instance.steps, dtype=float)[:, None]
    with np.errstate(divide="ignore"):
        n = np.where(rates > 0, np.ceil(steps / (instance.slot * rates) - 1e-9), np.inf)
    n0 = n.min(axis=1)
    cap_type = np.bincount(instance.node_type, weights=instance.capacity, minlength=rates.shape[1])
    eligible_cap = ((rates[:, None, :] >= rates[:, :, None]) * cap_type[None, None, :]).sum(axis=2)  # (J, pace)
    fits = eligible_cap >= np.asarray(instance.tasks)[:, None]
    n_fit = np.where(fits, n, np.inf).min(axis=1)
    return float(((n0 / n_fit) ** 2).min())


def evaluate_online(instance: HadarInstance, **policy_options: object) -> tuple[float, dict[str, int], float]:
    """Run the pure online algorithm on a :class:`~heteroplan.formulations.hadar.HadarInstance`.

    Builds the instance's cluster (node h of type ``t<k>``) and jobs, simulates
    :class:`HadarPolicy` (``retry=False``, schedules inside the horizon unless overridden) in
    the round loop and returns (objective, completion slot per finished job), the
    objective being ``sum f[j, c_j]`` with the instance's :func:`hadar_utility` — directly
    comparable with the offline MILP optimum — and the policy's ``alpha``. Unless ``lower``
    is given, ``L`` is half the instance's :func:`density_lower_bound`.
    """
    if not isinstance(instance, HadarInstance):
        raise InputError("instance", type(instance).__name__, "must be a HadarInstance")
    num_types = np.shape(instance.rates)[1]
    cap = np.asarray(instance.capacity)
    per_node = max(int(cap.max()), 1)
    types = [GPUType(f"t{k}", 16, per_node) for k in range(num_types)]
    nodes = [Node(f"n{h}", f"t{int(k)}", int(c)) for h, (k, c) in enumerate(zip(instance.node_type, cap, strict=True))]
    cluster = Cluster(tuple(types), tuple(nodes), name="hadar-instance")
    jobs = [
        RigidJob(
            f"j{j}",
            int(instance.tasks[j]),
            float(instance.steps[j]),
            float(instance.arrival[j]) * instance.slot,
            {f"t{k}": float(instance.rates[j][k]) for k in range(num_types)},
        )
        for j in range(len(instance.tasks))
    ]
    options: dict = {
        "retry": False,
        "max_slot": int(instance.slots),
        "slot": instance.slot,
        "lower": 0.5 * density_lower_bound(instance),
    }
    options.update(policy_options)
    policy = HadarPolicy(**options)
    result = simulate(jobs, cluster, policy, round_length=instance.slot, max_rounds=int(instance.slots),
                      progress=False)
    f = hadar_utility(instance)
    slots: dict[str, int] = {}
    total = 0.0
    for jid, end in result.completion.items():
        c = int(math.ceil(end / instance.slot - 1e-9)) - 1
        slots[jid] = c
        if c < instance.slots:
            total += float(f[int(jid[1:]), c])
    return total, slots, policy.alpha
