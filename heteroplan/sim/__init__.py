"""Cluster simulation: one round loop for every policy, and its metrics.

- :func:`simulate` (:mod:`heteroplan.sim.loop`): one policy on one workload and cluster; Sia
  workload jobs (goodput ground truth) and rigid jobs with throughput tables alike.
- :func:`run_policy` / :func:`compare_policies`: by registered name, or several at once.
- :class:`SimResult`: per-job records, per-round logs, typed events (:class:`SimEvent`) and, when
  recorded, the session's decisions; metrics (JCT, makespan, GPU-hours,
  restarts, utilization, FTF, policy time), JSON, plots.
- :class:`SimulatedTraining` (:mod:`heteroplan.sim.training`): the modelled progress the loop
  feeds its :class:`~heteroplan.scheduling.SchedulingSession`; a user's own loop can use it too.
- :mod:`heteroplan.sim.hadar_experiments`: Hadar's pure online algorithm vs the offline MILP.
"""

from heteroplan.policies.base import AllocationError
from heteroplan.policies.registry import POLICIES, make_policy
from heteroplan.sim.compare import compare_policies, run_policy
from heteroplan.sim.events import SimEvent, SimEventKind
from heteroplan.sim.fidelity import SimFidelity
from heteroplan.sim.loop import simulate
from heteroplan.sim.metrics import JobRecord, SimResult, compare_table
from heteroplan.sim.training import SimulatedTraining

__all__ = [
    "AllocationError",
    "JobRecord",
    "POLICIES",
    "SimFidelity",
    "SimEvent",
    "SimEventKind",
    "SimResult",
    "SimulatedTraining",
    "compare_policies",
    "compare_table",
    "make_policy",
    "run_policy",
    "simulate",
]
