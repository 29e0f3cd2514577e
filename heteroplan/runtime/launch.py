"""Start the ranks of a plan as local processes, watch them, collect what they report.

One process per rank (``torch.multiprocessing``, spawn), rendezvous over TCP on a free local
port. The launcher never waits forever: a rank that exits with an error, dies, or a run that
makes no progress for ``timeout_s`` seconds stops every rank and raises :class:`RankFailure`
naming the rank and the newest checkpoint to resume from.
"""

from __future__ import annotations

import contextlib
import logging
import queue as queue_mod
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch.multiprocessing as mp

from heteroplan.errors import InputError, LossNotFinite, RankFailure, check_fraction
from heteroplan.inputs import check_process_count
from heteroplan.planner.model.flops import Utilization, recomputed_flops_per_sample, utilization
from heteroplan.planner.pipeline_set import PipelineSet
from heteroplan.planner.plan import Plan
from heteroplan.run_options import Device
from heteroplan.runtime.appliers import check_plan
from heteroplan.runtime.checkpoint import Checkpoint, check_writable, latest_checkpoint
from heteroplan.runtime.config import RunConfig, StepMetrics
from heteroplan.runtime.flops import run_peak_tflops, task_forward_flops_per_layer
from heteroplan.runtime.layout import run_pipelines, run_world_size
from heteroplan.runtime.models import TrainTask
from heteroplan.runtime.netbench import free_port
from heteroplan.runtime.schedule import PipelineChoice, PipelineSetChoice
from heteroplan.runtime.segment_sync import check_segment_run
from heteroplan.runtime.worker import rank_entry, run_pipeline_choice

log = logging.getLogger(__name__)

STOP_GRACE_S = 4.0
"""Seconds the ranks get after SIGTERM/SIGINT to finish their iteration and checkpoint before they are killed."""

__all__ = ["RankProcesses", "RunHandle", "RunResult", "RunSetup", "prepare_run", "check_devices", "check_task", "launch", "run_plan"]

@dataclass
class RunResult:
    """What a finished run reports.

    Attributes:
        steps: one entry per iteration run by this launch (resumed iterations excluded).
        final_step: iterations done in total (including those before a resume).
        start_step: iteration the run started from (0, or the checkpoint's).
        checkpoint: newest complete checkpoint, if checkpoints were written.
        wall_time: seconds from launch to the last rank's exit (includes start-up).
        world_size: processes (one per GPU of the plan).
        stopped_early: the run stopped before ``config.steps`` (signal, ``max_seconds``).
        signal: the number of the signal (SIGINT, SIGTERM) that stopped the run, else ``None``.
        pipeline: which engine ran the pipelines and each replica's schedule
            (:meth:`heteroplan.runtime.schedule.PipelineChoice.describe`), e.g. ``"torch: replica 0
            Schedule1F1B x 3 microbatches, replica 1 ScheduleGPipe x 1 microbatches (...)"``.
        forward_flops_per_sample: forward FLOPs of one sample of the task's model, counted
            (:func:`heteroplan.runtime.flops.task_forward_flops_per_sample`); ``None`` if not countable.
        recomputed_flops_per_sample: forward FLOPs per sample of the plan's recomputing stages'
            layers (hardware FLOPs beyond the model's: the HFU).
        global_batch_size: samples per iteration (the plan's).
        peak_tflops: summed dense peak of the run's devices in the plan's precision (TFLOP/s; 0:
            none known) and ``peak_note``, what it is or why there is none
            (:func:`heteroplan.runtime.flops.run_peak_tflops`).
    """

    steps: list[StepMetrics]
    final_step: int
    start_step: int
    checkpoint: Checkpoint | None
    wall_time: float
    world_size: int
    stopped_early: bool = False
    signal: int | None = None
    pipeline: str = ""
    forward_flops_per_sample: float | None = None
    global_batch_size: int = 0
    peak_tflops: float = 0.0
    peak_note: str = ""
    recomputed_flops_per_sample: float = 0.0

    @property
    def losses(self) -> list[float]:
        return [m.loss for m in self.steps]

    @property
    def iteration_times(self) -> list[float]:
        """Seconds per iteration as rank 0 measured them."""
        return [m.iteration_time for m in self.steps]

    def median_iteration_time(self, skip: int = 1) -> float:
        """Median seconds per iteration, skipping the first ``skip`` (warm-up) iterations."""
        return self.iteration_time_quantile(0.5, skip)

    def iteration_time_quantile(self, q: float, skip: int = 1) -> float:
        """The ``q`` quantile (0 = fastest, 0.5 = median; linear interpolation) of the seconds per
        iteration, skipping the first ``skip`` (warm-up) iterations (none skipped if that leaves none)."""
        check_fraction("q", q)
        times = self.iteration_times[skip:] or self.iteration_times
        if not times:
            raise InputError("steps", 0, "the run finished no iteration")
        return float(np.quantile(times, q))

    def utilization(self, skip: int = 1) -> Utilization | None:
        """Model FLOPs, achieved TFLOP/s and MFU of the median iteration (skipping ``skip``), against
        :attr:`peak_tflops` (:mod:`heteroplan.planner.model.flops`); ``None`` without a FLOP count
        or an iteration."""
        if self.forward_flops_per_sample is None or not self.steps or self.global_batch_size < 1:
            return None
        return utilization(self.forward_flops_per_sample, self.global_batch_size, self.median_iteration_time(skip),
                           self.peak_tflops, self.peak_note, self.recomputed_flops_per_sample)


