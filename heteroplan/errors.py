"""Exceptions raised by heteroplan.

Every error caused by bad user input is a :class:`InputError` (a ``ValueError``)
whose message names the offending field and value.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence


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


class MissingDataError(InputError):
    """A job has no performance data for a GPU type it would have to run on (raised before
    the first simulated round); the message names the job, its application and the GPU types."""


class ModelWarning(UserWarning):
    """A model the solver will read differently from how it was written (a coefficient it
    drops as zero, a bound it takes as infinite): the answer may change; rescale the model."""


class PolicyError(HeteroplanError):
    """A scheduling policy failed (raised an exception or returned an invalid answer): a bug in
    the policy, not bad input. ``result`` holds what a simulation gathered before it, if any."""

    result: object = None


class SolverError(HeteroplanError):
    """A solver backend failed or is unavailable."""


class InfeasibleError(HeteroplanError):
    """A request has no feasible answer; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class RankFailure(HeteroplanError, RuntimeError):
    """A rank of a training run died, failed or stopped making progress.

    Attributes:
        rank: the rank that failed first (``None`` when the run as a whole stalled).
        reason: what happened (exit code, traceback tail, or the stall).
        checkpoint: the newest complete checkpoint to resume from, or ``None``.
    """

    def __init__(self, rank: int | None, reason: str, checkpoint: object = None) -> None:
        self.rank = rank
        self.reason = reason
        self.checkpoint = checkpoint
        where = f"rank {rank}" if rank is not None else "the run"
        resume = (f"; resume from the checkpoint at iteration {checkpoint.step} ({checkpoint.path})"
                  if checkpoint is not None else "; no checkpoint to resume from")
        super().__init__(f"{where} failed: {reason}{resume}")


class LossNotFinite(RankFailure):
    """Training diverged: an iteration's loss was NaN or infinite, and the run stopped after it.

    The diverged iteration's update is not checkpointed; the checkpoints written before it stay.

    Attributes (besides :class:`RankFailure`'s):
        step: the iteration whose loss was not finite (1-based, as ``StepMetrics.step``).
        loss: that loss on ``rank`` (a last-stage rank), or the summed loss when ``rank`` is ``None``
            (every rank's part finite, their sum not).
        steps: what the run reported up to and including that iteration (``StepMetrics``; filled by
            the local launcher, empty in a rank).
    """

    def __init__(self, rank: int | None, step: int, loss: float, checkpoint: object = None,
                 steps: tuple = ()) -> None:
        self.step, self.loss, self.steps = step, loss, tuple(steps)
        where = f"on rank {rank}" if rank is not None else "summed over the ranks"
        super().__init__(rank, f"training diverged: the loss is {loss} at iteration {step} {where}; "
                         "lower the learning rate", checkpoint)

    def __reduce__(self):  # picklable across processes despite the extra arguments
        return type(self), (self.rank, self.step, self.loss, self.checkpoint, self.steps)


def check_int(field: str, value: object, low: int) -> int:
    """``value`` as an integer ``>= low`` (bools refused), else :class:`InputError` naming ``field``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InputError(field, value, f"must be an integer >= {low}")
    return value


def check_int_list(field: str, values: object, low: int, what: str = "integers") -> tuple[int, ...]:
    """A non-empty sequence of integers ``>= low`` as a sorted tuple without repeats, else
    :class:`InputError` naming ``field`` (``what`` says what the integers are, for the message)."""
    if isinstance(values, int) or not isinstance(values, Sequence) or not values:
        raise InputError(field, values, f"must be a non-empty sequence of {what} >= {low}")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise InputError(field, values, f"{v!r} is not one of the {what} >= {low} expected")
    return tuple(sorted(set(values)))


def check_fraction(field: str, value: object) -> float:
    """``value`` as a number in ``[0, 1]`` (a quantile, a share), else :class:`InputError` naming ``field``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise InputError(field, value, "must be a number between 0 and 1")
    return float(value)


def check_seconds(field: str, value: object) -> float:
    """``value`` as a number of seconds ``> 0`` (numpy's numbers too), else :class:`InputError`
    naming ``field``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0:
        raise InputError(field, value, "must be a number of seconds > 0")
    try:
        return float(value)
    except OverflowError:  # an int beyond a float (10**400)
        raise InputError(field, value, "must be a number of seconds > 0 that a float holds") from None
