"""What a round loop needs of a policy, and the policy options it reads (never its name)."""

from __future__ import annotations

import math

from heteroplan.errors import InputError
from heteroplan.policies.base import Policy

__all__ = ["check_policy", "restart_delay_of"]


def check_policy(policy: object) -> Policy:
    """``policy`` if it declares what a round loop needs (see :class:`Policy`), else :class:`InputError`."""
    missing = [a for a in ("name", "round_length", "elastic", "forking", "allocate") if not hasattr(policy, a)]
    if missing:
        raise InputError("policy", type(policy).__name__,
                         f"is not a Policy: it lacks {missing} (declare name, round_length s, elastic, forking; "
                         "or subclass heteroplan.policies.base.PolicyBase)")
    if not callable(policy.allocate):  # type: ignore[attr-defined]
        raise InputError("policy.allocate", policy.allocate, "must be callable(cluster, jobs, now)")  # type: ignore[attr-defined]
    restart_delay_of(policy)
    return policy  # type: ignore[return-value]


def restart_delay_of(policy: object) -> float | None:
    """The policy's ``restart_delay_s`` option: seconds every (re)start of its jobs costs, or
    ``None`` (absent or None: each job pays its own measured delay)."""
    value = getattr(policy, "restart_delay_s", None)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not (value >= 0 and math.isfinite(value)):
        raise InputError(f"policy[{getattr(policy, 'name', '?')}].restart_delay_s", value, "must be seconds >= 0 or None")
    return float(value)