class RankProcesses:
    """Local processes, one per rank, that report to the parent through a queue; never waits forever.

    ``target(rank, world_size, init_method, *args, stop_event, queue)`` runs in each process and
    puts ``("step", rank, payload)`` for progress, ``("done", rank, value)`` at the end, or
    ``("error", rank, traceback)`` (``("diverged", rank, LossNotFinite)`` for a loss that is not
    finite, raised as it is). :meth:`poll` raises :class:`RankFailure` when a rank errs or
    dies, or when nothing is reported for ``timeout_s`` seconds (``startup_timeout_s`` at first);
    the failure names ``checkpoint_dir``'s newest checkpoint.
    """

    def __init__(self, world_size: int, target: Callable[..., None], args: tuple, *, timeout_s: float,
                 startup_timeout_s: float, checkpoint_dir: str | None = None) -> None:
        self.world_size = world_size
        self.timeout_s = timeout_s
        self.checkpoint_dir = checkpoint_dir
        ctx = mp.get_context("spawn")
        self._queue = ctx.Queue()
        self._stop = ctx.Event()
        init = f"tcp://127.0.0.1:{free_port()}"
        self._procs = [
            ctx.Process(target=target, args=(r, world_size, init, *args, self._stop, self._queue), daemon=True)
            for r in range(world_size)
        ]
        self._t0 = time.perf_counter()
        self._last_progress = time.monotonic() + startup_timeout_s
        self._reports: list[Any] = []
        self._done: dict[int, Any] = {}
        self._errors: dict[int, str] = {}
        self._diverged: dict[int, LossNotFinite] = {}
        for p in self._procs:
            p.start()

    @property
    def results(self) -> dict[int, Any]:
        """What each rank reported with ``("done", rank, value)``, by rank."""
        return dict(self._done)

    def stop(self) -> None:
        """Ask the ranks to stop (they see the event at their next check)."""
        self._stop.set()

    def poll(self) -> bool:
        """Collect reports; True while a rank is still going. Raises :class:`RankFailure`."""
        self._drain()
        if self._errors or self._diverged or self._dead():
            time.sleep(0.2)  # let the other reports and exits of a failure arrive
            self._drain()
            if self._diverged:  # a loss that is not finite: the rank that saw it says so
                first = self._diverged[min(self._diverged)]
                self.terminate()
                raise LossNotFinite(first.rank, first.step, first.loss, latest_checkpoint(self.checkpoint_dir),
                                    tuple(self._reports))
            # the cause: a rank that died without a word (its peers then fail to reach it), else
            # the first rank to report an error
            silent = [r for r in self._dead() if r not in self._errors]
            if silent:
                self._fail(silent[0], f"process exited with code {self._procs[silent[0]].exitcode}")
            rank = next(iter(self._errors))
            self._fail(rank, self._errors[rank].strip().splitlines()[-1] + "\n" + self._errors[rank][-1500:])
        if time.monotonic() - self._last_progress > self.timeout_s:
            self._fail(None, f"no iteration finished for {self.timeout_s:.0f} s")
        return not all(p.exitcode is not None for p in self._procs)

    def _dead(self) -> list[int]:
        """Ranks that exited with an error code before reporting completion."""
        return [r for r, p in enumerate(self._procs) if p.exitcode not in (None, 0) and r not in self._done]

    def wait_all(self, timeout: float | None = None, on_report: Callable[[Any], None] | None = None) -> None:
        """Block until every rank has exited; ``on_report`` is called for each new report, in order.

        SIGTERM or SIGINT (in the main thread) asks the ranks to stop at their next iteration
        boundary (they checkpoint); ranks still alive :data:`STOP_GRACE_S` seconds later are killed.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        shown = len(self._reports)
        with self._stop_on_signals():
            while True:
                going = self.poll()
                if on_report is not None:
                    for payload in self._reports[shown:]:
                        on_report(payload)
                    shown = len(self._reports)
                if not going:
                    break
                if self.signalled is not None and time.monotonic() > self.signalled + STOP_GRACE_S:
                    log.warning("ranks still running %.0f s after the signal: killing them", STOP_GRACE_S)
                    self.terminate()
                    break
                if deadline is not None and time.monotonic() > deadline:
                    self._fail(None, f"did not finish within {timeout:.0f} s")
                time.sleep(0.02)
        for p in self._procs:
            p.join()

    signalled: float | None = None
    """When (``time.monotonic()``) SIGTERM/SIGINT asked the run to stop; ``None``: it was not."""
    signal_number: int | None = None
    """Which signal that was (``signal.SIGTERM``...)."""

    @contextlib.contextmanager
    def _stop_on_signals(self):
        """While the launcher waits, SIGTERM/SIGINT stop the ranks instead of orphaning them."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handler(signum: int, frame: Any) -> None:
            if self.signalled is None:
                log.warning("%s: stopping every rank", signal.Signals(signum).name)
                self.signalled = time.monotonic()
                self.signal_number = signum
                self.stop()

        previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)

    def _drain(self) -> None:
        """Take every pending report from the ranks (progress, completions, errors)."""
        while True:
            try:
                kind, rank, payload = self._queue.get_nowait()
            except queue_mod.Empty:
                return
            if kind == "step":
                self._reports.append(payload)
                self._last_progress = time.monotonic()
            elif kind == "done":
                self._done[rank] = payload
            elif kind == "diverged":
                self._diverged[rank] = payload
            else:
                self._errors.setdefault(rank, payload)

    def _fail(self, rank: int | None, reason: str) -> None:
        self.terminate()
        raise RankFailure(rank, reason, latest_checkpoint(self.checkpoint_dir))

    def terminate(self) -> None:
        """Kill every rank now (no checkpoint)."""
        for p in self._procs:
            if p.is_alive():
                p.terminate()
        for p in self._procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)


