"""Run several policies on one workload and collect their results."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from heteroplan.cluster import Cluster
from heteroplan.errors import InputError
from heteroplan.policies.base import Policy
from heteroplan.policies.registry import make_policy
from heteroplan.sim.loop import simulate
from heteroplan.sim.metrics import Comparison, SimResult
from heteroplan.workload.rigid import RigidJob
from heteroplan.workload.sia import JobSpec

__all__ = ["make_policy", "compare_policies", "run_policy"]


def run_policy(jobs: Sequence[JobSpec | RigidJob], cluster: Cluster, policy: str | Policy, **kwargs: Any) -> SimResult:
    """Simulate ONE policy (a registered name or an object) on one workload and cluster."""
    return simulate(jobs, cluster, make_policy(policy) if isinstance(policy, str) else policy, **kwargs)


def compare_policies(
    jobs: Sequence[JobSpec | RigidJob], cluster: Cluster, policies: Sequence[str | Policy], progress: bool | None = None,
    **kwargs: Any,
) -> Comparison:
    """Simulate ``jobs`` under each policy (names or objects) and return the results in order
    (a :class:`~heteroplan.sim.metrics.Comparison`: a list with ``to_dataframe()`` and a notebook table).
    ``policies`` is a list even of one (``"fifo"`` alone was read as the policies ``f``, ``i``, ...)."""
    if isinstance(policies, str) or not isinstance(policies, Iterable):
        raise InputError("policies", policies, "must be a list of policy names or Policy objects (['sia', 'fifo'])")
    return Comparison(run_policy(jobs, cluster, p, progress=progress, **kwargs) for p in policies)
