"""Workloads of real training jobs for the round executor: emulated GPUs, or measured tiny models.

An emulated job trains a real model (a tiny GPT: real processes, rendezvous, all-reduce,
checkpoints and restarts) whose compute per iteration lasts what a GPU type's would
(:class:`~heteroplan.runtime.config.StepEmulation`: ``overhead_s + samples x seconds_per_sample``)
whatever the CPU's load; its performance model is the Pollux goodput model of exactly that step
time (:func:`emulated_goodput`), so a policy plans with the truth and the simulator can replay the
same trace (``benchmarks/ray_vs_sim.py``): what differs is what the executor adds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from heteroplan.errors import InputError, check_int
from heteroplan.inputs import MAX_WAIT_S, finite_number
from heteroplan.perf.applications import AppSpec
from heteroplan.perf.goodput import GoodputModel
from heteroplan.perf.throughput import ThroughputParams
from heteroplan.runtime.config import RunConfig, StepEmulation
from heteroplan.runtime.models import TinyGPTTask, TrainTask
from heteroplan.runtime.rounds import RuntimeJob

__all__ = ["EmulatedWorkload", "emulated_goodput", "emulated_jobs"]


MAX_STEPS = 2.0 ** 53
"""Most iterations a generated emulated job runs (an exact float count; ``--work 1e308`` is no job)."""


@dataclass(frozen=True)
class EmulatedWorkload:
    """A trace of emulated training jobs (seconds, samples).

    Attributes:
        emulation: the GPU types' step times.
        sync_s: seconds the goodput model charges for a gradient all-reduce over 2+ GPUs (the real
            one is measured; on CPU it is a few ms for a tiny model).
        batch_size: samples per iteration of every job.
        arrivals: each job's arrival (s).
        steps: each job's iterations.
        max_gpus: most GPUs a job may use.
        restart_delay_s: the restore delay the policy and the simulator assume per (re)start (s).
        requested_gpus: every job's gang (GPUs; see :class:`~heteroplan.runtime.rounds.RuntimeJob`).
    """

    emulation: StepEmulation
    arrivals: tuple[float, ...]
    steps: tuple[int, ...]
    sync_s: float = 0.01
    batch_size: int = 16
    max_gpus: int = 4
    restart_delay_s: float = 10.0
    task: TrainTask = field(default_factory=lambda: TinyGPTTask(n_layers=1))
    requested_gpus: int = 1

    def __post_init__(self) -> None:
        if len(self.arrivals) != len(self.steps) or not self.steps:
            raise InputError("steps", len(self.steps), f"give one per arrival ({len(self.arrivals)}), at least one")
        object.__setattr__(self, "arrivals", tuple(finite_number(f"arrivals[{i}]", t, low=0.0)
                                                   for i, t in enumerate(self.arrivals)))
        for i, s in enumerate(self.steps):
            check_int(f"steps[{i}]", s, 1)
        check_int("batch_size", self.batch_size, 1)
        if not isinstance(self.emulation, StepEmulation):
            raise InputError("emulation", type(self.emulation).__name__, "must be a StepEmulation")
        longest = max(self.emulation.compute_seconds(t, self.batch_size) for t in self.emulation.seconds_per_sample)
        if longest > MAX_WAIT_S:  # a rank sleeps it (time.sleep overflows near 9e9 s)
            raise InputError("emulation", longest, f"an iteration of {self.batch_size} samples would last {longest:g} s; "
                             f"at most {MAX_WAIT_S:g} s")
        check_int("max_gpus", self.max_gpus, 1)
        if check_int("requested_gpus", self.requested_gpus, 1) > min(self.max_gpus, self.batch_size):
            raise InputError("requested_gpus", self.requested_gpus,
                             f"must be at most max_gpus ({self.max_gpus}) and batch_size ({self.batch_size})")
        for name in ("sync_s", "restart_delay_s"):
            object.__setattr__(self, name, finite_number(name, getattr(self, name), low=0.0))

    @classmethod
    def generate(cls, num_jobs: int, emulation: StepEmulation, seed: int = 0, interarrival_s: float = 15.0,
                 work_s: tuple[float, float] = (60.0, 240.0), batch_size: int = 16, max_gpus: int = 4,
                 restart_delay_s: float = 10.0, requested_gpus: int = 1) -> EmulatedWorkload:
        """``num_jobs`` jobs arriving ``interarrival_s`` apart on average (Poisson, first at 0), each
        needing ``work_s`` seconds (uniform) alone on one GPU of the fastest type."""
        check_int("num_jobs", num_jobs, 1)
        check_int("batch_size", batch_size, 1)
        rng = np.random.default_rng(seed)
        fastest = min(emulation.compute_seconds(t, batch_size) for t in emulation.seconds_per_sample)
        low, high = (finite_number(f"work_s[{i}]", w, low=0.0) for i, w in enumerate(work_s))
        if not (fastest > 0 and high / fastest <= MAX_STEPS):  # int(inf) / a division by zero otherwise
            raise InputError("work_s", work_s, f"at {fastest:g} s per iteration on the fastest type a job would run "
                             f"more than {MAX_STEPS:g} iterations (or the emulation takes no time)")
        gaps = rng.exponential(interarrival_s, num_jobs)
        arrivals = tuple(float(round(t, 1)) for t in np.concatenate([[0.0], np.cumsum(gaps[1:])]))
        steps = tuple(max(1, int(rng.uniform(low, high) / fastest)) for _ in range(num_jobs))
        return cls(emulation, arrivals, steps, batch_size=batch_size, max_gpus=max_gpus,
                   restart_delay_s=restart_delay_s, requested_gpus=requested_gpus)

    def application(self) -> AppSpec:
        """The jobs' application: a fixed batch (efficiency 1 throughout)."""
        return AppSpec("emulated", self.batch_size, self.batch_size, 1, self.batch_size, self.restart_delay_s)


def emulated_goodput(workload: EmulatedWorkload) -> GoodputModel:
    """The Pollux goodput model (samples/s) of the emulated step time: ``T_grad = overhead + b m`` per
    GPU type, sync ``sync_s`` over 2+ GPUs, no overlap (gamma 1), a fixed batch."""
    em = workload.emulation
    params = {t: ThroughputParams(em.overhead_s, b, workload.sync_s, 0.0, workload.sync_s, 0.0, 1.0)
              for t, b in em.seconds_per_sample.items()}
    return GoodputModel(workload.application(), params, phi=1e6)


def emulated_jobs(workload: EmulatedWorkload, config: RunConfig | None = None,
                  names: Sequence[str] | None = None) -> list[RuntimeJob]:
    """The workload's jobs for :class:`~heteroplan.runtime.rounds.RoundExecutor` (ids ``job-0``...)."""
    config = replace(config or RunConfig(lr=0.01), emulate=workload.emulation)
    names = list(names) if names is not None else [f"job-{i}" for i in range(len(workload.steps))]
    return [RuntimeJob(name, workload.task, steps, workload.batch_size, arrival, "emulated", workload.max_gpus,
                       emulated_goodput(workload), config, restart_delay_s=workload.restart_delay_s,
                       requested_gpus=workload.requested_gpus)
            for name, arrival, steps in zip(names, workload.arrivals, workload.steps, strict=True)]
