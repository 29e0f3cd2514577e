"""A job as the scheduling session tracks it (:class:`SessionJob`), and how a submission becomes one.

:func:`new_job` checks a submission's arguments and resolves its performance model (a
:class:`ModelKind` says how a saved session keeps it); :class:`~heteroplan.scheduling.session.SchedulingSession`
holds the jobs it makes, and :mod:`heteroplan.scheduling.storage` saves and restores them.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any

from heteroplan.errors import InputError
from heteroplan.inputs import enum_choice
from heteroplan.perf.protocols import GoodputRate
from heteroplan.perf.sia_data import Estimator
from heteroplan.policies.base import Allocation, PerfModel
from heteroplan.scheduling.admission import Parked
from heteroplan.scheduling.arguments import (
    MAX_COUNT,
    MAX_GPUS,
    check_count,
    finite_seconds,
    is_real,
)

__all__ = ["ModelKind", "SessionJob", "new_job"]


class ModelKind(enum.Enum):
    """What a job's performance model is: it decides how a saved session keeps the model."""

    NONE = "none"  # policies that need no model (FIFO, YARN-CS)
    BOOTSTRAP = "bootstrap"  # a Sia application's bootstrapped model: its state is saved
    ORACLE = "oracle"  # the application's true model: only its measured noise scale changes
    TABLE = "table"  # a ThroughputTable: its rates are saved
    OBJECT = "object"  # any other PerfModel object: saved without it (given again at load)


@dataclass(eq=False)
class SessionJob:
    """The session's mutable state of one job (see :class:`JobRecord` for the units)."""

    job_id: str
    application: str
    arrival_time: float
    requested_gpus: int
    max_gpus: int
    elastic: bool  # the policy may rescale it (the policy and the job are elastic)
    rigid: bool  # submitted with elastic=False: it runs on exactly requested_gpus
    total_work: float
    own_restart_delay: float
    estimator: PerfModel | None
    given_batch: int
    model_kind: ModelKind
    work_done: float = 0.0
    steps_done: int = 0
    allocation: Allocation | None = None
    restore_left: float = 0.0
    restored: float = 0.0
    restarts: int = 0
    starts: int = 0
    gpu_seconds: float = 0.0
    start_time: float | None = None
    finish_time: float | None = None
    last_gpus: int = 0
    max_gpus_run: int = 0
    batch_size: int = 0
    active_rounds: int = 0
    active_sum: int = 0
    observations: int = 0
    phi: float | None = None
    reported: bool = False
    warned: bool = False
    failures: int = 0
    steps_redone: int = 0
    gave_up: str | None = None
    admitted_on: tuple[object, int] | None = None  # (cluster, observations) of the admission below
    parked: Parked | None = None

    @property
    def fraction_done(self) -> float:
        return min(self.work_done / self.total_work, 1.0)


def new_job(job_id: str, arrival_time: float, application: str, perf_model: PerfModel | str | None,
             requested_gpus: int, max_gpus: int | None, elastic: bool, batch_size: int,
             total_work: float | None, restart_delay_s: float | None, *, elastic_policy: bool) -> SessionJob:
    """A submitted job's state, every argument checked (see :meth:`SchedulingSession.submit`);
    ``elastic_policy``: the session's policy rescales jobs (a job is rescaled when both are elastic)."""
    if not isinstance(job_id, str) or not job_id:
        raise InputError("job_id", job_id, "must be a non-empty string")
    arrival_time = finite_seconds(f"job[{job_id}].arrival_time", arrival_time)
    if not isinstance(application, str) or not application:
        raise InputError(f"job[{job_id}].application", application, "must be a non-empty string")
    app = _app_or_none(application)
    kind, estimator = _resolve_model(job_id, application, perf_model)
    if total_work is None:
        if app is None:
            raise InputError(f"job[{job_id}].total_work", None, "give the work (model units) of a non-Sia job")
        total_work = app.total_work
    if not (is_real(total_work) and 0 < total_work < math.inf):
        raise InputError(f"job[{job_id}].total_work", total_work, "must be a finite number > 0 of work units")
    requested_gpus = check_count(f"job[{job_id}].requested_gpus", requested_gpus, 1, MAX_GPUS)
    if max_gpus is None:
        max_gpus = max(int(app.max_batch_size), requested_gpus) if app is not None else requested_gpus
    max_gpus = check_count(f"job[{job_id}].max_gpus", max_gpus, 1, MAX_GPUS)
    if max_gpus < requested_gpus:
        raise InputError(f"job[{job_id}].max_gpus", max_gpus,
                         f"must be >= requested_gpus ({requested_gpus}): a job never runs above its maximum")
    if restart_delay_s is None:
        restart_delay_s = app.restart_delay if app is not None else 0.0
    restart_delay_s = finite_seconds(f"job[{job_id}].restart_delay_s", restart_delay_s)
    if not isinstance(elastic, bool):
        raise InputError(f"job[{job_id}].elastic", elastic, "must be True or False")
    batch_size = check_count(f"job[{job_id}].batch_size", batch_size, 0, MAX_COUNT)
    return SessionJob(
        job_id=job_id, application=str(application), arrival_time=float(arrival_time),
        requested_gpus=requested_gpus, max_gpus=max_gpus, elastic=elastic_policy and elastic,
        rigid=not elastic,
        total_work=float(total_work), own_restart_delay=float(restart_delay_s), estimator=estimator,
        given_batch=batch_size, model_kind=kind)


def _app_or_none(application: str) -> Any:
    from heteroplan.perf.applications import get_app

    try:
        return get_app(application)
    except (InputError, KeyError):
        return None


def _resolve_model(job_id: str, application: str, perf_model: PerfModel | Estimator | str | None,
                   ) -> tuple[ModelKind, PerfModel | None]:
    """(kind, model object) of a submitted performance model."""
    from heteroplan.perf.goodput import ThroughputTable

    if perf_model is None:  # policies that need no model (FIFO, YARN-CS)
        return ModelKind.NONE, None
    if isinstance(perf_model, str):
        name = enum_choice(Estimator, f"job[{job_id}].perf_model", perf_model, "or give a PerfModel object")
        if _app_or_none(application) is None:
            raise InputError(f"job[{job_id}].application", application,
                             f"perf_model='{name}' needs a Sia application; give a PerfModel object instead")
        from heteroplan.perf.sia_data import bootstrap_model, true_model

        kind = ModelKind(name.value)
        return kind, (bootstrap_model(application) if name is Estimator.BOOTSTRAP else true_model(application))
    if not isinstance(perf_model, GoodputRate):
        raise InputError(f"job[{job_id}].perf_model", type(perf_model).__name__,
                         "must be a PerfModel (goodput(gpu_type, num_nodes, num_gpus, progress))")
    from heteroplan.perf.bootstrap import BootstrappedModel

    if type(perf_model) is ThroughputTable:
        return ModelKind.TABLE, perf_model
    if type(perf_model) is BootstrappedModel and _app_or_none(application) is not None \
            and perf_model.app.name == application:  # its state is saved; the application rebuilds the rest
        return ModelKind.BOOTSTRAP, perf_model
    return ModelKind.OBJECT, perf_model
