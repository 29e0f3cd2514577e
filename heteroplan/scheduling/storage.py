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
(Sia, FIFO, YARN-CS, Tiresias) do not. Any other format is refused, naming it. Every field is
decoded with its type and range checked: a hand-edited or truncated file is an
:class:`~heteroplan.errors.InputError` naming the file, the field and the value.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from heteroplan.atomic_json import write_json_atomic
from heteroplan.cluster import Cluster
from heteroplan.errors import InputError
from heteroplan.inputs import read_json
from heteroplan.policies.base import Allocation, PerfModel, Policy
from heteroplan.policies.state import NoState, PolicyState, policy_state, restore_policy_state
from heteroplan.scheduling.session import ModelKind

if TYPE_CHECKING:
    from heteroplan.scheduling.session import SchedulingSession, _Job

__all__ = ["SESSION_FORMAT", "READABLE_FORMATS", "JOB_FIELDS", "PolicyStateLostWarning", "save_session",
           "load_session"]

SESSION_FORMAT = 2  # version of the saved-session file: 2 adds the policy's state
READABLE_FORMATS = (1, 2)

_MAX_COUNT = 2**53  # integers a JSON reader keeps exactly
_MAX_FLOAT = 1.7976931348623157e308  # the largest finite float (a larger integer would overflow)


class PolicyStateLostWarning(UserWarning):
    """A session saved without its policy's state (format 1) was loaded under a policy that keeps
    state between rounds: the policy starts afresh, so its next decisions may differ."""


class _Fields:
    """Typed reads of one JSON object of a saved session; errors name the file and the field."""

    def __init__(self, path: str | Path, where: str, data: Any) -> None:
        self.path, self.where = str(path), where
        if not isinstance(data, dict):
            raise self.error("", data, "must be a JSON object")
        self.data = data

    def error(self, key: str, value: object, reason: str) -> InputError:
        field = f"{self.where}.{key}" if key else self.where
        return InputError(f"{self.path}: {field}", value, reason)

    def get(self, key: str, default: Any = ...) -> Any:
        if key not in self.data:
            if default is ...:
                raise self.error(key, None, "is missing (a truncated or hand-edited file?)")
            return default
        return self.data[key]

    def seconds(self, key: str, optional: bool = False, default: Any = ...) -> float | None:
        value = self.get(key, default)
        if value is None and optional:
            return None
        if not isinstance(value, bool) and isinstance(value, int | float) and 0 <= value <= _MAX_FLOAT:
            return float(value)
        raise self.error(key, value, "must be a finite number >= 0" + (" or null" if optional else ""))

    def count(self, key: str, low: int = 0, default: Any = ...) -> int:
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= _MAX_COUNT:
            raise self.error(key, value, f"must be an integer in [{low}, 2**53]")
        return value

    def flag(self, key: str, default: Any = ...) -> bool:
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise self.error(key, value, "must be true or false")
        return value

    def note(self, key: str) -> str | None:
        """An optional non-empty string (``null`` or absent: ``None``)."""
        value = self.get(key, None)
        if value is not None and (not isinstance(value, str) or not value):
            raise self.error(key, value, "must be a non-empty string or null")
        return value

    def text(self, key: str) -> str:
        value = self.get(key)
        if not isinstance(value, str) or not value:
            raise self.error(key, value, "must be a non-empty string")
        return value


# name -> how to read it; every job field of the file (besides "model_kind", "model", "allocation").
JOB_FIELDS: dict[str, Callable[[_Fields, str], Any]] = {
    "job_id": _Fields.text, "application": _Fields.text,
    "arrival_time": _Fields.seconds, "total_work": _Fields.seconds, "own_restart_delay": _Fields.seconds,
    "requested_gpus": lambda f, k: f.count(k, 1), "max_gpus": lambda f, k: f.count(k, 1),
    "elastic": _Fields.flag, "rigid": lambda f, k: f.flag(k, False),  # rigid: optional (files before it: False)
    "given_batch": _Fields.count, "work_done": _Fields.seconds, "steps_done": _Fields.count,
    "restore_left": _Fields.seconds, "restored": _Fields.seconds, "restarts": _Fields.count,
    "starts": _Fields.count, "gpu_seconds": _Fields.seconds,
    "start_time": lambda f, k: f.seconds(k, optional=True), "finish_time": lambda f, k: f.seconds(k, optional=True),
    "last_gpus": _Fields.count, "max_gpus_run": _Fields.count, "batch_size": _Fields.count,
    "active_rounds": _Fields.count, "active_sum": _Fields.count, "observations": _Fields.count,
    "phi": lambda f, k: f.seconds(k, optional=True), "reported": _Fields.flag, "warned": _Fields.flag,
    # faults (optional: files before them had none)
    "failures": lambda f, k: f.count(k, 0, 0), "steps_redone": lambda f, k: f.count(k, 0, 0), "gave_up": _Fields.note,
}
"""The saved fields of a job (names as in the file) and their readers (type and range checks)."""