@dataclass(frozen=True)
class RunSetup:
    """What every backend checks and counts before it starts a plan's ranks.

    Attributes:
        pipeline: the engine and schedules the plan runs with (of each pipeline, for a set).
        forward_flops: the model's forward FLOPs per sample (``None``: not counted).
        recomputed_flops: forward FLOPs per sample its recomputing stages run again.
        peak: (dense peak TFLOP/s of the plan's devices, where the figure comes from).
        start_step: the iteration it resumes from (0, or the newest checkpoint's).
    """

    pipeline: PipelineChoice | PipelineSetChoice
    forward_flops: float | None
    recomputed_flops: float
    peak: tuple[float, str]
    start_step: int

    def result(self, plan: Plan | PipelineSet, config: RunConfig, steps: list[StepMetrics], done: Mapping[int, int], wall_s: float,
               signal: int | None, engine: str) -> RunResult:
        """The :class:`RunResult` of a run of ``plan`` whose ranks reported ``steps`` (rank 0) and
        finished at iterations ``done`` (by rank), ``wall_s`` seconds after launch (stopped by
        ``signal``, if one); ``engine`` says where its pipelines ran."""
        final = max(done.values()) if done else self.start_step
        return RunResult(steps, final, self.start_step, latest_checkpoint(config.checkpoint_dir), wall_s,
                         run_world_size(plan), final < config.steps, signal, engine, self.forward_flops,
                         plan.global_batch_size, *self.peak, self.recomputed_flops)


def prepare_run(plan: Plan | PipelineSet, task: TrainTask, config: RunConfig) -> RunSetup:
    """Check ``plan`` (or a set of independent pipelines), ``task`` and ``config`` (an
    :class:`InputError` naming the field before any rank starts) and count what the run's result
    reports (local processes and Ray alike)."""
    if not isinstance(config, RunConfig):
        raise InputError("config", type(config).__name__, "must be a heteroplan.runtime.RunConfig")
    slots = run_pipelines(plan)
    check_task(task, plan)
    for slot in slots:  # every dimension's applier, with the model's declared dtype (the ranks check it again)
        check_plan(slot.plan, config, _declared_dtype(task))
    check_segment_run(slots)
    check_writable(config.checkpoint_dir)
    pipeline = run_pipeline_choice(plan, config)  # InputError here if config.pipeline cannot run the plan
    log.info("pipeline: %s", pipeline.describe())
    per_layer = task_forward_flops_per_layer(task)
    resume = latest_checkpoint(config.checkpoint_dir) if config.resume else None
    recomputed = 0.0 if per_layer is None else sum(
        s.plan.global_batch_size / s.batch_size * recomputed_flops_per_sample(per_layer, s.plan) for s in slots)
    peaks = [run_peak_tflops(s.plan, config.device, config.peak_tflops, run_world_size(s.plan)) for s in slots]
    return RunSetup(pipeline, None if per_layer is None else float(sum(per_layer)), recomputed,
                    (sum(p[0] for p in peaks), peaks[0][1]), resume.step if resume else 0)


