"""How closely the simulator follows the Sia artifact's simulator (siasosp23/artifacts, sia-simulator).

:class:`SimFidelity` collects the mechanisms that decide how fast a job really progresses.
The defaults are what the Sia artifact does (and so what the Sia paper's published numbers
include); :meth:`SimFidelity.ideal` switches every one of them off, which is what this
simulator did before they were modelled (see ``docs/sia.md``, "Reproduction").

* ``slowdown`` -- the artifact divides every job's simulated goodput by a per-application
  factor "fitted to real-world data" (its ``SLOWDOWNS``: real runs on the testbed were slower
  than the traces predict): cifar10 1.8, ncf 1.5, imagenet/yolov3/bert/deepspeech2 1.2.
  It applies to every policy alike and is not visible to the policies' performance models.
* ``batch_size`` -- ``"estimated"``: an elastic job runs at the batch size (local batch and
  accumulation steps) that maximizes goodput under *its own* estimated model on its
  allocation, as in the artifact (``Job.update_local_bsz`` optimizes the job's fitted
  goodput function); ``"truth"``: at the optimum of the ground-truth model (an oracle).
* ``grad_stats`` -- ``"batch"``: statistical efficiency from the validation run at the job's
  batch size during its current epoch (:class:`~heteroplan.perf.gradstats.GradStats`), and
  the job's estimator sees the noise scale it measured in its last round (Pollux/Sia
  estimate phi from the job's own gradients); ``"median"``: one phi-vs-progress table, the
  median over all runs, for truth and estimator alike.
* ``profiling_time`` -- seconds a new job of an adaptive policy spends being profiled on one
  GPU of each type, one type after another, before the policy may schedule it. The Sia paper
  describes such profiling; the artifact's simulator has none (its jobs' 1-GPU throughputs
  are known from the traces when they arrive), so the default is 0. Profiling GPUs are not
  taken from the cluster.
* ``free_moves`` -- moving a job to other nodes of the same GPU type with the same shape (GPUs
  per node) costs no restart, as in the artifact (its placements are GPU counts per node);
  ``False``: every change of nodes is a checkpoint-restart.
* ``epoch_rates`` -- a job's rate is re-evaluated at every epoch boundary it crosses inside a
  round (its statistical efficiency is per epoch), as the artifact's ``Job.step`` walks a
  round epoch by epoch; ``False``: one rate per round, taken at the round's start. This
  matters most for Gavel's 360 s rounds: cifar10 at batch 4096 on 16 A100s passes its first
  epochs (efficiency 1.8, rising to 31) in seconds, and a whole round at epoch 0's rate made it
  take 0.146 h instead of the artifact's 0.063 h.
* ``restart_delay_s`` -- one restart delay (s) for every job of the run, whatever the policy,
  replacing the policy's ``restart_delay_s`` option and the applications' measured delays
  (``None``: not replaced). Per-policy delays are the policy's option
  (``make_policy("pollux-sia", restart_delay_s=30)``).

* ``profiles`` -- where a new job's 1-GPU profiles (the start of the policies' bootstrapped
  model) come from: ``"truth"`` (default), this simulator's ground truth at the same local
  batches, or ``"traces"``, the measured step times. The artifact's ground truth *is* its
  traces, so what a job is profiled at is what it then runs at; ours is a model fitted to all
  measurements, and where the traces are noisy the two disagree (yolov3 on one dgx-ext GPU: 81
  samples/s measured at local batch 32, 40 in the fitted model), so a policy planning with
  ``"traces"`` profiles misjudges those jobs until it has observed them (``docs/sia.md``,
  "Under load").

Mechanisms the loop always has, as the artifact does: the restart delay is charged at the
start of the round a job (re)starts in, also on its first start; a job arriving inside a
round is first seen at the next round boundary; GPU-hours count the allocated GPUs of every
round before completion; p99 is ``sorted(jct)[int(0.99 N)]``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from heteroplan.errors import InputError
from heteroplan.inputs import enum_choice
from heteroplan.perf.applications import SIA_SLOWDOWNS
from heteroplan.perf.sia_data import ProfileSource

__all__ = ["SIA_SLOWDOWNS", "SimFidelity", "BatchSizeSource", "GradStatsSource", "FidelityPreset"]


class FidelityPreset(StrEnum):
    """A named :class:`SimFidelity`: the Sia artifact's mechanisms, or every one idealized."""

    SIA = "sia"
    IDEAL = "ideal"


class BatchSizeSource(StrEnum):
    """Whose model picks an elastic job's batch size in the simulator."""

    ESTIMATED = "estimated"  # the job's own (estimated) model, as Sia's artifact does
    TRUTH = "truth"  # the ground truth