def save_session(session: SchedulingSession, path: str | Path) -> Path:
    """Write ``session`` to ``path`` (JSON, atomically): each job's bookkeeping and the state of its
    model (a bootstrapped model's observations and fits, a table's rates, an oracle's measured
    noise scale), and the policy's own state between rounds (its :class:`PolicyState`). A job
    with a model object of another kind is saved without it (``model_kind`` ``"object"``; give it
    again to :func:`load_session`)."""
    jobs = [_job_to_json(j) for j in session._jobs.values()]
    state = policy_state(session.policy)
    data = {"format": SESSION_FORMAT, "cluster": session.cluster.name, "policy": session.policy.name,
            "free_moves": session.free_moves, "restart_delay_s": session.restart_delay_s,
            "assume_progress": session.assume_progress, "last_round": session._last_round,
            "rounds": session.rounds, "jobs": jobs,
            "policy_state": {"type": type(state).__name__, "data": state.to_json()}}
    path = Path(path)
    write_json_atomic(path, data)
    return path


def _job_to_json(j: _Job) -> dict[str, Any]:
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
                 perf_models: Mapping[str, PerfModel] | None = None) -> SchedulingSession:
    """The session saved at ``path``, on ``cluster`` under ``policy`` (a fresh policy built with the
    saved one's options: it takes the saved policy state back). ``perf_models``: job id -> the
    performance model object of each job saved with one (``model_kind`` ``"object"``: any other
    model object, which is code and is given again, as the policy is)."""
    from heteroplan.scheduling.session import SchedulingSession

    top = _Fields(path, "session", read_json(path))
    version = top.get("format")
    if isinstance(version, bool) or version not in READABLE_FORMATS:
        raise top.error("format", version, f"not a saved-session format this version reads ({list(READABLE_FORMATS)})")
    saved_state = _policy_state_of(top, policy)
    restart = top.seconds("restart_delay_s", optional=True)
    session = SchedulingSession(cluster, policy, free_moves=top.flag("free_moves"), restart_delay_s=restart,
                                assume_progress=top.flag("assume_progress"))
    last_round = top.seconds("last_round", optional=True)
    rounds = top.count("rounds")
    jobs = top.get("jobs")
    if not isinstance(jobs, list):
        raise top.error("jobs", type(jobs).__name__, "must be a list of jobs")
    for i, entry in enumerate(jobs):
        _load_job(session, _Fields(path, f"jobs[{i}]", entry), last_round, perf_models or {})
    session._last_round = last_round
    session.rounds = rounds
    if saved_state is not None:
        restore_policy_state(session.policy, saved_state)
    return session


def _load_job(session: SchedulingSession, f: _Fields, last_round: float | None,
              perf_models: Mapping[str, PerfModel]) -> None:
    """Decode one job entry into ``session`` (checked field by field, then against each other)."""
    values = {name: read(f, name) for name, read in JOB_FIELDS.items()}
    kind_text = f.get("model_kind")
    try:
        kind = ModelKind(kind_text)
    except ValueError:
        raise f.error("model_kind", kind_text, f"choose one of {[k.value for k in ModelKind]}") from None
    job_id = values["job_id"]
    if kind is ModelKind.OBJECT:
        if job_id not in perf_models:
            raise f.error("model_kind", kind_text, f"job {job_id!r} was saved with a model object: give it again "
                          "(load(..., perf_models={job_id: model}))")
        perf: PerfModel | str | None = perf_models[job_id]
    else:
        perf = _model_of(f, kind)
    if job_id in session._jobs:
        raise f.error("job_id", job_id, "saved twice")
    try:
        session.submit(job_id, arrival_time=values["arrival_time"], application=values["application"],
                       perf_model=perf, requested_gpus=values["requested_gpus"], max_gpus=values["max_gpus"],
                       elastic=not values["rigid"], batch_size=values["given_batch"],
                       total_work=values["total_work"], restart_delay_s=values["own_restart_delay"])
    except InputError as exc:
        raise f.error(exc.field, exc.value, exc.reason) from None
    job = session._jobs[job_id]
    if kind is ModelKind.BOOTSTRAP:
        _restore_bootstrap(f, job.estimator)
    elif kind is ModelKind.ORACLE:
        phi = _Fields(f.path, f"{f.where}.model", f.get("model")).seconds("measured_phi", optional=True)
        if phi is not None:
            if phi <= 0:
                raise f.error("model.measured_phi", phi, "must be a noise scale > 0 samples or null")
            job.estimator.set_measured_phi(phi)  # type: ignore[union-attr]
    _check_job(f, values, last_round)
    for name, value in values.items():
        setattr(job, name, value)
    job.allocation = _alloc_from_json(f, session.cluster)


