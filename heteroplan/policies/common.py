"""Pieces shared by the round-based policies: goodput matrices, scale limits, type picking."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from heteroplan.cluster import Cluster
from heteroplan.errors import InputError
from heteroplan.formulations.sia import ConfigSet
from heteroplan.policies.base import Allocation, JobState
from heteroplan.policies.placement import place

__all__ = ["goodput_matrix", "max_gpus_this_round", "current_config", "place_blind"]


SCALE_UP_FROM = ("max", "current")


def max_gpus_this_round(job: JobState, scale_up: float, scale_from: str = "max") -> int:
    """Sia/Pollux scale-up rule: start at 1 GPU, at most ``scale_up`` x a reference count.

    ``scale_from="max"``: the most GPUs the job has ever run on (``job.max_gpus_run``;
    the Sia and Pollux artifacts allow ``2 x`` the largest profiled replica count, shared
    across GPU types), so a job shrunk by contention may grow straight back;
    ``"current"``: its current allocation (else its last one, ``job.last_gpus``).
    """
    if scale_from not in SCALE_UP_FROM:
        raise InputError("scale_up_from", scale_from, f"choose one of {list(SCALE_UP_FROM)}")
    current = job.allocation.num_gpus if job.allocation else job.last_gpus
    ref = max(current, job.max_gpus_run) if scale_from == "max" else current
    return int(min(job.max_gpus, max(1, np.floor(scale_up * ref))))


def goodput_matrix(
    jobs: Sequence[JobState], configs: ConfigSet, scale_up: float | None = 2.0, types: np.ndarray | None = None,
    scale_from: str = "max",
) -> np.ndarray:
    """(jobs, configs) goodput in samples/s from each job's estimator; 0 where not allowed.

    Rigid jobs only get configurations with exactly their requested GPU count. ``types``
    overrides the GPU type asked of the estimator per configuration (heterogeneity-unaware
    policies ask every configuration as if it were one reference type). ``scale_up`` and
    ``scale_from`` limit elastic jobs' GPUs (see :func:`max_gpus_this_round`).
    """
    G = np.zeros((len(jobs), len(configs)))
    names = configs.type_names if types is None else types
    for i, job in enumerate(jobs):
        if job.estimator is None:
            continue
        row = np.asarray(
            job.estimator.goodput(names, configs.num_nodes, configs.num_gpus, progress=job.progress), dtype=float
        )
        if job.elastic:
            limit = max_gpus_this_round(job, scale_up, scale_from) if scale_up else job.max_gpus
            row = np.where(configs.num_gpus <= limit, row, 0.0)
        else:
            row = np.where(configs.num_gpus == job.requested_gpus, row, 0.0)
        G[i] = row
    return G


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
