"""Pipeline schedules: the order of forward and backward microbatches on one stage.

Pure Python (no torch), so schedules can be inspected and tested on their own.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from heteroplan.errors import InputError, check_int

__all__ = ["Op", "one_f_one_b", "gpipe", "SCHEDULES"]


class Op(NamedTuple):
    """One step of a stage's schedule: ``kind`` is ``"F"`` (forward) or ``"B"`` (backward)."""

    kind: Literal["F", "B"]
    microbatch: int


def _check(num_stages: int, stage: int, num_microbatches: int) -> None:
    check_int("num_stages", num_stages, 1)
    if not isinstance(stage, int) or not 0 <= stage < num_stages:
        raise InputError("stage", stage, f"must be in [0, {num_stages})")
    check_int("num_microbatches", num_microbatches, 1)


def one_f_one_b(num_stages: int, stage: int, num_microbatches: int) -> list[Op]:
    """The 1F1B (PipeDream-flush) schedule of ``stage``.

    Stage ``s`` runs ``min(S - s - 1, M)`` warm-up forwards, then alternates one forward and one
    backward, then drains the remaining backwards. At most ``S - s`` microbatches' activations
    are alive at once (GPipe keeps all ``M``).
    """
    _check(num_stages, stage, num_microbatches)
    warmup = min(num_stages - stage - 1, num_microbatches)
    ops = [Op("F", m) for m in range(warmup)]
    fwd, bwd = warmup, 0
    while fwd < num_microbatches:
        ops.append(Op("F", fwd))
        fwd += 1
        ops.append(Op("B", bwd))
        bwd += 1
    ops.extend(Op("B", m) for m in range(bwd, num_microbatches))
    return ops


def gpipe(num_stages: int, stage: int, num_microbatches: int) -> list[Op]:
    """GPipe: all forwards, then all backwards (in the same microbatch order)."""
    _check(num_stages, stage, num_microbatches)
    return [Op("F", m) for m in range(num_microbatches)] + [Op("B", m) for m in range(num_microbatches)]


SCHEDULES = {"1f1b": one_f_one_b, "gpipe": gpipe}