def _check_job(f: _Fields, v: dict[str, Any], last_round: float | None) -> None:
    """What no session could have written: times before the arrival, more restarts than starts, ..."""
    for key in ("start_time", "finish_time"):
        if v[key] is not None and v[key] < v["arrival_time"]:
            raise f.error(key, v[key], f"is before the job's arrival ({v['arrival_time']} s)")
    if v["phi"] is not None and v["phi"] <= 0:
        raise f.error("phi", v["phi"], "must be a noise scale > 0 samples or null")
    if v["restarts"] > v["starts"]:
        raise f.error("restarts", v["restarts"], f"exceeds the job's starts ({v['starts']})")
    if v["finish_time"] is not None and f.get("allocation", None) is not None:
        raise f.error("allocation", f.get("allocation"), "a finished job holds no GPUs")
    if last_round is None and f.get("allocation", None) is not None:
        raise f.error("allocation", f.get("allocation"), "no round was run, so no job holds GPUs")


def _model_of(f: _Fields, kind: ModelKind) -> PerfModel | str | None:
    if kind is ModelKind.NONE:
        return None
    if kind is not ModelKind.TABLE:
        return kind.value
    from heteroplan.perf.goodput import ThroughputTable

    rates = f.get("model")
    if not isinstance(rates, dict) or not rates:
        raise f.error("model", rates, "must be a table's rates: {GPU type: work units/s >= 0}")
    for gpu_type, rate in rates.items():
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate < math.inf:
            raise f.error(f"model[{gpu_type}]", rate, "must be a finite rate >= 0 (work units/s)")
    try:
        return ThroughputTable(rates)
    except InputError as exc:
        raise f.error(f"model.{exc.field}", exc.value, exc.reason) from None


_OBS_COLUMNS = ("num_nodes", "num_gpus", "local_bsz", "step_time", "sync_time")


