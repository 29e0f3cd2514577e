"""Pieces shared by the round-based policies: goodput matrices, scale limits, type picking."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from enum import StrEnum

import numpy as np

from heteroplan.cluster import Cluster
from heteroplan.errors import InputError
from heteroplan.formulations.sia import ConfigSet, GoodputPairs
from heteroplan.inputs import enum_choice
from heteroplan.perf.protocols import NoiseScaled, Versioned
from heteroplan.policies.base import Allocation, JobState
from heteroplan.policies.placement import place

__all__ = ["GoodputCache", "model_state", "goodput_matrix", "goodput_pairs", "choosable_columns", "max_gpus_this_round",
           "current_config", "place_blind", "ScaleFrom"]


class ScaleFrom(StrEnum):
    """The GPU count an elastic job's per-round scale-up limit multiplies (``scale_up_from``)."""

    MAX = "max"  # the most GPUs the job has ever run on
    CURRENT = "current"  # its current allocation (else its last one)


def max_gpus_this_round(job: JobState, scale_up: float, scale_from: ScaleFrom | str = ScaleFrom.MAX) -> int:
    """Sia/Pollux scale-up rule: start at 1 GPU, at most ``scale_up`` x a reference count.

    ``scale_from="max"``: the most GPUs the job has ever run on (``job.max_gpus_run``;
    the Sia and Pollux artifacts allow ``2 x`` the largest profiled replica count, shared
    across GPU types), so a job shrunk by contention may grow straight back;
    ``"current"``: its current allocation (else its last one, ``job.last_gpus``).
    """
    scale_from = enum_choice(ScaleFrom, "scale_up_from", scale_from)
    current = job.allocation.num_gpus if job.allocation else job.last_gpus
    ref = max(current, job.max_gpus_run) if scale_from is ScaleFrom.MAX else current
    return int(min(job.max_gpus, max(1, np.floor(scale_up * ref))))


def choosable_columns(job: JobState, configs: ConfigSet, scale_up: float | None = 2.0,
                      scale_from: ScaleFrom | str = ScaleFrom.MAX) -> np.ndarray:
    """Indices of the configurations ``job`` may get this round (ascending).

    Rigid jobs: exactly their requested GPU count; elastic jobs: at most
    :func:`max_gpus_this_round` GPUs (``job.max_gpus`` when ``scale_up`` is None or 0).
    """
    if not job.elastic:
        return configs.columns_with(job.requested_gpus)
    limit = max_gpus_this_round(job, scale_up, scale_from) if scale_up else job.max_gpus
    return configs.columns_up_to(limit)


