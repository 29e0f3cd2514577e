"""Hadar experiments: the Gavel setting's regimes with their floors, and the online/offline gap.

The Gavel setting (rigid jobs with Gavel's throughputs, slotted rounds): :func:`simulate_gavel`
runs any policy with ONE checkpoint-restore delay charged alike to every policy
(:class:`GavelSetting`); :func:`gavel_metrics` sets each result beside its floors -- the
average of each job's solo time (alone on its fastest type, plus one restore) and a makespan
bound (:func:`makespan_floor`) -- and reports per-type utilisation in rounds where jobs queue;
:func:`load_regime` reads a regime's sweep file (a sweep file plus a ``[gavel_setting]``
table) and :func:`run_regime` runs it with :func:`gavel_cell` as the cell function.

:func:`evaluate_online` runs :class:`~heteroplan.policies.hadar.HadarPolicy` (``retry=False``)
in the round loop on a :class:`~heteroplan.formulations.hadar.HadarInstance` and scores it
with the instance's utility, directly comparable with the offline optimum
(:func:`~heteroplan.formulations.hadar.hadar_milp`); :func:`density_lower_bound` gives the
price floor ``L`` under which the first job is always admitted.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from heteroplan.cluster import Cluster, GPUType, Node
from heteroplan.errors import InputError
from heteroplan.formulations.hadar import (
    HadarInstance,
    density_bounds,
    hadar_utility,
    makespan_bound_lp,
    pace_slots,
)
from heteroplan.policies.hadar import HadarPolicy, Planning
from heteroplan.schema import Number, Pair, Record, decode, naming_file, shown
from heteroplan.sim.fidelity import SimFidelity
from heteroplan.sim.loop import simulate
from heteroplan.sim.metrics import SimResult
from heteroplan.sim.sweep.spec import CellSpec, SimulatorKind, SweepSpec, parse_sweep, read_toml
from heteroplan.solvers import solve
from heteroplan.workload.rigid import RigidJob

__all__ = [
    "Floors",
    "GavelSetting",
    "Regime",
    "density_lower_bound",
    "evaluate_online",
    "floors",
    "gavel_cell",
    "gavel_metrics",
    "load_regime",
    "makespan_floor",
    "run_regime",
    "simulate_gavel",
]


def density_lower_bound(instance: HadarInstance) -> tuple[float, float]:
    """(lowest, highest) utility per GPU-slot of a schedule any job of ``instance`` can run at
    once on an idle cluster (:func:`~heteroplan.formulations.hadar.density_bounds` over the paces
    whose eligible GPUs hold the gang). Prices between half the lowest (``L``: the least dense
    schedule is strictly admissible, the OASiS condition) and the highest (``U``: nothing is
    affordable on a full node) are what the competitive-ratio argument asks for.
    """
    rates = np.asarray(instance.rates, dtype=float)
    n = pace_slots(instance.steps, rates, instance.slot)
    cap_type = np.bincount(instance.node_type, weights=instance.capacity, minlength=rates.shape[1])
    eligible_cap = ((rates[:, None, :] >= rates[:, :, None]) * cap_type[None, None, :]).sum(axis=2)  # (J, pace)
    fits = eligible_cap >= np.asarray(instance.tasks)[:, None]
    return density_bounds(np.where(fits, n, np.inf), np.asarray(instance.tasks))


def evaluate_online(instance: HadarInstance, **policy_options: object) -> tuple[float, dict[str, int], float]:
    """Run the pure online algorithm on a :class:`~heteroplan.formulations.hadar.HadarInstance`.

    Builds the instance's cluster (node h of type ``t<k>``) and jobs, simulates
    :class:`HadarPolicy` (``Planning.COMMITTED``, ``retry=False``, no idle fill, schedules inside the horizon unless overridden) in
    the round loop and returns (objective, completion slot per finished job, alpha), the
    objective being ``sum f[j, c_j]`` with the instance's :func:`hadar_utility` — directly
    comparable with the offline MILP optimum — and the policy's ``alpha``. Unless given,
    ``L`` is half the lowest and ``U`` the highest of :func:`density_lower_bound`.
    """
    if not isinstance(instance, HadarInstance):
        raise InputError("instance", type(instance).__name__, "must be a HadarInstance")
    num_types = np.shape(instance.rates)[1]
    cap = np.asarray(instance.capacity)
    per_node = max(int(cap.max()), 1)
    types = [GPUType(f"t{k}", 16, per_node) for k in range(num_types)]
    nodes = [Node(f"n{h}", f"t{int(k)}", int(c)) for h, (k, c) in enumerate(zip(instance.node_type, cap, strict=True))]
    cluster = Cluster(tuple(types), tuple(nodes), name="hadar-instance")
    jobs = [
        RigidJob(
            f"j{j}",
            int(instance.tasks[j]),
            float(instance.steps[j]),
            float(instance.arrival[j]) * instance.slot,
            {f"t{k}": float(instance.rates[j][k]) for k in range(num_types)},
        )
        for j in range(len(instance.tasks))
    ]
    lo, hi = density_lower_bound(instance)
    options: dict = {
        "planning": Planning.COMMITTED,
        "retry": False,
        "fill_idle": False,
        "max_slot": int(instance.slots),
        "slot": instance.slot,
        "lower": 0.5 * lo,
        "upper": hi,
    }
    options.update(policy_options)
    policy = HadarPolicy(**options)
    result = simulate(jobs, cluster, policy, round_length=instance.slot, max_rounds=int(instance.slots),
                      progress=False)
    f = hadar_utility(instance)
    slots: dict[str, int] = {}
    total = 0.0
    for jid, end in result.completion.items():
        c = int(math.ceil(end / instance.slot - 1e-9)) - 1
        slots[jid] = c
        if c < instance.slots:
            total += float(f[int(jid[1:]), c])
    return total, slots, policy.alpha


# ------------------------------------------------------------------ the Gavel setting


@dataclass(frozen=True)
class GavelSetting:
    """How a regime is run and measured, alike for every policy.

    Attributes:
        restart_delay_s: checkpoint-restore seconds every (re)start of every job costs, under
            every policy (the loop charges it at the start of the round it (re)starts in).
        window: ``(first, last)``: only jobs ``first <= i < last`` (arrival order) are measured
            (Gavel's steady-state measurement); ``None``: every job.
    """

    restart_delay_s: float = 0.0
    window: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        d = self.restart_delay_s
        if isinstance(d, bool) or not isinstance(d, (int, float)) or not (d >= 0 and math.isfinite(d)):
            raise InputError("gavel_setting.restart_delay_s", d, "must be seconds >= 0")
        if self.window is not None:
            w = tuple(self.window)
            if len(w) != 2 or not all(isinstance(i, int) and not isinstance(i, bool) for i in w) \
                    or not 0 <= w[0] < w[1]:
                raise InputError("gavel_setting.window", self.window, "must be [first, last] job indices, 0 <= first < last")
            object.__setattr__(self, "window", w)


@dataclass(frozen=True)
class Regime:
    """A regime: its sweep (workloads x clusters x policies x seeds) and how it is measured."""

    spec: SweepSpec
    setting: GavelSetting


def load_regime(path: str | Path) -> Regime:
    """A regime file: a sweep file (``simulator = "slotted"``) plus an optional
    ``[gavel_setting]`` table (``restart_delay_s``, ``window``)."""
    path = Path(path)
    tables = read_toml(path, "regime")
    with naming_file(path):
        raw = tables.pop("gavel_setting", {})
        if not isinstance(raw, Mapping) or set(raw) - {"restart_delay_s", "window"}:
            raise InputError("gavel_setting", shown(raw), "a table with restart_delay_s and/or window")
        raw = decode(GAVEL_SETTING, raw, "gavel_setting")
        window = raw.get("window")
        setting = GavelSetting(raw.get("restart_delay_s", 0.0), tuple(window) if window is not None else None)
        return Regime(parse_sweep(tables, base=path.parent), setting)


_JOB_INDEX = Number(low=0, high=10_000_000, integer=True)
GAVEL_SETTING = Record({}, {"restart_delay_s": Number(low=0, high=7 * 86_400.0, unit="seconds"),
                            "window": Pair((_JOB_INDEX, _JOB_INDEX))})
"""A regime file's ``[gavel_setting]`` table (the rest of the file is a sweep file)."""


def simulate_gavel(jobs: Sequence[RigidJob], cluster: Cluster, policy: Any, setting: GavelSetting,
                   round_length: float = 360.0, max_time: float | None = None) -> SimResult:
    """Run ``policy`` with ``setting.restart_delay_s`` charged to every (re)start of every job.

    The delay reaches the loop as ``SimFidelity(restart_delay_s=delay)``, the run's one delay for
    every job whatever the policy (it replaces the policy's own ``restart_delay_s`` option);
    rounds are recorded for the per-type utilisation while jobs queue.
    """
    fidelity = SimFidelity(restart_delay_s=float(setting.restart_delay_s))
    return simulate(jobs, cluster, policy, round_length=round_length, max_time=max_time, progress=False,
                    fidelity=fidelity, record=True)


def makespan_floor(jobs: Sequence[RigidJob], cluster: Cluster, restart_delay_s: float = 0.0, cuts: int = 8,
                   forking: bool = False) -> float:
    """Seconds from the first arrival that no policy can beat.

    The larger of: each job's arrival plus its solo time (fastest type that holds its gang,
    plus one restore; left out with ``forking``: HadarE's copies beat it), and, for ``cuts`` arrival times ``tau`` (quantiles), ``tau`` plus the LP
    bound (:func:`~heteroplan.formulations.hadar.makespan_bound_lp`) of the jobs arriving at or
    after ``tau``.
    """
    if not jobs:
        raise InputError("jobs", jobs, "the workload has no jobs")
    types = list(cluster.type_names)
    cap = cluster.capacity()
    capacity = np.array([cap[k] for k in types], dtype=float)
    arrival = np.array([j.arrival_time for j in jobs])
    work = np.array([j.total_steps for j in jobs])
    tasks = np.array([j.tasks for j in jobs])
    rates = np.array([[j.rate(k) if cap[k] >= j.tasks else 0.0 for k in types] for j in jobs])
    solo = work / rates.max(axis=1) + restart_delay_s
    first = float(arrival.min())
    bound = 0.0 if forking else float((arrival + solo).max()) - first
    for tau in np.unique(np.quantile(arrival, np.linspace(0, 1, cuts, endpoint=False))):
        late = arrival >= tau
        sol = solve(makespan_bound_lp(work[late], rates[late], tasks[late], capacity), time_limit=30.0)
        if sol.objective is not None and math.isfinite(sol.objective):
            bound = max(bound, float(tau) - first + float(sol.objective))
    return bound


@dataclass(frozen=True)
class Floors:
    """Lower bounds a regime leaves: hours."""

    avg_jct_h: float  # mean over the measured jobs of solo time + one restore
    makespan_h: float  # :func:`makespan_floor`


def floors(jobs: Sequence[RigidJob], cluster: Cluster, setting: GavelSetting, forking: bool = False) -> Floors:
    """The floors of ``jobs`` on ``cluster`` (the measured window's jobs for the JCT floor).

    With ``forking`` (HadarE) the makespan floor is the LP part only, and the JCT floor (solo
    times) is no bound: a forked job can beat its solo time."""
    cap = cluster.capacity()
    measured = _window(jobs, setting)
    solo = [j.total_steps / max(j.rate(k) for k in cluster.type_names if cap[k] >= j.tasks) + setting.restart_delay_s
            for j in measured]
    return Floors(float(np.mean(solo)) / 3600,
                  makespan_floor(jobs, cluster, setting.restart_delay_s, forking=forking) / 3600)


def _window(jobs: Sequence[RigidJob], setting: GavelSetting) -> list[RigidJob]:
    order = sorted(jobs, key=lambda j: (j.arrival_time, j.job_id))
    if setting.window is None:
        return order
    first, last = setting.window
    if last > len(order):
        raise InputError("gavel_setting.window", setting.window, f"the workload has {len(order)} jobs")
    return order[first:last]


def gavel_metrics(result: SimResult, jobs: Sequence[RigidJob], cluster: Cluster, setting: GavelSetting,
                  forking: bool = False) -> dict[str, float]:
    """The run's summary plus its floors and ratios, the measured window, restarts and per-type
    utilisation (all rounds, and rounds in which some active job got no GPUs). ``forking``: the
    policy forks jobs (see :func:`floors`).

    Keys added: ``floor_jct_h``, ``floor_makespan_h``, ``window_avg_jct_h`` (NaN when a measured
    job did not finish), ``window_unfinished``, ``jct_over_floor``, ``makespan_over_floor``,
    ``restarts``, ``queued_rounds``, ``util_<type>``, ``util_queued_<type>``.
    """
    out = {k: v for k, v in result.summary().items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    fl = floors(jobs, cluster, setting, forking)
    measured = {j.job_id for j in _window(jobs, setting)}
    done = {j.job_id: j.jct_s for j in result.finished() if j.job_id in measured}
    window_jct = float(np.mean(list(done.values()))) / 3600 if len(done) == len(measured) else math.nan
    out |= {"floor_jct_h": fl.avg_jct_h, "floor_makespan_h": fl.makespan_h, "window_avg_jct_h": window_jct,
            "window_unfinished": len(measured) - len(done), "jct_over_floor": window_jct / fl.avg_jct_h,
            "makespan_over_floor": out["makespan_h"] / fl.makespan_h if len(done) == len(measured) else math.nan,
            "restarts": float(sum(j.restarts for j in result.jobs))}
    cap = cluster.capacity()
    busy = {k: 0.0 for k in cluster.type_names}
    busy_q = dict(busy)
    rounds = queued = 0
    for (_, in_use, active), (_, allocs) in zip(result.timeline, result.schedule, strict=True):
        rounds += 1
        waiting = len(allocs) < active
        queued += waiting
        for k in busy:
            busy[k] += in_use.get(k, 0)
            busy_q[k] += in_use.get(k, 0) if waiting else 0
    out["queued_rounds"] = float(queued)
    for k in busy:
        out[f"util_{k}"] = busy[k] / (cap[k] * rounds) if rounds else math.nan
        out[f"util_queued_{k}"] = busy_q[k] / (cap[k] * queued) if queued else math.nan
    return out


def gavel_cell(cell: CellSpec, setting: GavelSetting) -> dict[str, Any]:
    """Sweep cell function (:func:`~heteroplan.sim.sweep.run_sweep`'s ``cell_fn``) for the Gavel
    setting: the cell's generated workload and policy under :func:`simulate_gavel`, scored by
    :func:`gavel_metrics`."""
    from heteroplan.workload.gavel import generate_workload, load_throughputs
    from heteroplan.workload.rigid import rigid_jobs_from_gavel

    if cell.simulator != SimulatorKind.SLOTTED:
        raise InputError("simulator", cell.simulator, "the Gavel setting runs the slotted simulator")
    cluster = cell.cluster.build()
    policy = cell.policy.build()
    params = dict(cell.workload.params)
    gavel = generate_workload(params.pop("jobs"), params.pop("rate", None), seed=cell.seed, **params)
    jobs = rigid_jobs_from_gavel(gavel, load_throughputs())[: cell.jobs]
    max_time = cell.max_hours * 3600 if cell.max_hours is not None else None
    result = simulate_gavel(jobs, cluster, policy, setting, cell.round_length or 360.0, max_time)
    return {"metrics": gavel_metrics(result, jobs, cluster, setting, bool(policy.forking)), "jcts": [j.jct_s for j in result.finished()],
            "error": result.error}


def run_regime(regime: Regime, store: str | Path, workers: int | None = None, progress: bool | None = None) -> Any:
    """Run every cell of ``regime`` into the result store ``store`` (a sweep report).

    The store should be the regime's own (its cells' keys do not include the setting)."""
    from heteroplan.sim.sweep import run_sweep

    return run_sweep(regime.spec, store, workers=workers, progress=progress,
                     cell_fn=functools.partial(gavel_cell, setting=regime.setting))
