"""The 1F1B schedule of one pipeline replica, op by op (for timelines and checks).

The simulator (:mod:`heteroplan.planner.model.simulator`) prices a pipeline with a closed form; this
module lays out the same per-stage numbers as an explicit schedule: every stage runs
``min(S - s - 1, M)`` warm-up forwards, then alternates one forward and one backward, then
drains the remaining backwards (PipeDream-flush / Megatron 1F1B). Each op starts when its stage
is free and its input is ready; point-to-point transfers are blocking on both ends, as in the
simulator (each stage step costs ``f + b + 2 (c_{s-1} + c_s)``):

- forward of microbatch ``m`` on stage ``s``: once the forward on ``s - 1`` has ended and stage
  ``s`` is free, it receives the activations (``comm[s]`` seconds), computes, then sends its
  output on (busy ``comm[s + 1]``);
- backward on ``s``: once the backward on ``s + 1`` has ended (on the last stage, its own
  forward), it receives the gradients (``comm[s + 1]``), computes, sends back (``comm[s]``).

Units: seconds from the start of the iteration. With equal stages and no communication the
makespan is ``(M + S - 1) (f + b)``, the simulator's ``T_pipe``; in general the two agree up to
how the closed form charges the pipeline fill and drain.

A replica with a buffered send (platforms whose small messages the transport buffers, see
:mod:`heteroplan.planner.model.pipeline_replay`) is priced by the simulator's 1F1B replay, not the
closed form; :func:`pipeline_schedule` then lays out that replay itself (DeepSpeed's order, the
transfers as they crossed, overlapping the sender's compute), so the timeline ends when the
simulator says.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from heteroplan.errors import InputError
from heteroplan.planner.model.pipeline_replay import one_f_one_b_timeline
from heteroplan.planner.model.simulator import (
    SHIPPED_PLATFORMS,
    PlatformConfigs,
    SimConfig,
    simulate_plan,
)
from heteroplan.planner.plan import Plan

__all__ = ["PipelineSchedule", "one_f_one_b_order", "schedule_1f1b", "pipeline_schedule"]


@dataclass(frozen=True, repr=False)
class PipelineSchedule:
    """Start and end times (s) of every forward and backward, arrays ``(S stages, M microbatches)``.

    Attributes:
        forward: forward seconds per microbatch of each stage, shape ``(S,)``.
        backward: backward seconds per microbatch of each stage, shape ``(S,)``.
        comm: transfer seconds, shape ``(S + 1,)``; ``comm[s]`` between stages ``s - 1`` and ``s``.
        replica: the pipeline replica scheduled (``-1`` when built from raw numbers).
        simulated_time: the simulator's ``T_pipe`` of that replica (s), ``nan`` if unknown.
        labels: one label per stage (e.g. ``"A100-40@us-central1-a TP1"``).
        transfers: ``None`` for the blocking layout (each op receives its input and sends its
            output, both stages busy: ``comm`` says how long); for a replayed replica, ``(K, 5)``
            rows of sending stage, receiving stage, microbatch, on the wire from, landed at (s)
            (:class:`~heteroplan.planner.model.pipeline_replay.ReplayTimeline`).
    """

    forward_start: np.ndarray
    forward_end: np.ndarray
    backward_start: np.ndarray
    backward_end: np.ndarray
    forward: np.ndarray
    backward: np.ndarray
    comm: np.ndarray
    replica: int = -1
    simulated_time: float = float("nan")
    labels: tuple[str, ...] = ()
    transfers: np.ndarray | None = None

    def __repr__(self) -> str:
        """One line: its shape and makespan, not its arrays."""
        which = f"replica {self.replica}, " if self.replica >= 0 else ""
        return (f"PipelineSchedule({which}{self.num_stages} stages x {self.num_microbatches} microbatches, "
                f"makespan {self.makespan:.4g} s)")

    @property
    def num_stages(self) -> int:
        return int(self.forward_start.shape[0])

    @property
    def num_microbatches(self) -> int:
        return int(self.forward_start.shape[1])

    @property
    def makespan(self) -> float:
        """Seconds until the last backward ends."""
        return float(self.backward_end.max())


def one_f_one_b_order(num_stages: int, num_microbatches: int, stage: int) -> list[tuple[str, int]]:
    """Ops of ``stage`` in 1F1B order: ``[("F", 0), ("F", 1), ..., ("B", M - 1)]``."""
    warm = min(num_stages - stage - 1, num_microbatches)
    ops = [("F", m) for m in range(warm)]
    for i in range(num_microbatches - warm):
        ops += [("F", warm + i), ("B", i)]
    return ops + [("B", m) for m in range(num_microbatches - warm, num_microbatches)]


def _check(name: str, values: Any, shape: tuple[int, ...]) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if arr.shape != shape or not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise InputError(name, values, f"need {shape[0]} finite numbers >= 0 (seconds)")
    return arr


def schedule_1f1b(forward: Any, backward: Any, comm: Any, num_microbatches: int) -> PipelineSchedule:
    """Lay out the 1F1B schedule of one replica from per-stage times (s).

    Args:
        forward: forward seconds per microbatch of each of the ``S`` stages.
        backward: backward seconds per microbatch of each stage.
        comm: ``S + 1`` transfer seconds (``comm[s]`` between stages ``s - 1`` and ``s``; the two
            ends are ignored).
        num_microbatches: microbatches ``M`` per iteration.
    """
    f = np.asarray(forward, dtype=float)
    if f.ndim != 1 or f.size == 0:
        raise InputError("forward", forward, "need one number per stage")
    S = f.size
    f = _check("forward", forward, (S,))
    b = _check("backward", backward, (S,))
    c = _check("comm", comm, (S + 1,)).copy()
    c[0] = c[S] = 0.0
    if isinstance(num_microbatches, bool) or not isinstance(num_microbatches, int | np.integer) or num_microbatches < 1:
        raise InputError("num_microbatches", num_microbatches, "must be an integer >= 1")
    M = int(num_microbatches)
    start = {"F": np.full((S, M), np.nan), "B": np.full((S, M), np.nan)}
    end = {"F": np.full((S, M), np.nan), "B": np.full((S, M), np.nan)}
    orders = [one_f_one_b_order(S, M, s) for s in range(S)]
    pos = [0] * S
    free = np.zeros(S)
    remaining = 2 * S * M
    while remaining:
        progress = False
        for s in range(S):
            while pos[s] < len(orders[s]):
                kind, m = orders[s][pos[s]]
                if kind == "F":  # receive activations (comm[s]), compute, send them on (comm[s + 1])
                    ready = 0.0 if s == 0 else end["F"][s - 1, m]
                    recv, duration, send = c[s], f[s], c[s + 1]
                else:  # receive gradients (comm[s + 1]), compute, send them back (comm[s])
                    ready = end["F"][s, m] if s == S - 1 else end["B"][s + 1, m]
                    recv, duration, send = c[s + 1], b[s], c[s]
                if np.isnan(ready):
                    break
                t0 = max(free[s], ready) + recv
                start[kind][s, m], end[kind][s, m] = t0, t0 + duration
                free[s] = t0 + duration + send
                pos[s] += 1
                remaining -= 1
                progress = True
        if not progress:  # cannot happen for 1F1B orders; guards against edits
            raise RuntimeError("1F1B schedule deadlocked")
    return PipelineSchedule(start["F"], end["F"], start["B"], end["B"], f, b, c)


def pipeline_schedule(
    plan_or_result: Any,
    replica: int | None = None,
    *,
    config: SimConfig | PlatformConfigs = SHIPPED_PLATFORMS,
    **simulate_kwargs: Any,
) -> PipelineSchedule:
    """1F1B schedule of one pipeline replica of a plan, from the simulator's per-stage numbers.

    Args:
        plan_or_result: a :class:`~heteroplan.planner.plan.Plan` or a ``PlanResult``.
        replica: pipeline replica index; default the slowest one (the straggler).
        config: simulator constants; other keyword arguments go to ``simulate``.
    """
    plan = getattr(plan_or_result, "plan", plan_or_result)
    if not isinstance(plan, Plan):
        raise InputError("plan_or_result", type(plan_or_result).__name__, "give a Plan or a PlanResult")
    sim = simulate_plan(plan, config=config, **simulate_kwargs)
    times = sim.stage_times.pipeline
    if replica is None:
        replica = int(np.argmax(times))
    if isinstance(replica, bool) or not isinstance(replica, int | np.integer) or not 0 <= replica < plan.dp:
        raise InputError("replica", replica, f"must be an integer in [0, {plan.dp})")
    fb = sim.stage_times.compute[:, replica]
    share = sim.stage_times.forward_share[:, replica]
    comm = sim.stage_times.pipeline_send[:, replica]
    buffered = sim.stage_times.buffered[:, replica]
    m = plan.microbatches()[replica]
    labels = tuple(
        f"{r.gpu_type}@{r.zone} TP{r.tp}" for r in (stage.replica_list()[replica] for stage in plan.stages)
    )
    if buffered.any():  # the simulator replays this replica: lay out that replay
        tl = one_f_one_b_timeline(fb * share, fb * (1 - share), comm[1:-1], m, buffered, shared_nic=True)
        return PipelineSchedule(
            tl.forward_start, tl.forward_end, tl.backward_start, tl.backward_end, fb * share, fb * (1 - share),
            comm, int(replica), float(times[replica]), labels, tl.transfers,
        )
    sched = schedule_1f1b(fb * share, fb * (1 - share), comm, m)
    return PipelineSchedule(
        sched.forward_start, sched.forward_end, sched.backward_start, sched.backward_end,
        sched.forward, sched.backward, sched.comm, int(replica), float(times[replica]), labels,
    )
