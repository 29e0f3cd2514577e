"""Pipeline schedules: which engine runs a plan's pipelines, and heteroplan's own order of
forward and backward microbatches on one stage.

Pure Python (no torch), so the choice and the schedules can be inspected and tested on their own.

:func:`choose_pipeline` picks, per run, ``torch.distributed.pipelining`` (``PipelineStage`` +
``Schedule1F1B`` / ``ScheduleGPipe``, one pipeline per data-parallel replica and TP index) where
it can express the plan, and heteroplan's own loop (:func:`one_f_one_b`, :func:`gpipe`) where it
cannot: a stage boundary where the tensor-parallel degree changes (a ``PipelineStage`` has one
peer rank per neighbouring stage; TP 2 -> TP 1 needs a fan-out of the activation and a choice of
which rank returns the gradient).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

from heteroplan.errors import InputError, check_int
from heteroplan.inputs import enum_choice
from heteroplan.run_options import PipelineEngine, PipelineSchedule

__all__ = ["Op", "one_f_one_b", "gpipe", "SCHEDULES", "PipelineChoice", "PipelineSetChoice", "choose_pipeline"]


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


SCHEDULES = {PipelineSchedule.ONE_F_ONE_B: one_f_one_b, PipelineSchedule.GPIPE: gpipe}
"""Each :class:`~heteroplan.run_options.PipelineSchedule`'s steps (looked up by member or value)."""


@dataclass(frozen=True)
class PipelineChoice:
    """Which engine runs a plan's pipelines, and the schedule of each data-parallel replica.

    Attributes:
        engine: ``PipelineEngine.TORCH`` (``torch.distributed.pipelining``) or
            ``PipelineEngine.HETEROPLAN`` (its own loop).
        schedules: per replica, the schedule class (``"Schedule1F1B"``, ``"ScheduleGPipe"``) or
            heteroplan's schedule name (``"1f1b"``, ``"gpipe"``).
        microbatches: per replica, its microbatches per iteration.
        reason: why this engine (one line, for the log and the run result).
    """

    engine: PipelineEngine
    schedules: tuple[str, ...]
    microbatches: tuple[int, ...]
    reason: str

    def describe(self) -> str:
        """One line: engine, each replica's schedule and microbatch count, and why."""
        per_replica = ", ".join(f"replica {d} {s} x {m} microbatches"
                                for d, (s, m) in enumerate(zip(self.schedules, self.microbatches, strict=True)))
        return f"{self.engine}: {per_replica} ({self.reason})"


@dataclass(frozen=True)
class PipelineSetChoice:
    """The :class:`PipelineChoice` of each pipeline of a set of independent pipelines (each chosen alone)."""

    pipelines: tuple[PipelineChoice, ...]

    def describe(self) -> str:
        """One line: ``"pipeline 0 torch: ...; pipeline 1 heteroplan: ..."``."""
        return "; ".join(f"pipeline {i} {c.describe()}" for i, c in enumerate(self.pipelines))


def choose_pipeline(stage_tp: list[int], microbatches: list[int],
                    schedule: PipelineSchedule | str = PipelineSchedule.ONE_F_ONE_B,
                    engine: PipelineEngine | str = PipelineEngine.AUTO) -> PipelineChoice:
    """The engine and per-replica schedules for a plan whose stages have tensor-parallel degrees
    ``stage_tp`` and whose replicas run ``microbatches[d]`` microbatches.

    torch is chosen (``engine="auto"``) when every stage has the same TP degree. Its
    ``Schedule1F1B`` refuses fewer microbatches than stages, so such a replica runs
    ``ScheduleGPipe`` (with ``M <= S`` microbatches 1F1B's warm-up covers all of them on the
    first stages; the gradients are the same either way). ``schedule="gpipe"`` runs
    ``ScheduleGPipe`` everywhere. ``engine="torch"`` on a plan torch cannot express is an
    :class:`~heteroplan.errors.InputError`.
    """
    engine = enum_choice(PipelineEngine, "config.pipeline", engine)
    schedule = enum_choice(PipelineSchedule, "config.schedule", schedule)
    num_stages = len(stage_tp)
    equal_tp = len(set(stage_tp)) == 1
    if engine is PipelineEngine.HETEROPLAN or (engine is PipelineEngine.AUTO and not equal_tp):
        why = "asked for" if engine is PipelineEngine.HETEROPLAN else \
            f"TP degrees {list(stage_tp)} change between stages; torch's PipelineStage has one peer per stage"
        return PipelineChoice(PipelineEngine.HETEROPLAN, tuple(str(schedule) for _ in microbatches), tuple(microbatches),
                              why)
    if not equal_tp:
        raise InputError("config.pipeline", engine, f"torch.distributed.pipelining cannot run stages of TP degrees "
                         f"{list(stage_tp)} (one peer rank per neighbouring stage); use 'auto' or 'heteroplan'")

    def torch_schedule(m: int) -> str:
        return "Schedule1F1B" if schedule is PipelineSchedule.ONE_F_ONE_B and m >= num_stages else "ScheduleGPipe"

    return PipelineChoice(PipelineEngine.TORCH, tuple(torch_schedule(m) for m in microbatches), tuple(microbatches),
                          f"torch.distributed.pipelining, TP {stage_tp[0]} on every stage")
