"""What the scheduling session's arguments must be: finite seconds, bounded counts, measured steps
a model can learn from, a clock that never goes back (each an :class:`InputError` naming the field
and the value)."""

from __future__ import annotations

import math

from heteroplan.errors import InputError
from heteroplan.inputs import is_count, is_real
from heteroplan.scheduling.decisions import StepTiming

__all__ = ["MAX_GPUS", "MAX_COUNT", "is_real", "is_count", "finite_seconds", "check_count", "check_clock", "check_event",
           "check_finish",
           "check_timing", "check_report", "check_final"]


MAX_GPUS = 10**9
"""Most GPUs a job may request or use (a larger count is a typo; up to it, a job too large for
the cluster is parked, not refused)."""
MAX_COUNT = 2**53  # steps, samples: integers a saved session's JSON keeps exactly


def check_count(field: str, value: object, low: int, high: int) -> int:
    """``value`` as an ``int`` in ``[low, high]`` (numpy integers taken, bools refused), else
    :class:`InputError` naming ``field``."""
    if not is_count(value) or not low <= value <= high:
        raise InputError(field, value, f"must be an integer in [{low}, {high:.3g}]")
    return int(value)  # type: ignore[call-overload]


def finite_seconds(field: str, value: object) -> float:
    """``value`` as finite seconds >= 0, else :class:`InputError` naming ``field``."""
    if not is_real(value) or not 0 <= value < math.inf:
        raise InputError(field, value, "must be a finite number of seconds >= 0")
    return float(value)  # type: ignore[arg-type]


_MAX_STEP_S = 7 * 24 * 3600.0  # s; a measured step longer than a week is not a measurement
_MAX_LOCAL_BSZ = 1e7  # samples per GPU


def check_timing(field: str, timing: object, known: set[str], max_nodes: int) -> None:
    """A :class:`StepTiming` a model can learn from: a known GPU type, GPUs per node >= 1 (no more
    than a node of that type holds), finite positive batch and times, sync within the step."""
    if not isinstance(timing, StepTiming):
        raise InputError(field, type(timing).__name__, "must be a StepTiming")
    if not isinstance(timing.gpu_type, str) or timing.gpu_type not in known:
        raise InputError(f"{field}.gpu_type", timing.gpu_type, f"must be one of the GPU types {sorted(known)}")
    placement = timing.placement
    if not isinstance(placement, tuple) or not placement or len(placement) > max_nodes or any(
            not is_count(c) or not 1 <= c <= 1024 for c in placement):
        raise InputError(f"{field}.placement", placement,
                         f"must be a non-empty tuple of GPUs per node (1..1024, at most {max_nodes} nodes)")
    if not (is_real(timing.local_bsz) and 1 <= timing.local_bsz <= _MAX_LOCAL_BSZ):
        raise InputError(f"{field}.local_bsz", timing.local_bsz, f"must be samples per GPU in [1, {_MAX_LOCAL_BSZ:g}]")
    if not (is_real(timing.step_time) and 0 < timing.step_time <= _MAX_STEP_S):
        raise InputError(f"{field}.step_time", timing.step_time, f"must be seconds in (0, {_MAX_STEP_S:g}]")
    if not (is_real(timing.sync_time) and 0 <= timing.sync_time <= timing.step_time):
        raise InputError(f"{field}.sync_time", timing.sync_time, "must be seconds in [0, step_time]")


def check_clock(now: object, last_round: float | None) -> float:
    """``now`` as seconds: a finite real number >= 0, not before ``last_round``."""
    if not is_real(now) or not 0 <= now < math.inf:
        raise InputError("now", now, "must be a finite number of seconds >= 0")
    if last_round is not None and now < last_round:  # type: ignore[operator]
        raise InputError("now", now, f"is before the previous round ({last_round} s)")
    return float(now)  # type: ignore[arg-type]


def check_event(field: str, at: object, last_round: float | None) -> float:
    """When something happened to a job (it failed, was released or given up, the cluster changed):
    finite seconds, at or after ``last_round`` (the GPUs it held were charged up to then)."""
    at = finite_seconds(field, at)
    if last_round is not None and at < last_round:
        raise InputError(field, at, f"is before the last round ({last_round} s)")
    return at


def check_finish(field: str, at: object, arrival: float, last_round: float | None) -> float:
    """A finish time: finite seconds, at or after the job's ``arrival`` and ``last_round``."""
    at = finite_seconds(field, at)
    if at < arrival:
        raise InputError(field, at, f"is before the job's arrival ({arrival} s)")
    return check_event(field, at, last_round)


def check_report(where: str, work_before: float, steps_before: int, work_done: object, steps_done: object,
             batch_size: object, step_timing: object, phi: object, known_types: set[str], max_nodes: int) -> None:
    """Refuse a report (of the job ``where``, which reported ``work_before`` work units and
    ``steps_before`` steps so far) that is not a number, or that rewinds progress."""
    if work_done is not None:
        if not (is_real(work_done) and 0 <= work_done < math.inf):
            raise InputError(f"{where}.work_done", work_done, "must be a finite number >= 0 of work units")
        if work_done < work_before:
            raise InputError(f"{where}.work_done", work_done,
                             f"is less than the {work_before} work units reported before; work never goes back")
    for name, value, before in (("steps_done", steps_done, steps_before), ("batch_size", batch_size, None)):
        if value is None:
            continue
        check_count(f"{where}.{name}", value, 0, MAX_COUNT)
        if before is not None and value < before:
            raise InputError(f"{where}.{name}", value, f"is less than the {before} reported before; "
                             "steps never go back")
    if step_timing is not None:
        check_timing(f"{where}.step_timing", step_timing, known_types, max_nodes)
    if phi is not None and not (is_real(phi) and 0 < phi < math.inf):
        raise InputError(f"{where}.phi", phi, "must be a finite noise scale > 0 samples")


def check_final(where: str, finish_time: float, given: tuple[tuple[str, object, object], ...]) -> None:
    """Refuse a report to a job finished at ``finish_time`` that would change its record: each
    ``(field, reported value or None, final value)`` must restate the final value."""
    for name, value, final in given:
        if value is not None and value != final:
            raise InputError(f"{where}.{name}", value, f"the job finished at {finish_time} s; its record is final")
