"""Round-based cluster schedulers behind one :class:`~heteroplan.policies.base.Policy` protocol.

``allocate(cluster, jobs, now) -> {job_id: Allocation}``; the same objects drive the simulator
and the runtime. Policies: :mod:`~heteroplan.policies.sia`, :mod:`~heteroplan.policies.pollux`
(and the Sia artifact's, :mod:`~heteroplan.policies.pollux_artifact`),
:mod:`~heteroplan.policies.gavel` (its LPs in :mod:`~heteroplan.policies.gavel_lp`),
:mod:`~heteroplan.policies.hadar` (its books, dual subroutine, order and slot functions in
``hadar_state``, ``hadar_schedule``, ``hadar_order``, ``hadar_round``),
:mod:`~heteroplan.policies.yarn` (FIFO/YARN-CS), :mod:`~heteroplan.policies.tiresias`.
One class per mechanism; the registry (:mod:`~heteroplan.policies.registry`) builds them by name.
"""

from heteroplan.policies.base import Allocation, JobState, PerfModel, Policy

__all__ = ["Allocation", "JobState", "PerfModel", "Policy"]