class RunHandle(RankProcesses):
    """A run in progress: poll its metrics, ask it to stop, wait for its result."""

    placements: tuple = ()
    """Where each rank ran, for backends that place ranks on other machines (local: empty)."""

    def __init__(self, plan: Plan | PipelineSet, task: TrainTask, config: RunConfig) -> None:
        check_process_count("plan.num_gpus", run_world_size(plan))  # one process per planned GPU
        setup = prepare_run(plan, task, config)
        check_devices(plan, config)
        self.setup, self.pipeline, self.start_step = setup, setup.pipeline, setup.start_step
        self.plan = plan
        self.config = config
        super().__init__(run_world_size(plan), rank_entry, (plan.to_dict(), task, config),
                         timeout_s=config.timeout_s, startup_timeout_s=config.startup_timeout_s,
                         checkpoint_dir=config.checkpoint_dir)

    @property
    def steps(self) -> list[StepMetrics]:
        """Iterations reported so far (call :meth:`poll` to refresh)."""
        return list(self._reports)

    def wait(self, timeout: float | None = None, progress: Callable[[StepMetrics], None] | None = None) -> RunResult:
        """Block until every rank is done; ``progress`` is called for each new iteration."""
        _check_progress(progress)  # before waiting: the ranks keep running, the handle stays usable
        self.wait_all(timeout, progress)
        return self.setup.result(self.plan, self.config, list(self._reports), self._done, time.perf_counter() - self._t0,
                                 self.signal_number if self.signalled is not None else None,
                                 self.pipeline.describe())


def check_task(task: TrainTask, plan: Plan | PipelineSet | None = None, field: str = "plan.stages",
               task_field: str = "task") -> None:
    """Raise :class:`InputError` unless ``task`` has what the runtime calls (and, when it says
    how many layers its model has, ``plan`` covers them; ``field`` names the plan's stages,
    ``task_field`` the task)."""
    for attr in ("build_model", "batch", "loss"):
        if not callable(getattr(task, attr, None)):
            raise InputError(task_field, type(task).__name__, f"has no {attr}() (see heteroplan.runtime.TrainTask)")
    num_layers = getattr(task, "num_layers", None)
    if plan is not None and isinstance(num_layers, int) and num_layers != plan.num_layers:
        raise InputError(field, plan.num_layers, f"the task's model has {num_layers} layers; the plan must cover them")
    heads = getattr(task, "n_heads", None)
    if plan is not None and isinstance(heads, int):
        for slot in run_pipelines(plan):
            for s, stage in enumerate(slot.plan.stages):
                for tp in (g.tp for g in stage.replicas if heads % g.tp):
                    raise InputError(f"{field}[{s}].replicas.tp", tp, f"must divide the model's n_heads={heads}")


def _declared_dtype(task: TrainTask) -> Any:
    """The torch dtype a task says its model has (``TinyGPTTask.dtype``), else ``None`` (checked in the ranks)."""
    import torch

    name = getattr(task, "dtype", None)
    value = getattr(torch, name, None) if isinstance(name, str) else None
    return value if isinstance(value, torch.dtype) else None


def check_devices(plan: Plan | PipelineSet, config: RunConfig) -> None:
    """One process per planned GPU: on CUDA each needs its own GPU here (else :class:`InputError`);
    on CPU every planned GPU becomes a process of this machine, whatever its GPU type."""
    if config.device is not Device.CUDA:
        return
    import torch

    have, need = torch.cuda.device_count(), run_world_size(plan)
    if have < need:
        raise InputError("plan", f"{need} GPUs", f"this machine has {have} CUDA devices; run it with device='cpu' "
                         "(one process per planned GPU) or across nodes with torchrun")


def launch(plan: Plan | PipelineSet, task: TrainTask, config: RunConfig | None = None) -> RunHandle:
    """Start ``plan``'s ranks (a plan's, or a set of independent pipelines') as local processes and return at once."""
    return RunHandle(plan, task, config or RunConfig())


def run_plan(plan: Plan | PipelineSet, task: TrainTask, config: RunConfig | None = None,
             progress: Callable[[StepMetrics], None] | None = None) -> RunResult:
    """Train ``task`` under ``plan`` (a :class:`Plan`, or a :class:`PipelineSet` of independent
    pipelines) on local processes until ``config.steps``; see :class:`RunConfig`. ``progress`` is
    called with each iteration's :class:`StepMetrics` (checked before any rank starts)."""
    _check_progress(progress)
    return launch(plan, task, config).wait(progress=progress)


def _check_progress(progress: object) -> None:
    """Refuse a ``progress`` that is neither callable nor None: 5 was a TypeError in the middle of
    the run, its ranks left to finish unwatched."""
    if progress is not None and not callable(progress):
        raise InputError("progress", type(progress).__name__, "must be a callable taking StepMetrics, or None")