class GradStatsSource(StrEnum):
    """The gradient statistics a simulated job's statistical efficiency follows."""

    BATCH = "batch"  # per batch size and per epoch, as measured (the Sia artifact)
    MEDIAN = "median"  # one median noise scale per application


@dataclass(frozen=True)
class SimFidelity:
    """Simulator mechanisms of the Sia artifact (defaults) or their idealized versions.

    Attributes:
        slowdown: per application, the factor (>= 1 usually; > 0) by which real progress is
            slower than the ground-truth goodput; applications not listed run at 1.
        batch_size: :class:`BatchSizeSource` (or its value): ``"estimated"`` (the job's own model
            picks its batch) or ``"truth"``.
        grad_stats: :class:`GradStatsSource` (or its value): ``"batch"`` (per-batch-size,
            per-epoch statistics) or ``"median"``.
        profiling_time: seconds per GPU type before a new adaptive job is schedulable (>= 0).
        free_moves: same-type, same-shape moves to other nodes cost no restart.
        epoch_rates: re-evaluate a job's rate at each epoch boundary inside a round.
        profiles: :class:`~heteroplan.perf.sia_data.ProfileSource` (or its value): new jobs'
            1-GPU profiles, ``"truth"`` (default) or ``"traces"`` (see above).
        restart_delay_s: seconds every (re)start costs in this run, for every job and policy
            (>= 0), or ``None``: the policy's option, else the job's own delay.
    """

    slowdown: Mapping[str, float] = field(default_factory=lambda: SIA_SLOWDOWNS)
    batch_size: BatchSizeSource = BatchSizeSource.ESTIMATED
    grad_stats: GradStatsSource = GradStatsSource.BATCH
    profiling_time: float = 0.0
    free_moves: bool = True
    epoch_rates: bool = True
    restart_delay_s: float | None = None
    profiles: ProfileSource = ProfileSource.TRUTH

    def __post_init__(self) -> None:
        if not isinstance(self.slowdown, Mapping):
            raise InputError("fidelity.slowdown", self.slowdown, "must be a mapping application -> factor")
        clean: dict[str, float] = {}
        for app, factor in self.slowdown.items():
            try:
                value = float(factor)
            except (TypeError, ValueError):
                raise InputError(f"fidelity.slowdown[{app}]", factor, "must be a number > 0") from None
            if not (value > 0 and math.isfinite(value)):
                raise InputError(f"fidelity.slowdown[{app}]", factor, "must be a finite number > 0")
            clean[str(app)] = value
        object.__setattr__(self, "slowdown", MappingProxyType(clean))
        object.__setattr__(self, "batch_size", enum_choice(BatchSizeSource, "fidelity.batch_size", self.batch_size))
        object.__setattr__(self, "grad_stats", enum_choice(GradStatsSource, "fidelity.grad_stats", self.grad_stats))
        try:
            t = float(self.profiling_time)
        except (TypeError, ValueError):
            raise InputError("fidelity.profiling_time", self.profiling_time, "must be seconds >= 0") from None
        if not (t >= 0 and math.isfinite(t)):
            raise InputError("fidelity.profiling_time", self.profiling_time, "must be seconds >= 0")
        object.__setattr__(self, "profiling_time", t)
        delay = self.restart_delay_s
        if delay is not None:
            if isinstance(delay, bool) or not (isinstance(delay, int | float) and delay >= 0 and math.isfinite(delay)):
                raise InputError("fidelity.restart_delay_s", delay, "must be seconds >= 0 or None")
            object.__setattr__(self, "restart_delay_s", float(delay))
        object.__setattr__(self, "profiles", enum_choice(ProfileSource, "fidelity.profiles", self.profiles))
        for name in ("free_moves", "epoch_rates"):
            if not isinstance(getattr(self, name), bool):
                raise InputError(f"fidelity.{name}", getattr(self, name), "must be True or False")

    @classmethod
    def ideal(cls) -> SimFidelity:
        """No slowdown, oracle batch size, median phi table, free profiling, every move a restart,
        one rate per round."""
        return cls(slowdown={}, batch_size=BatchSizeSource.TRUTH, grad_stats=GradStatsSource.MEDIAN,
                   profiling_time=0.0, free_moves=False, epoch_rates=False)

    @classmethod
    def preset(cls, name: FidelityPreset | str) -> SimFidelity:
        """The named preset (:class:`FidelityPreset` or its value): the Sia artifact's (``"sia"``)
        or :meth:`ideal` (``"ideal"``); :class:`InputError` naming ``fidelity`` otherwise."""
        return cls.ideal() if enum_choice(FidelityPreset, "fidelity", name) is FidelityPreset.IDEAL else cls()

    def slowdown_of(self, application: str) -> float:
        """The slowdown factor of ``application`` (1 when not listed)."""
        return self.slowdown.get(application, 1.0)
