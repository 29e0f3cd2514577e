"""Saving a scheduling session to JSON and taking it back (no pickle: plain data only).

The file is a written, versioned schema, not the session's private fields of the day::

    {"format": 2, "cluster": <name>, "policy": <name>, "free_moves": bool,
     "restart_delay_s": seconds >= 0 | null, "assume_progress": bool,
     "last_round": seconds | null, "rounds": int >= 0,
     "jobs": [<job>, ...],
     "policy_state": {"type": <state class>, "data": <its JSON>}}      # format 2 only

Each ``<job>`` holds the fields of :data:`JOB_FIELDS` (what was submitted, the bookkeeping since,
``allocation``: ``null`` or ``{"gpu_type", "num_gpus", "placement": [[node, GPUs], ...]}``) and
its performance model by ``model_kind``: ``"none"``, ``"table"`` (``model``: its rates, work
units/s per GPU type), ``"bootstrap"`` (``model``: the bootstrapped model's observations, fits,
types awaiting a refit and measured noise scale) or ``"oracle"`` (``model``: ``{"measured_phi"}``).

Format 2 (current) adds the policy's own state between rounds (:mod:`heteroplan.policies.state`:
Gavel's time fractions and priorities, ``pollux-sia``'s virtual nodes, merged profiles and random
generator, Hadar's commitments and rates). Format 1 (before the policy state was kept) still
loads: its policy starts from a fresh state, so the next decisions of a stateful policy may differ
from the original's (a :class:`PolicyStateLostWarning` says so); those of a stateless policy
(Sia, FIFO, YARN-CS, Tiresias) do not. Any other format is refused, naming it.

The file is decoded by :mod:`heteroplan.schema` (:data:`SESSION_FILE`, :data:`JOB`,
:data:`ALLOCATION`, :data:`MODELS`): every field's type and range; then the checks between
fields no spec states (:func:`_check_job`, :func:`_check_bootstrap`, :func:`_allocation`). A
hand-edited or truncated file is an :class:`~heteroplan.errors.InputError` naming the file, the
field and the value.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from heteroplan.atomic_json import write_json_atomic
from heteroplan.cluster import Cluster
from heteroplan.errors import InputError
from heteroplan.inputs import read_json
from heteroplan.perf.throughput import ThroughputParams
from heteroplan.policies.base import Allocation, PerfModel, Policy
from heteroplan.policies.state import NoState, PolicyState, policy_state
from heteroplan.scheduling.arguments import MAX_COUNT, MAX_GPUS
from heteroplan.scheduling.session_job import ModelKind, SessionJob, new_job
from heteroplan.schema import (
    Flag,
    Later,
    Nullable,
    Number,
    Pair,
    Record,
    Seq,
    Spec,
    Table,
    Text,
    Versioned,
    check,
    decode,
    naming_file,
)

__all__ = ["SESSION_FORMAT", "READABLE_FORMATS", "JOB_FIELDS", "SESSION_FILE", "JOB", "ALLOCATION", "MODELS",
           "BOOTSTRAP_STATE", "POLICY_STATE", "PolicyStateLostWarning", "SavedSession", "save_session", "load_session"]

SESSION_FORMAT = 2  # version of the saved-session file: 2 adds the policy's state

_UNBOUNDED = sys.maxsize
"""The bound of what the session itself does not bound (job ids and reasons of any length, any
number of jobs and measured steps): a file holds what its session held (its size bounds it), so
every file ``save`` writes loads back."""


class PolicyStateLostWarning(UserWarning):
    """A session saved without its policy's state (format 1) was loaded under a policy that keeps
    state between rounds: the policy starts afresh, so its next decisions may differ."""


@dataclass(frozen=True)
class _Float(Number):
    """A :class:`Number` read as a ``float`` (the session keeps its times and amounts as floats)."""

    def decode(self, value: object, path: str) -> float:
        return float(super().decode(value, path))


_SECONDS = _Float(low=0, unit="s")
_AMOUNT = _Float(low=0)  # work units, GPU-seconds
_NOISE = Nullable(_Float(above=0, unit="samples"))  # a noise scale (phi), or null: not measured
_COUNT = Number(low=0, high=MAX_COUNT, integer=True)
_GPUS = Number(low=1, high=MAX_GPUS, integer=True, unit="GPUs")
_FREE_TEXT = Text(max_len=_UNBOUNDED, printable=False)  # names and reasons as the session and its cluster take them

# every job field of the file besides "model_kind", "model" and "allocation", as _Job names it
JOB_FIELDS: Mapping[str, Spec] = {
    "job_id": _FREE_TEXT, "application": _FREE_TEXT,
    "arrival_time": _SECONDS, "total_work": _AMOUNT, "own_restart_delay": _SECONDS,
    "requested_gpus": _GPUS, "max_gpus": _GPUS, "elastic": Flag(), "rigid": Flag(),
    "given_batch": _COUNT, "work_done": _AMOUNT, "steps_done": _COUNT,
    "restore_left": _SECONDS, "restored": _SECONDS, "restarts": _COUNT,
    "starts": _COUNT, "gpu_seconds": _AMOUNT,
    "start_time": Nullable(_SECONDS), "finish_time": Nullable(_SECONDS),
    "last_gpus": _COUNT, "max_gpus_run": _COUNT, "batch_size": _COUNT,
    "active_rounds": _COUNT, "active_sum": _COUNT, "observations": _COUNT,
    "phi": _NOISE, "reported": Flag(), "warned": Flag(),
    "failures": _COUNT, "steps_redone": _COUNT, "gave_up": Nullable(_FREE_TEXT),
}
"""The saved fields of a job (names as in the file and on the session's job) and their specs."""

_JOB_DEFAULTS: Mapping[str, Any] = {"rigid": False, "failures": 0, "steps_redone": 0, "gave_up": None}
"""Job fields older files lack, and what they were then."""

_MISSING = "missing (a truncated or hand-edited file?)"

ALLOCATION = Record(required={
    "gpu_type": _FREE_TEXT,  # one type, or a gang's types joined (Allocation.spanning)
    "num_gpus": _GPUS,
    "placement": Seq(Pair((_FREE_TEXT, _GPUS)), min_len=1, max_len=MAX_GPUS),  # [[node, GPUs], ...]
}, missing=_MISSING)
"""A job's GPUs: ``{"gpu_type", "num_gpus", "placement": [[node, GPUs >= 1], ...]}``."""

_OBS_COLUMNS = ("num_nodes", "num_gpus", "local_bsz", "step_time", "sync_time")

BOOTSTRAP_STATE = Record(required={
    "observations": Table(key=_FREE_TEXT, value=Record(  # GPU type -> columns of measured steps
        required={c: Seq(_Float(low=0), max_len=_UNBOUNDED) for c in _OBS_COLUMNS}, missing=_MISSING)),
    "fits": Table(key=_FREE_TEXT, value=Record(  # GPU type -> ThroughputParams
        required={f.name: _Float() for f in fields(ThroughputParams)}, missing=_MISSING)),
    "stale": Seq(_FREE_TEXT),
    "measured_phi": _NOISE,
}, missing=_MISSING)
"""A bootstrapped model's state (:meth:`~heteroplan.perf.bootstrap.BootstrappedModel.state`):
measured steps per GPU type (columns of one length), fitted parameters per type, the types
awaiting a refit, the measured noise scale (samples)."""

MODELS: Mapping[ModelKind, Spec | None] = {
    ModelKind.NONE: None,
    ModelKind.OBJECT: None,  # code, given again at load
    ModelKind.TABLE: Table(_Float(low=0, unit="work units/s"), key=_FREE_TEXT, min_len=1),  # a ThroughputTable's rates
    ModelKind.BOOTSTRAP: BOOTSTRAP_STATE,
    ModelKind.ORACLE: Record(required={"measured_phi": _NOISE}, missing=_MISSING),
}
"""The ``model`` a job of each ``model_kind`` saves (``None``: none)."""

JOB = Record(
    required={**{k: v for k, v in JOB_FIELDS.items() if k not in _JOB_DEFAULTS},
              "model_kind": Text(choices=tuple(k.value for k in ModelKind))},
    optional={**{k: JOB_FIELDS[k] for k in _JOB_DEFAULTS}, "model": Later(), "allocation": Nullable(ALLOCATION)},
    missing=_MISSING)
"""One job entry (its ``model`` is decoded next, by :data:`MODELS` of its ``model_kind``)."""

POLICY_STATE = Record(required={"type": Text(), "data": Later()}, missing=_MISSING)
"""The policy's state: its class name and its JSON (parsed by that :class:`PolicyState` class)."""

_SESSION: Mapping[str, Spec] = {"free_moves": Flag(), "restart_delay_s": Nullable(_SECONDS),
                                "assume_progress": Flag(), "last_round": Nullable(_SECONDS), "rounds": _COUNT,
                                "jobs": Seq(JOB, max_len=_UNBOUNDED)}
_NAMES: Mapping[str, Spec] = {"cluster": _FREE_TEXT, "policy": _FREE_TEXT}  # what it ran on, for messages

SESSION_FILE = Versioned({
    1: Record(required=_SESSION, optional={**_NAMES, "policy_state": Nullable(POLICY_STATE)}, missing=_MISSING),
    2: Record(required={**_SESSION, "policy_state": POLICY_STATE}, optional=_NAMES, missing=_MISSING),
}, key="format")
"""A saved session, formats 1 and 2 (2 adds ``policy_state``)."""
READABLE_FORMATS = tuple(sorted(SESSION_FILE.versions))


@dataclass(frozen=True)
class SavedSession:
    """What a saved-session file holds: a session's settings, its jobs and its policy's state.

    :meth:`SchedulingSession.save <heteroplan.scheduling.session.SchedulingSession.save>` gives one
    to :func:`save_session`; :func:`load_session` returns one, from which
    :meth:`SchedulingSession.load <heteroplan.scheduling.session.SchedulingSession.load>` builds
    the session.

    Attributes:
        cluster, policy: the names of the session's cluster and policy (the file says which it ran;
            both are given again at load; ``None`` where a file does not say).
        free_moves, restart_delay_s, assume_progress: the session's options (see
            :class:`~heteroplan.scheduling.session.SchedulingSession`).
        last_round: the time of its last round (s; ``None``: no round yet).
        rounds: rounds run.
        jobs: every job, in submission order.
        policy_state: the policy's state between rounds (``None`` from a format-1 file, saved without it).
    """

    cluster: str | None
    policy: str | None
    free_moves: bool
    restart_delay_s: float | None
    assume_progress: bool
    last_round: float | None
    rounds: int
    jobs: tuple[SessionJob, ...]
    policy_state: PolicyState | None


def save_session(saved: SavedSession, path: str | Path) -> Path:
    """Write ``saved`` to ``path`` (JSON, atomically): each job's bookkeeping and the state of its
    model (a bootstrapped model's observations and fits, a table's rates, an oracle's measured
    noise scale), and the policy's own state between rounds (its :class:`PolicyState`). A job
    with a model object of another kind is saved without it (``model_kind`` ``"object"``; give it
    again to :func:`load_session`)."""
    state = saved.policy_state if saved.policy_state is not None else NoState()
    data = {"format": SESSION_FORMAT, "cluster": saved.cluster, "policy": saved.policy,
            "free_moves": saved.free_moves, "restart_delay_s": saved.restart_delay_s,
            "assume_progress": saved.assume_progress, "last_round": saved.last_round,
            "rounds": saved.rounds, "jobs": [_job_to_json(j) for j in saved.jobs],
            "policy_state": {"type": type(state).__name__, "data": state.to_json()}}
    path = Path(path)
    write_json_atomic(path, data)
    return path


def _job_to_json(j: SessionJob) -> dict[str, Any]:
    out: dict[str, Any] = {name: getattr(j, name) for name in JOB_FIELDS}
    out["allocation"] = _alloc_to_json(j.allocation)
    out["model_kind"] = j.model_kind.value
    if j.model_kind is ModelKind.TABLE:
        out["model"] = dict(j.estimator.rates)  # type: ignore[union-attr]
    elif j.model_kind is ModelKind.BOOTSTRAP:
        out["model"] = j.estimator.state()  # type: ignore[union-attr]
    elif j.model_kind is ModelKind.ORACLE:  # only the measured noise scale changes
        out["model"] = {"measured_phi": j.estimator.measured_phi}  # type: ignore[union-attr]
    return out


def load_session(path: str | Path, cluster: Cluster, policy: Policy,
                 perf_models: Mapping[str, PerfModel] | None = None) -> SavedSession:
    """The session saved at ``path``, its jobs checked on ``cluster`` and ``policy`` (a fresh policy
    built with the saved one's options: the saved policy state is parsed as its kind of state).
    ``perf_models``: job id -> the performance model object of each job saved with one
    (``model_kind`` ``"object"``: any other model object, which is code and is given again, as the
    policy is)."""
    with naming_file(path):
        data = read_json(path)
        check(not isinstance(data, Mapping) or "format" in data, "session.format", None, _MISSING)
        doc = decode(SESSION_FILE, data, "session")
        saved_state = _policy_state_of(path, doc, policy)
        jobs: dict[str, SessionJob] = {}
        for i, entry in enumerate(doc["jobs"]):  # a job saved twice is refused before its model is built
            check(entry["job_id"] not in jobs, f"session.jobs[{i}].job_id", entry["job_id"], "saved twice")
            jobs[entry["job_id"]] = _load_job(f"session.jobs[{i}]", entry, doc["last_round"], cluster, policy,
                                              perf_models or {})
    return SavedSession(doc.get("cluster"), doc.get("policy"), doc["free_moves"], doc["restart_delay_s"],
                        doc["assume_progress"], doc["last_round"], doc["rounds"], tuple(jobs.values()), saved_state)


def _load_job(where: str, entry: dict[str, Any], last_round: float | None, cluster: Cluster, policy: Policy,
              perf_models: Mapping[str, PerfModel]) -> SessionJob:
    """One decoded job entry as the session's job (its model decoded by its kind, then the fields
    checked against each other, then submitted as :meth:`SchedulingSession.submit` would)."""
    values = {name: entry.get(name, _JOB_DEFAULTS.get(name)) for name in JOB_FIELDS}
    kind = ModelKind(entry["model_kind"])
    job_id = values["job_id"]
    model_spec = MODELS[kind]
    if model_spec is None:
        check("model" not in entry, f"{where}.model", entry.get("model"), f"a {kind.value!r} job saves no model")
        model = None
    else:
        check("model" in entry, f"{where}.model", None, _MISSING)
        model = decode(model_spec, entry["model"], f"{where}.model")
    perf: PerfModel | str | None = kind.value if kind in (ModelKind.BOOTSTRAP, ModelKind.ORACLE) else None
    if kind is ModelKind.OBJECT:
        check(job_id in perf_models, f"{where}.model_kind", kind.value, f"job {job_id!r} was saved with a model "
              "object: give it again (load(..., perf_models={job_id: model}))")
        perf = perf_models[job_id]
    elif kind is ModelKind.TABLE:
        from heteroplan.perf.goodput import ThroughputTable

        try:
            perf = ThroughputTable(model)
        except InputError as exc:
            raise InputError(f"{where}.model.{exc.field}", exc.value, exc.reason) from None
    _check_job(where, values, entry.get("allocation"), last_round)
    allocation = _allocation(where, entry.get("allocation"), cluster)
    if kind is ModelKind.BOOTSTRAP:
        _check_bootstrap(f"{where}.model", model)
    try:
        job = new_job(job_id, values["arrival_time"], values["application"], perf, values["requested_gpus"],
                      values["max_gpus"], not values["rigid"], values["given_batch"], values["total_work"],
                      values["own_restart_delay"], elastic_policy=bool(policy.elastic))
    except InputError as exc:
        raise InputError(f"{where}.{exc.field}", exc.value, exc.reason) from None
    if kind is ModelKind.BOOTSTRAP:
        try:
            job.estimator.restore_state(model)  # type: ignore[union-attr]
        except InputError as exc:
            raise InputError(f"{where}.model.{exc.field}", exc.value, exc.reason) from None
    elif kind is ModelKind.ORACLE and model["measured_phi"] is not None:
        job.estimator.set_measured_phi(model["measured_phi"])  # type: ignore[union-attr]
    for name, value in values.items():
        setattr(job, name, value)
    job.allocation = allocation
    return job


def _check_job(where: str, v: Mapping[str, Any], allocation: object, last_round: float | None) -> None:
    """What no session could have written: times before the arrival, more restarts than starts, ..."""
    for key in ("start_time", "finish_time"):
        check(v[key] is None or v[key] >= v["arrival_time"], f"{where}.{key}", v[key],
              f"is before the job's arrival ({v['arrival_time']} s)")
    check(v["restarts"] <= v["starts"], f"{where}.restarts", v["restarts"], f"exceeds the job's starts ({v['starts']})")
    check(v["finish_time"] is None or allocation is None, f"{where}.allocation", allocation,
          "a finished job holds no GPUs")
    check(last_round is not None or allocation is None, f"{where}.allocation", allocation,
          "no round was run, so no job holds GPUs")


def _check_bootstrap(where: str, state: Mapping[str, Any]) -> None:
    """A decoded bootstrapped-model state whose parts agree: columns of one length, measured steps
    (nodes <= GPUs, batch > 0, 0 <= sync <= step time > 0), stale types observed, fits for every
    type with multi-GPU observations that does not await a refit."""
    observations, fits, stale = state["observations"], state["fits"], state["stale"]
    for gpu_type, rows in observations.items():
        at = f"{where}.observations[{gpu_type!r}]"
        check(len({len(rows[c]) for c in _OBS_COLUMNS}) == 1, at, {c: len(rows[c]) for c in _OBS_COLUMNS},
              f"must hold {list(_OBS_COLUMNS)}, lists of one length")
        for i, (nodes, gpus, bsz, step, sync) in enumerate(zip(*(rows[c] for c in _OBS_COLUMNS), strict=True)):
            check(1 <= nodes <= gpus and bsz > 0 and step > 0 and sync <= step, f"{at}[{i}]",
                  [nodes, gpus, bsz, step, sync], "is not a measured step (nodes <= GPUs, batch > 0, "
                  "0 <= sync <= step time > 0)")
    check(all(t in observations for t in stale), f"{where}.stale", stale, "must list GPU types that have observations")
    unfitted = [t for t, rows in observations.items() if t not in stale and t not in fits
                and any(g > 1 for g in rows["num_gpus"])]
    check(not unfitted, f"{where}.fits", sorted(fits),
          f"lacks the fit of {unfitted} (multi-GPU observations, not awaiting a refit)")


def _policy_state_of(path: str | Path, doc: Mapping[str, Any], policy: Policy) -> PolicyState | None:
    """The saved policy state, parsed as the given policy's state type (``None``: a format-1 file,
    nothing saved); :class:`InputError` when the file holds another policy's kind of state."""
    fresh = policy_state(policy)
    saved = doc.get("policy_state")
    if saved is None:  # format 1 (format 2's spec requires it)
        if not isinstance(fresh, NoState):
            warnings.warn(f"{path}: saved without its policy's state (format {doc['format']}); policy "
                          f"{policy.name!r} starts afresh, so its next decisions may differ from the original's",
                          PolicyStateLostWarning, stacklevel=4)
        return None
    if saved["type"] != type(fresh).__name__:
        raise InputError("policy", policy.name, f"keeps a {type(fresh).__name__}, but {path} holds a {saved['type']} "
                         f"(saved under policy {doc.get('policy')!r}); load it with a policy like that one")
    try:
        return type(fresh).parse(saved["data"])
    except InputError as exc:
        raise InputError(f"session.policy_state.{exc.field}", exc.value, exc.reason) from None
    except RecursionError:
        raise InputError("session.policy_state.data", "...", "nested too deeply") from None


def _alloc_to_json(alloc: Allocation | None) -> Any:
    if alloc is None:
        return None
    return {"gpu_type": alloc.gpu_type, "num_gpus": alloc.num_gpus, "placement": [list(p) for p in alloc.placement]}


def _allocation(where: str, data: Mapping[str, Any] | None, cluster: Cluster) -> Allocation | None:
    """The job's decoded allocation, checked on ``cluster``: its GPUs add up, each node once, on
    nodes of its type(s)."""
    if data is None:
        return None
    alloc = Allocation(data["gpu_type"], data["num_gpus"], tuple((n, c) for n, c in data["placement"]))
    at = f"{where}.allocation.placement"
    check(sum(c for _, c in alloc.placement) == alloc.num_gpus
          and len({n for n, _ in alloc.placement}) == len(alloc.placement),
          at, data["placement"], f"must hold {alloc.num_gpus} GPUs, each node once")
    types = cluster.node_types
    for node, _ in alloc.placement:
        check(types.get(node) in alloc.gpu_types, at, node, f"not a {alloc.gpu_type} node of cluster {cluster.name!r}")
    return alloc
