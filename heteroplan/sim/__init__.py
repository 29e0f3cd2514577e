"""Cluster simulators and metrics.

- :func:`simulate` / :class:`Simulator`: the round-based simulator of the Sia evaluation
  (elastic or rigid jobs, goodput-driven progress, checkpoint-restore delays).
- :func:`compare_policies`: run several policies on one workload.
- :class:`SimResult`: metrics (JCT, makespan, GPU-hours, restarts, FTF, policy time), JSON, plots.
"""

from heteroplan.sim.compare import POLICY_FACTORIES, compare_policies, make_policy
from heteroplan.sim.metrics import JobRecord, SimResult, compare_table
from heteroplan.sim.simulator import AllocationError, Simulator, simulate

__all__ = [
    "AllocationError",
    "JobRecord",
    "POLICY_FACTORIES",
    "SimResult",
    "Simulator",
    "compare_policies",
    "compare_table",
    "make_policy",
    "simulate",
]
