"""Saving a scheduling session to JSON and taking it back (no pickle: plain data only).

Format 2 (current) holds the jobs, the session's clock and options, and the policy's own state
between rounds (:mod:`heteroplan.policies.state`: Gavel's time fractions and priorities,
``pollux-sia``'s virtual nodes, merged profiles and random generator, Hadar's commitments and
rates), written as ``{"type": <state class>, "data": <its JSON>}``. Format 1 (before the policy
state was kept) still loads: its policy starts from a fresh state, so the next decisions of a
stateful policy may differ from the original's (a :class:`PolicyStateLostWarning` says so);
those of a stateless policy (Sia, FIFO, YARN-CS, Tiresias) do not.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from heteroplan.atomic_json import write_json_atomic
from heteroplan.cluster import Cluster
from heteroplan.errors import InputError
from heteroplan.policies.base import Allocation, PerfModel, Policy
from heteroplan.policies.state import NoState, PolicyState, policy_state, restore_policy_state
from heteroplan.scheduling.session import ModelKind

if TYPE_CHECKING:
    from heteroplan.scheduling.session import SchedulingSession

__all__ = ["SESSION_FORMAT", "PolicyStateLostWarning", "save_session", "load_session"]

SESSION_FORMAT = 2  # version of the saved-session file: 2 adds the policy's state
READABLE_FORMATS = (1, 2)


class PolicyStateLostWarning(UserWarning):
    """A session saved without its policy's state (format 1) was loaded under a policy that keeps
    state between rounds: the policy starts afresh, so its next decisions may differ."""


def save_session(session: SchedulingSession, path: str | Path) -> Path:
    """Write ``session`` to ``path`` (JSON, atomically): each job's bookkeeping and the state of its
    model (a bootstrapped model's observations and fits, a table's rates, an oracle's measured
    noise scale), and the policy's own state between rounds (its :class:`PolicyState`). A job
    with a model object of another kind cannot be saved (:class:`InputError`)."""
    jobs = []
    for j in session._jobs.values():
        if j.model_kind is ModelKind.OBJECT:
            raise InputError(f"job[{j.job_id}].perf_model", type(j.estimator).__name__,
                             "cannot be saved; submit a ThroughputTable, 'bootstrap', 'oracle' or None")
        state: dict[str, Any] = {k: v for k, v in vars(j).items() if k not in ("estimator", "allocation")}
        state["allocation"] = _alloc_to_json(j.allocation)
        state["model_kind"] = j.model_kind.value
        if j.model_kind is ModelKind.TABLE:
            state["model"] = dict(j.estimator.rates)  # type: ignore[union-attr]
        elif j.model_kind is ModelKind.BOOTSTRAP:
            state["model"] = j.estimator.state()  # type: ignore[union-attr]
        elif j.model_kind is ModelKind.ORACLE:  # only the measured noise scale changes
            state["model"] = {"measured_phi": j.estimator.measured_phi}  # type: ignore[union-attr]
        jobs.append(state)
    state = policy_state(session.policy)
    data = {"format": SESSION_FORMAT, "cluster": session.cluster.name, "policy": session.policy.name,
            "free_moves": session.free_moves, "restart_delay_s": session.restart_delay_s,
            "assume_progress": session.assume_progress, "last_round": session._last_round,
            "rounds": session.rounds, "jobs": jobs,
            "policy_state": {"type": type(state).__name__, "data": state.to_json()}}
    path = Path(path)
    write_json_atomic(path, data)
    return path


def load_session(path: str | Path, cluster: Cluster, policy: Policy) -> SchedulingSession:
    """The session saved at ``path``, on ``cluster`` under ``policy`` (a fresh policy built with the
    saved one's options: it takes the saved policy state back)."""
    from heteroplan.scheduling.session import SchedulingSession

    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise InputError("path", str(path), f"cannot read a saved session: {exc}") from None
    if not isinstance(data, dict) or data.get("format") not in READABLE_FORMATS:
        raise InputError("path", str(path), f"not a saved session (formats {list(READABLE_FORMATS)})")
    saved_state = _policy_state_of(data, policy, path)
    session = SchedulingSession(cluster, policy, free_moves=data["free_moves"],
                                restart_delay_s=data["restart_delay_s"], assume_progress=data["assume_progress"])
    for state in data["jobs"]:
        kind = ModelKind(state["model_kind"])
        model = state.pop("model", None)
        perf: PerfModel | str | None = None if kind is ModelKind.NONE else kind.value
        if kind is ModelKind.TABLE:
            from heteroplan.perf.goodput import ThroughputTable

            perf = ThroughputTable(model)
        session.submit(state["job_id"], arrival_time=state["arrival_time"], application=state["application"],
                       perf_model=perf, requested_gpus=state["requested_gpus"], max_gpus=state["max_gpus"],
                       batch_size=state["given_batch"], total_work=state["total_work"],
                       restart_delay_s=state["own_restart_delay"])
        job = session._jobs[state["job_id"]]
        if kind is ModelKind.BOOTSTRAP:
            job.estimator.restore_state(model)  # type: ignore[union-attr]
        elif kind is ModelKind.ORACLE and model["measured_phi"] is not None:
            job.estimator.set_measured_phi(model["measured_phi"])  # type: ignore[union-attr]
        for key, value in state.items():
            if key not in ("estimator", "model_kind", "job_id"):
                setattr(job, key, _alloc_from_json(value) if key == "allocation" else value)
    session._last_round = data["last_round"]
    session.rounds = data["rounds"]
    if saved_state is not None:
        restore_policy_state(session.policy, saved_state)
    return session


def _policy_state_of(data: dict[str, Any], policy: Policy, path: str | Path) -> PolicyState | None:
    """The saved policy state, parsed as the given policy's state type (``None``: a format-1 file,
    nothing saved); :class:`InputError` when the file holds another policy's kind of state."""
    fresh = policy_state(policy)
    saved = data.get("policy_state")
    if saved is None:
        if not isinstance(fresh, NoState):
            warnings.warn(f"{path}: saved without its policy's state (format {data['format']}); policy "
                          f"{policy.name!r} starts afresh, so its next decisions may differ from the original's",
                          PolicyStateLostWarning, stacklevel=4)
        return None
    if not isinstance(saved, dict) or saved.get("type") != type(fresh).__name__:
        kind = saved.get("type") if isinstance(saved, dict) else type(saved).__name__
        raise InputError("policy", policy.name, f"keeps a {type(fresh).__name__}, but {path} holds a {kind} "
                         f"(saved under policy {data.get('policy')!r}); load it with a policy like that one")
    return type(fresh).parse(saved.get("data"))


def _alloc_to_json(alloc: Allocation | None) -> Any:
    if alloc is None:
        return None
    return {"gpu_type": alloc.gpu_type, "num_gpus": alloc.num_gpus, "placement": [list(p) for p in alloc.placement]}


def _alloc_from_json(data: Any) -> Allocation | None:
    if data is None:
        return None
    return Allocation(data["gpu_type"], int(data["num_gpus"]), tuple((str(n), int(c)) for n, c in data["placement"]))
