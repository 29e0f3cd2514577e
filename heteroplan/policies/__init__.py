"""Round-based cluster schedulers behind one :class:`~heteroplan.policies.base.Policy` protocol.

``allocate(cluster, jobs, now) -> {job_id: Allocation}``; the same objects drive the simulator
and the runtime. Policies: :mod:`~heteroplan.policies.sia`, :mod:`~heteroplan.policies.pollux`,
:mod:`~heteroplan.policies.gavel`, :mod:`~heteroplan.policies.hadar`,
:mod:`~heteroplan.policies.yarn` (FIFO/YARN-CS), :mod:`~heteroplan.policies.tiresias`.
"""

from heteroplan.policies.base import Allocation, GoodputEstimator, JobState, Policy

__all__ = ["Allocation", "GoodputEstimator", "JobState", "Policy"]
