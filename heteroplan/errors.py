"""Exceptions raised by heteroplan.

Every error caused by bad user input is a :class:`InputError` (a ``ValueError``)
whose message names the offending field and value.
"""

from __future__ import annotations


class HeteroplanError(Exception):
    """Base class of all heteroplan errors."""


class InputError(HeteroplanError, ValueError):
    """Bad user input; the message names the field and the value."""

    def __init__(self, field: str, value: object, reason: str) -> None:
        self.field = field
        self.value = value
        self.reason = reason
        super().__init__(f"{field}={value!r}: {reason}")


class ClusterError(InputError):
    """Invalid cluster description (GPU types, nodes, zones, counts)."""


class ModelError(InputError):
    """Invalid optimization model construction (shapes, bounds, unknown blocks)."""


class SolverError(HeteroplanError):
    """A solver backend failed or is unavailable."""


class InfeasibleError(HeteroplanError):
    """A request has no feasible answer; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)
