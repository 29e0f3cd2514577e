"""Run several policies on one workload and collect their results."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from heteroplan.cluster import Cluster
from heteroplan.errors import InputError
from heteroplan.policies.base import Policy
from heteroplan.sim.simulator import simulate
from heteroplan.sim.tables import Comparison
from heteroplan.workload.sia import JobSpec

__all__ = ["POLICY_FACTORIES", "make_policy", "compare_policies"]


def _fifo() -> Policy:
    from heteroplan.policies.yarn import YarnCSPolicy

    policy = YarnCSPolicy()
    policy.name = "fifo"
    return policy


def _gavel() -> Policy:
    from heteroplan.policies.gavel import GavelPolicy

    policy = GavelPolicy()
    policy.round_length = 360.0  # Gavel's default round; at 60 s its time-slicing restarts jobs every round
    return policy


def _factories() -> dict[str, Callable[[], Policy]]:
    from heteroplan.policies.pollux import PolluxPolicy
    from heteroplan.policies.sia import SiaPolicy
    from heteroplan.policies.tiresias import TiresiasPolicy
    from heteroplan.policies.yarn import YarnCSPolicy

    return {
        "sia": SiaPolicy,
        "sia-lp": lambda: SiaPolicy(mode="lp-round", name="sia-lp"),
        "pollux": PolluxPolicy,
        "gavel": _gavel,
        "fifo": _fifo,
        "yarn-cs": YarnCSPolicy,
        "tiresias": TiresiasPolicy,
    }


POLICY_FACTORIES = _factories()


def make_policy(name: str) -> Policy:
    """A policy by name (see :data:`POLICY_FACTORIES`)."""
    try:
        return POLICY_FACTORIES[name]()
    except KeyError:
        raise InputError("policy", name, f"unknown policy; known: {sorted(POLICY_FACTORIES)}") from None


def compare_policies(
    jobs: Sequence[JobSpec], cluster: Cluster, policies: Sequence[str | Policy], progress: bool | None = None, **kwargs: Any
) -> Comparison:
    """Simulate ``jobs`` under each policy (names or objects) and return the results in order
    (a :class:`~heteroplan.sim.tables.Comparison`: a list with ``to_dataframe()`` and a notebook table)."""
    objs = [make_policy(p) if isinstance(p, str) else p for p in policies]
    return Comparison(simulate(jobs, cluster, p, progress=progress, **kwargs) for p in objs)