class GoodputCache:
    """Goodputs of each job's choosable configurations, reused across rounds while nothing they
    depend on changes: the job's estimator (same object, same ``version``), its noise scale
    (``noise_scale(progress)``; the progress itself for an estimator without one) and the
    configurations (and the type names asked, compared by identity: see :meth:`typed_names`).
    Estimators without a ``version`` are evaluated every round."""

    def __init__(self) -> None:
        self._configs: ConfigSet | None = None
        self._rows: dict[str, tuple] = {}
        self._values: dict[tuple[str, object], tuple] = {}
        self._names: dict[str, np.ndarray] = {}

    def _use(self, configs: ConfigSet) -> None:
        if configs is not self._configs:
            self._configs, self._rows, self._names = configs, {}, {}

    def typed_names(self, configs: ConfigSet, gpu_type: str) -> np.ndarray:
        """``gpu_type`` for every configuration (read-only, one array per type): heterogeneity-unaware
        policies ask the estimator as if every configuration were of one reference type."""
        self._use(configs)
        names = self._names.get(gpu_type)
        if names is None:
            names = self._names[gpu_type] = np.full(len(configs), gpu_type, dtype=object)
            names.setflags(write=False)
        return names

    def row(self, job: JobState, configs: ConfigSet, cols: np.ndarray, names: np.ndarray) -> np.ndarray:
        """Goodput (samples/s) of ``job`` on the configurations ``cols`` (type names ``names``)."""
        self._use(configs)
        est = job.estimator
        state = model_state(job)
        if state is None:
            return _evaluate(job, configs, cols, names)
        hit = self._rows.get(job.job_id)
        if hit is not None and hit[0] is est and hit[1] == state and hit[2] is cols and hit[3] is names:
            return hit[4]
        values = _evaluate(job, configs, cols, names)
        self._rows[job.job_id] = (est, state, cols, names, values)
        return values

    def value(self, job: JobState, key: object, compute: Callable[[], float]) -> float:
        """``compute()``, a number that depends on ``job``'s model only through its estimator,
        ``version`` and noise scale (and on ``key``), kept while those stay the same."""
        state = model_state(job)
        if state is None:
            return compute()
        slot = (job.job_id, key)
        hit = self._values.get(slot)
        if hit is not None and hit[0] is job.estimator and hit[1] == state:
            return hit[2]
        value = compute()
        self._values[slot] = (job.estimator, state, value)
        return value

    def keep_only(self, job_ids: Sequence[str]) -> None:
        """Forget jobs not in ``job_ids`` (finished ones)."""
        if len(self._rows) > 2 * len(job_ids) or len(self._values) > 4 * len(job_ids):
            wanted = set(job_ids)
            self._rows = {k: v for k, v in self._rows.items() if k in wanted}
            self._values = {k: v for k, v in self._values.items() if k[0] in wanted}


def model_state(job: JobState) -> tuple | None:
    """What ``job``'s goodputs depend on besides the configuration: its estimator's ``version``
    and noise scale at its progress (the progress itself for an estimator without a noise
    scale); ``None`` when the estimator has no ``version`` (nothing may be reused)."""
    est = job.estimator
    if not isinstance(est, Versioned):
        return None
    return (est.version, est.noise_scale(job.progress) if isinstance(est, NoiseScaled) else job.progress)


def _evaluate(job: JobState, configs: ConfigSet, cols: np.ndarray, names: np.ndarray) -> np.ndarray:
    """``job``'s goodputs on the configurations ``cols``, one call with arrays; a single number
    answers for all of them, any other shape is the job's model's fault (named, as an InputError)."""
    answer = job.estimator.goodput(names[cols], configs.num_nodes[cols], configs.num_gpus[cols], progress=job.progress)
    try:
        values = np.asarray(answer, dtype=float)
    except (TypeError, ValueError):
        values = None
    if values is None or values.shape not in ((), (1,), (len(cols),)):
        raise InputError(f"job[{job.job_id}].perf_model", type(job.estimator).__name__,
                         f"goodput() of {len(cols)} configurations (arrays) answered "
                         f"{'shape ' + str(values.shape) if values is not None else repr(answer)[:80]}: "
                         "its arguments broadcast, so the answer must be numbers of their shape")
    values = np.broadcast_to(values, (len(cols),)).copy() if values.shape != (len(cols),) else values
    bad = np.flatnonzero(~(np.isfinite(values) & (values >= 0)))
    if len(bad):
        c = cols[bad[0]]
        raise InputError(f"job[{job.job_id}].perf_model", type(job.estimator).__name__,
                         f"goodput({names[c]!r}, {configs.num_nodes[c]}, {configs.num_gpus[c]}) returned "
                         f"{values[bad[0]]}: must be a finite number >= 0 (work units/s; 0: cannot run there)")
    return values


