"""A policy's own state between rounds: what it must expose so a restored session decides alike.

Most policies decide each round from the cluster and the jobs' views alone (Sia, FIFO,
YARN-CS, Tiresias): they are stateless. Others remember between rounds what the job views do
not carry: Gavel its time fractions and the rounds or seconds each job got on each type (its
priorities), Pollux as the Sia artifact runs it (``pollux-sia``) its virtual nodes, merged
profiles and random generator, Hadar its committed plans, GPU commitments and the rates it
read. Such a policy implements :class:`StatefulPolicy`: ``state()`` returns a frozen
:class:`PolicyState` (a snapshot, sharing nothing with the policy) and ``restore_state(state)``
makes a fresh policy of the same options continue exactly where the one that saved it stood.
A :class:`PolicyState` converts itself to and from plain JSON data (:meth:`PolicyState.to_json`,
:meth:`PolicyState.from_json`), which is how a saved scheduling session keeps it.

A policy without these methods (or returning :data:`NO_STATE`) is treated as stateless: a
restored session gives it nothing back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, Self, TypeVar, runtime_checkable

import numpy as np

from heteroplan.errors import InputError

__all__ = ["GeneratorState", "NO_STATE", "NoState", "PolicyState", "StatefulPolicy", "expect_state", "policy_state",
           "restore_policy_state"]


class PolicyState:
    """Base of a policy's cross-round state: a frozen dataclass that converts itself to plain
    JSON data (dicts, lists, strings, numbers, ``None``) and back, exactly."""

    def to_json(self) -> dict[str, Any]:
        """Plain JSON data (see :meth:`from_json`)."""
        raise NotImplementedError(f"{type(self).__name__}.to_json")

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        """The state :meth:`to_json` wrote (:class:`~heteroplan.errors.InputError` if ``data`` is not one)."""
        raise NotImplementedError(f"{cls.__name__}.from_json")

    @classmethod
    def parse(cls, data: Any) -> Self:
        """:meth:`from_json`, with malformed data reported as an :class:`InputError` naming the state type."""
        try:
            return cls.from_json(data)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise InputError("policy_state", cls.__name__, f"is not a saved {cls.__name__} "
                             f"({type(exc).__name__}: {exc})") from None


@dataclass(frozen=True)
class NoState(PolicyState):
    """The state of a stateless policy (nothing)."""

    def to_json(self) -> dict[str, Any]:
        return {}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NoState:
        if data:
            raise ValueError(f"a stateless policy's state is empty, got keys {sorted(data)}")
        return cls()


NO_STATE = NoState()

_S = TypeVar("_S", bound=PolicyState)


@runtime_checkable
class StatefulPolicy(Protocol):
    """A policy that keeps state between rounds and can hand it over (see the module doc)."""

    def state(self) -> PolicyState:
        """A snapshot of what the policy remembers between rounds (shares nothing with it)."""
        ...

    def restore_state(self, state: PolicyState) -> None:
        """Continue from ``state`` (taken from a policy with the same options)."""
        ...


def policy_state(policy: object) -> PolicyState:
    """``policy.state()`` of a :class:`StatefulPolicy`, else :data:`NO_STATE`."""
    if _stateful(policy):
        state = policy.state()  # type: ignore[attr-defined]
        if not isinstance(state, PolicyState):
            raise InputError(f"policy[{getattr(policy, 'name', '?')}].state()", type(state).__name__,
                             "must return a heteroplan.policies.state.PolicyState")
        return state
    return NO_STATE


def restore_policy_state(policy: object, state: PolicyState) -> None:
    """Give ``state`` back to ``policy`` (nothing to do for a stateless one)."""
    if _stateful(policy):
        policy.restore_state(state)  # type: ignore[attr-defined]
    elif not isinstance(state, NoState):
        raise InputError("policy", getattr(policy, "name", type(policy).__name__),
                         f"keeps no state between rounds; cannot take a {type(state).__name__}")


def _stateful(policy: object) -> bool:
    return isinstance(policy, StatefulPolicy) and callable(policy.state) and callable(policy.restore_state)


def expect_state(state: PolicyState, kind: type[_S], policy: str) -> _S:
    """``state`` if it is a ``kind``, else :class:`InputError` (a policy's ``restore_state`` guard)."""
    if not isinstance(state, kind):
        raise InputError(f"policy[{policy}].restore_state", type(state).__name__, f"must be a {kind.__name__}")
    return state


@dataclass(frozen=True)
class GeneratorState(PolicyState):
    """Where a numpy ``PCG64`` random generator stands (a policy drawing random numbers across
    rounds keeps this): restored, it draws the same numbers as the one it was taken from."""

    state: int
    inc: int
    has_uint32: int
    uinteger: int

    @classmethod
    def of(cls, rng: np.random.Generator) -> GeneratorState:
        s = rng.bit_generator.state
        if s.get("bit_generator") != "PCG64":
            raise InputError("rng", s.get("bit_generator"), "only a PCG64 generator's state can be kept")
        return cls(int(s["state"]["state"]), int(s["state"]["inc"]), int(s["has_uint32"]), int(s["uinteger"]))

    def generator(self) -> np.random.Generator:
        """A new generator at this state."""
        rng = np.random.Generator(np.random.PCG64())
        rng.bit_generator.state = {"bit_generator": "PCG64", "state": {"state": self.state, "inc": self.inc},
                                   "has_uint32": self.has_uint32, "uinteger": self.uinteger}
        return rng

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "inc": self.inc, "has_uint32": self.has_uint32, "uinteger": self.uinteger}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GeneratorState:
        return cls(int(data["state"]), int(data["inc"]), int(data["has_uint32"]), int(data["uinteger"]))