def _restore_bootstrap(f: _Fields, model: Any) -> None:
    """Check a bootstrapped model's saved state (observations, fits, stale types, noise scale) and
    hand it to the model."""
    from heteroplan.perf.throughput import ThroughputParams

    m = _Fields(f.path, f"{f.where}.model", f.get("model"))
    observations, fits, stale = m.get("observations"), m.get("fits"), m.get("stale")
    if not isinstance(observations, dict):
        raise m.error("observations", type(observations).__name__, "must map GPU type -> measured steps")
    for gpu_type, rows in observations.items():
        o = _Fields(f.path, f"{m.where}.observations[{gpu_type}]", rows)
        lengths = set()
        for col in _OBS_COLUMNS:
            values = o.get(col)
            if not isinstance(values, list) or not all(
                    not isinstance(x, bool) and isinstance(x, int | float) and 0 <= x < math.inf for x in values):
                raise o.error(col, values, "must be a list of finite numbers >= 0")
            lengths.add(len(values))
        if len(lengths) != 1 or set(o.data) != set(_OBS_COLUMNS):
            raise o.error("", sorted(o.data), f"must hold {list(_OBS_COLUMNS)}, lists of one length")
        for nodes, gpus, bsz, step, sync in zip(*(o.data[c] for c in _OBS_COLUMNS), strict=True):
            if not (1 <= nodes <= gpus and bsz > 0 and step > 0 and sync <= step):
                raise o.error("", [nodes, gpus, bsz, step, sync], "is not a measured step (nodes <= GPUs, "
                              "batch > 0, 0 <= sync <= step time > 0)")
    if not isinstance(fits, dict):
        raise m.error("fits", type(fits).__name__, "must map GPU type -> fitted parameters")
    for gpu_type, params in fits.items():
        p = _Fields(f.path, f"{m.where}.fits[{gpu_type}]", params)
        names = tuple(ThroughputParams.__dataclass_fields__)
        if set(p.data) != set(names):
            raise p.error("", sorted(p.data), f"must hold {list(names)}")
        for name in names:
            value = p.get(name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise p.error(name, value, "must be a finite number")
    if not isinstance(stale, list) or not all(isinstance(t, str) and t in observations for t in stale):
        raise m.error("stale", stale, "must list GPU types that have observations")
    unfitted = [t for t, rows in observations.items() if t not in stale and t not in fits
                and any(g > 1 for g in rows["num_gpus"])]
    if unfitted:
        raise m.error("fits", sorted(fits), f"lacks the fit of {unfitted} (multi-GPU observations, not awaiting a refit)")
    phi = m.seconds("measured_phi", optional=True)
    if phi is not None and phi <= 0:
        raise m.error("measured_phi", phi, "must be a noise scale > 0 samples or null")
    try:
        model.restore_state(m.data)
    except InputError as exc:
        raise m.error(exc.field, exc.value, exc.reason) from None


def _policy_state_of(top: _Fields, policy: Policy) -> PolicyState | None:
    """The saved policy state, parsed as the given policy's state type (``None``: a format-1 file,
    nothing saved); :class:`InputError` when the file holds another policy's kind of state."""
    fresh = policy_state(policy)
    saved = top.get("policy_state", None)
    if saved is None:
        if top.get("format") >= 2:
            raise top.error("policy_state", None, f"is missing (format {top.get('format')} saves it)")
        if not isinstance(fresh, NoState):
            warnings.warn(f"{top.path}: saved without its policy's state (format {top.get('format')}); policy "
                          f"{policy.name!r} starts afresh, so its next decisions may differ from the original's",
                          PolicyStateLostWarning, stacklevel=4)
        return None
    if not isinstance(saved, dict) or saved.get("type") != type(fresh).__name__:
        kind = saved.get("type") if isinstance(saved, dict) else type(saved).__name__
        raise InputError("policy", policy.name, f"keeps a {type(fresh).__name__}, but {top.path} holds a {kind} "
                         f"(saved under policy {top.get('policy', None)!r}); load it with a policy like that one")
    try:
        return type(fresh).parse(saved.get("data"))
    except InputError as exc:
        raise top.error(f"policy_state.{exc.field}", exc.value, exc.reason) from None
    except RecursionError:
        raise top.error("policy_state.data", "...", "nested too deeply") from None


def _alloc_to_json(alloc: Allocation | None) -> Any:
    if alloc is None:
        return None
    return {"gpu_type": alloc.gpu_type, "num_gpus": alloc.num_gpus, "placement": [list(p) for p in alloc.placement]}


def _alloc_from_json(f: _Fields, cluster: Cluster) -> Allocation | None:
    """The job's saved allocation, on nodes of ``cluster`` of its type(s)."""
    data = f.get("allocation", None)
    if data is None:
        return None
    a = _Fields(f.path, f"{f.where}.allocation", data)
    gpu_type, num = a.text("gpu_type"), a.count("num_gpus", 1)
    placement = a.get("placement")
    if not isinstance(placement, list) or not all(
            isinstance(p, list) and len(p) == 2 and isinstance(p[0], str)
            and not isinstance(p[1], bool) and isinstance(p[1], int) and p[1] >= 1 for p in placement):
        raise a.error("placement", placement, "must be a list of [node, GPUs >= 1] pairs")
    alloc = Allocation(gpu_type, num, tuple((str(n), int(c)) for n, c in placement))
    types = cluster.node_types
    if sum(c for _, c in alloc.placement) != num or len({n for n, _ in alloc.placement}) != len(alloc.placement):
        raise a.error("placement", placement, f"must hold {num} GPUs, each node once")
    for node, _ in alloc.placement:
        if types.get(node) not in alloc.gpu_types:
            raise a.error("placement", node, f"not a {gpu_type} node of cluster {cluster.name!r}")
    return alloc