def goodput_pairs(
    jobs: Sequence[JobState], configs: ConfigSet, scale_up: float | None = 2.0, types: np.ndarray | None = None,
    scale_from: ScaleFrom | str = ScaleFrom.MAX, cache: GoodputCache | None = None,
) -> GoodputPairs:
    """Goodput (samples/s) of each job on each configuration it may get this round (see
    :func:`choosable_columns`), evaluated only there: a job with a scale-up limit costs its
    few candidate configurations, not the whole cluster's. ``types`` overrides the GPU type
    asked of the estimator per configuration; ``cache`` reuses rows across rounds (with
    ``types``, only while the same array is passed: see :meth:`GoodputCache.typed_names`).
    """
    names = configs.type_names if types is None else np.asarray(types, dtype=object)
    job_parts, col_parts, val_parts = [], [], []
    for i, job in enumerate(jobs):
        if job.estimator is None:
            continue
        cols = choosable_columns(job, configs, scale_up, scale_from)
        if not len(cols):
            continue
        values = cache.row(job, configs, cols, names) if cache is not None else _evaluate(job, configs, cols, names)
        job_parts.append(np.full(len(cols), i))
        col_parts.append(cols)
        val_parts.append(values)
    if not job_parts:
        empty = np.zeros(0, dtype=np.int64)
        return GoodputPairs(len(jobs), empty, empty, np.zeros(0))
    return GoodputPairs(len(jobs), np.concatenate(job_parts), np.concatenate(col_parts), np.concatenate(val_parts))


def goodput_matrix(
    jobs: Sequence[JobState], configs: ConfigSet, scale_up: float | None = 2.0, types: np.ndarray | None = None,
    scale_from: ScaleFrom | str = ScaleFrom.MAX,
) -> np.ndarray:
    """(jobs, configs) goodput in samples/s from each job's estimator; 0 where not allowed.

    Rigid jobs only get configurations with exactly their requested GPU count. ``types``
    overrides the GPU type asked of the estimator per configuration (heterogeneity-unaware
    policies ask every configuration as if it were one reference type). ``scale_up`` and
    ``scale_from`` limit elastic jobs' GPUs (see :func:`max_gpus_this_round`). The dense form
    of :func:`goodput_pairs`.
    """
    return goodput_pairs(jobs, configs, scale_up, types, scale_from).dense(len(configs))


def current_config(jobs: Sequence[JobState], configs: ConfigSet) -> np.ndarray:
    """Index of each job's current configuration (-1 when not running or not in ``configs``)."""
    return np.array(
        [configs.index_of(j.allocation.gpu_type, j.allocation.num_gpus) if j.allocation else -1 for j in jobs], dtype=int
    )


def place_blind(
    cluster: Cluster, jobs: Sequence[JobState], counts: Mapping[str, int]
) -> dict[str, Allocation]:
    """Place GPU counts without regard to GPU type (heterogeneity-unaware schedulers).

    A job keeps its current type when it still fits there; otherwise it takes the type with
    the most free GPUs. Jobs that fit nowhere are left out this round.
    """
    by_id = {j.job_id: j for j in jobs}
    free = cluster.capacity()
    wanted: dict[str, tuple[str, int]] = {}
    # Jobs keeping their GPU count go first so they keep their type (no needless restart).
    def keeps(jid: str) -> bool:
        cur = by_id[jid].allocation
        return cur is not None and cur.num_gpus == counts[jid]

    order = sorted(counts, key=lambda jid: (not keeps(jid), -counts[jid], jid))
    for jid in order:
        need = counts[jid]
        cur = by_id[jid].allocation
        if cur is not None and free.get(cur.gpu_type, 0) >= need:
            gpu_type = cur.gpu_type
        else:
            gpu_type = max(free, key=lambda t: (free[t], t))
            if free[gpu_type] < need:
                # Shrink an elastic job to the largest power of two that fits rather than starve it;
                # a rigid job runs on its whole gang or not at all.
                fits = 1 << (free[gpu_type].bit_length() - 1) if free[gpu_type] > 0 else 0
                need = fits if by_id[jid].elastic else 0
                if need == 0:
                    continue
        free[gpu_type] -= need
        wanted[jid] = (gpu_type, need)
    previous = {j.job_id: j.allocation for j in jobs if j.allocation is not None}
    placed, _ = place(cluster, wanted, previous)
    return placed
