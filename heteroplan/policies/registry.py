"""One policy registry: name -> factory with options, for the CLI, the simulator and the runtime.

``make_policy("gavel", round_length=120)`` builds a policy by name; options go to its
constructor (``round_length`` is understood by every policy: Hadar's slot is its round).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from heteroplan.errors import InputError
from heteroplan.policies.base import Policy

__all__ = ["PolicyEntry", "POLICIES", "make_policy", "policy_names"]


@dataclass(frozen=True)
class PolicyEntry:
    """A registered policy: ``factory(**options)`` builds it; ``summary`` says what it is."""

    name: str
    factory: Callable[..., Policy]
    summary: str


def _sia(**options: Any) -> Policy:
    from heteroplan.policies.sia import SiaPolicy

    return SiaPolicy(**options)


def _sia_lp(**options: Any) -> Policy:
    from heteroplan.policies.sia import SiaPolicy

    return SiaPolicy(**({"mode": "lp-round", "name": "sia-lp"} | options))


def _pollux(**defaults: Any) -> Callable[..., Policy]:
    def make(**options: Any) -> Policy:
        from heteroplan.policies.pollux import PolluxPolicy

        return PolluxPolicy(**(defaults | options))

    return make


def _gavel(**defaults: Any) -> Callable[..., Policy]:
    def make(**options: Any) -> Policy:
        from heteroplan.policies.gavel import GavelPolicy

        if defaults.get("mechanism") == "sia-artifact" and "slowdowns" not in options:
            from heteroplan.perf.applications import SIA_SLOWDOWNS

            options = options | {"slowdowns": SIA_SLOWDOWNS}

        return GavelPolicy(**(defaults | options))  # 360 s rounds: at 60 s time-slicing restarts jobs every round

    return make


def _yarn(name: str) -> Callable[..., Policy]:
    def make(**options: Any) -> Policy:
        from heteroplan.policies.yarn import YarnCSPolicy

        return YarnCSPolicy(**({"name": name} | options))

    return make


def _tiresias(**options: Any) -> Policy:
    from heteroplan.policies.tiresias import TiresiasPolicy

    return TiresiasPolicy(**options)


def _hadar(**defaults: Any) -> Callable[..., Policy]:
    def make(**options: Any) -> Policy:
        from heteroplan.policies.hadar import HadarPolicy

        merged = defaults | options
        if "round_length" in merged:
            merged["slot"] = merged.pop("round_length")
        return HadarPolicy(**merged)

    return make


POLICIES: Mapping[str, PolicyEntry] = MappingProxyType({e.name: e for e in (
    PolicyEntry("sia", _sia, "Sia: heterogeneity- and adaptivity-aware ILP over goodput (elastic)"),
    PolicyEntry("sia-lp", _sia_lp, "Sia with LP relaxation + rounding (elastic)"),
    PolicyEntry("pollux", _pollux(), "Pollux: goodput-optimizing, heterogeneity-unaware (elastic)"),
    PolicyEntry("pollux-sia", _pollux(mechanism="sia-artifact", name="pollux-sia"),
                "Pollux as the Sia artifact runs it: one profile merged across GPU types, 4-GPU virtual nodes in a random order, majority-type fix-up (elastic)"),
    PolicyEntry("gavel", _gavel(), "Gavel: max-min fairness LP over time fractions (rigid, 360 s rounds)"),
    PolicyEntry("gavel-agnostic", _gavel(objective="max_min_fairness_agnostic", name="gavel-agnostic"),
                "Gavel: heterogeneity-agnostic max-min fairness over time shares (rigid)"),
    PolicyEntry("gavel-throughput", _gavel(objective="max_sum_throughput", name="gavel-throughput"),
                "Gavel: max-sum-throughput LP (rigid)"),
    PolicyEntry("gavel-ftf", _gavel(objective="finish_time_fairness", name="gavel-ftf"),
                "Gavel: finish-time fairness (bisection over LPs, rigid)"),
    PolicyEntry("gavel-makespan", _gavel(objective="min_makespan", name="gavel-makespan"),
                "Gavel: minimize makespan LP (rigid)"),
    PolicyEntry("gavel-cost", _gavel(objective="max_throughput_per_cost", name="gavel-cost"),
                "Gavel: throughput per dollar LP (GPU prices of the cluster; rigid)"),
    PolicyEntry("gavel-sia", _gavel(objective="max_sum_throughput", mechanism="sia-artifact", name="gavel-sia"),
                "Gavel as the Sia artifact runs it: max-sum-throughput, interior-point, its priorities (rigid)"),
    PolicyEntry("fifo", _yarn("fifo"), "FIFO gang scheduling, no preemption (rigid)"),
    PolicyEntry("yarn-cs", _yarn("yarn-cs"), "YARN capacity scheduler: FIFO + gang (rigid)"),
    PolicyEntry("tiresias", _tiresias, "Tiresias: discretized 2D-LAS (rigid)"),
    PolicyEntry("hadar", _hadar(), "Hadar: online primal-dual, task-level heterogeneous (rigid, 360 s slots)"),
    PolicyEntry("hadar-replan", _hadar(replan=True), "Hadar re-planning every active job each round (rigid)"),
    PolicyEntry("hadare", _hadar(forking=True), "HadarE: Hadar with job forking onto idle GPUs (rigid)"),
)})


def policy_names() -> list[str]:
    """Registered policy names, sorted."""
    return sorted(POLICIES)


def make_policy(name: str, **options: Any) -> Policy:
    """A fresh policy by registered name; ``options`` go to its constructor."""
    try:
        entry = POLICIES[name]
    except KeyError:
        raise InputError("policy", name, f"unknown policy; known: {policy_names()}") from None
    try:
        return entry.factory(**options)
    except TypeError as exc:  # an option the policy does not take
        raise InputError(f"policy[{name}].options", sorted(options), f"not accepted: {exc}") from None
