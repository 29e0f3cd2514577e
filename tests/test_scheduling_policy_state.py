"""A saved scheduling session carries its policy's own state between rounds (issue 30).

Oracles: the original session's next decisions, against those of the saved session restored
in a new Python process; the same file with the policy state removed (a format-1 file), whose
next decisions differ for the stateful policies (so the state is what makes them equal); and
exact JSON round trips of each policy's typed state.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

from heteroplan.cluster import preset
from heteroplan.errors import InputError
from heteroplan.policies.gavel import GavelState
from heteroplan.policies.hadar import HadarState
from heteroplan.policies.pollux import PolluxState
from heteroplan.policies.registry import make_policy
from heteroplan.policies.state import NO_STATE, GeneratorState, policy_state, restore_policy_state
from heteroplan.scheduling import SESSION_FORMAT, PolicyStateLostWarning, SchedulingSession
from heteroplan.sim import SimFidelity, SimulatedTraining
from heteroplan.sim.job_models import build_jobs
from heteroplan.workload.sia import bundled_workload

ROOT = Path(__file__).resolve().parent.parent
JOBS = 8  # the first jobs of philly/workload-1 (arrivals 107 s .. 1332 s)
# policy -> seconds driven before saving (several arrivals, re-solves, restarts)
DRIVEN = {"gavel-sia": 1440.0, "gavel": 1440.0, "gavel-agnostic": 1440.0, "pollux-sia": 840.0, "pollux": 840.0,
          "hadar": 1440.0, "hadar-committed": 1440.0, "hadare": 1440.0, "sia": 840.0,
          "fifo": 840.0, "tiresias": 840.0}  # 840 s: the first round after an arrival at 839 s
# a fresh policy state changes the next round here (gavel-agnostic, pollux, hadar and hadare keep
# state too, but it does not change this round: hadar re-plans every round from the prices)
STATEFUL = ("gavel-sia", "gavel", "pollux-sia", "hadar-committed")


def _decisions(round_decisions) -> list[list]:
    return [[d.job_id, d.kind.value, repr(d.allocation), d.restore_s] for d in round_decisions]


def _drive(name: str, until: float) -> tuple[SchedulingSession, float]:
    """A session under policy ``name`` driven with the simulator's progress model (as
    ``examples/own_loop.py`` does) through the rounds before ``until`` s, arrivals up to then submitted."""
    cluster, policy, fidelity = preset("sia-64"), make_policy(name), SimFidelity()
    jobs = {j.name: j for j in build_jobs(bundled_workload("philly/workload-1")[:JOBS], cluster, policy.elastic,
                                          None, fidelity)}
    training = SimulatedTraining(cluster, policy.forking, fidelity.epoch_rates)
    session = SchedulingSession(cluster, policy, free_moves=fidelity.free_moves)
    waiting = sorted(jobs.values(), key=lambda j: j.arrival_time)
    clock = 0.0
    while True:
        while waiting and waiting[0].arrival_time <= clock:
            j = waiting.pop(0)  # a rigid job's oracle model is saved by name; an elastic one's bootstrap by state
            session.submit(j.name, arrival_time=j.arrival_time, application=j.application,
                           perf_model=j.estimator if policy.elastic else "oracle", requested_gpus=j.requested_gpus,
                           max_gpus=j.max_gpus, elastic=j.elastic, batch_size=j.given_batch,
                           total_work=j.total_work, restart_delay_s=j.restart_delay)
        if clock >= until:
            return session, clock
        for d in session.round(clock):
            if d.allocation is not None:
                used = training.run(jobs[d.job_id], d, policy.round_length, session.report)
                if used is not None:
                    session.finish(d.job_id, clock + used)
        clock += policy.round_length


@pytest.fixture(scope="module", params=sorted(DRIVEN))
def saved(request, tmp_path_factory) -> tuple[str, Path, float, list[list]]:
    """(policy, saved session file, time of the next round, the original session's next decisions)."""
    name = request.param
    session, clock = _drive(name, DRIVEN[name])
    path = session.save(tmp_path_factory.mktemp(name) / "session.json")
    return name, path, clock, _decisions(session.round(clock))


_RESTORE = textwrap.dedent("""
    import json, sys
    from heteroplan.cluster import preset
    from heteroplan.policies.registry import make_policy
    from heteroplan.scheduling import SchedulingSession
    path, policy, now = sys.argv[1:]
    s = SchedulingSession.load(path, preset("sia-64"), make_policy(policy))
    print(json.dumps([[d.job_id, d.kind.value, repr(d.allocation), d.restore_s] for d in s.round(float(now))]))
""")


def test_restored_in_a_new_process_the_policy_decides_as_the_original(saved) -> None:
    name, path, clock, here = saved
    data = json.loads(path.read_text())
    assert data["format"] == SESSION_FORMAT == 2
    assert data["policy_state"]["type"] == type(policy_state(make_policy(name))).__name__
    proc = subprocess.run([sys.executable, "-c", _RESTORE, str(path), name, str(clock)], capture_output=True,
                          text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout) == here
    assert len(here) >= 2 and any(kind != "keep" for _, kind, _, _ in here)  # a round with decisions to make


def test_without_the_policy_state_the_next_decisions_differ(saved, tmp_path: Path) -> None:
    """The same file written as format 1 (before the policy state was saved) still loads; a stateful
    policy then starts afresh and decides otherwise, a stateless one alike."""
    name, path, clock, here = saved
    data = json.loads(path.read_text())
    del data["policy_state"]
    data["format"] = 1
    old = tmp_path / "format1.json"
    old.write_text(json.dumps(data))
    stateful = not isinstance(policy_state(make_policy(name)), type(NO_STATE))
    if stateful:
        with pytest.warns(PolicyStateLostWarning, match="starts afresh"):
            fresh = SchedulingSession.load(old, preset("sia-64"), make_policy(name))
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("error", PolicyStateLostWarning)  # nothing lost: no warning
            fresh = SchedulingSession.load(old, preset("sia-64"), make_policy(name))
    differs = _decisions(fresh.round(clock)) != here
    if name in STATEFUL:
        assert differs
    if not stateful:
        assert not differs
    # and in this process, with the state, alike
    assert _decisions(SchedulingSession.load(path, preset("sia-64"), make_policy(name)).round(clock)) == here


def test_policy_states_survive_json_exactly(saved) -> None:
    name, path, _, _ = saved
    policy = make_policy(name)
    SchedulingSession.load(path, preset("sia-64"), policy)
    state = policy_state(policy)
    assert state == type(state).from_json(json.loads(path.read_text())["policy_state"]["data"])  # what was saved
    again = type(state).from_json(json.loads(json.dumps(state.to_json())))
    assert again == state
    twin = make_policy(name)
    restore_policy_state(twin, again)  # a restored policy reports the state it was given (before any round)
    assert policy_state(twin) == state
    if name in STATEFUL:
        assert isinstance(state, GavelState | PolluxState | HadarState) and state != policy_state(make_policy(name))


def test_states_hold_what_each_policy_remembers(saved) -> None:
    name, path, _, _ = saved
    policy = make_policy(name)
    SchedulingSession.load(path, preset("sia-64"), policy)
    state = policy_state(policy)
    jobs = set(json.loads(path.read_text())["policy_state"]["data"].get("rates", {}))
    if isinstance(state, GavelState):
        assert state.solve_count >= 2 and state.job_set is not None
        assert all(0.0 <= x <= 1.0 + 1e-9 for fr in state.time_fractions.values() for x in fr.values())
    elif isinstance(state, PolluxState) and name == "pollux":  # type-pooled Pollux fills none of it
        assert not state.virtual_nodes and not state.profiles
    elif isinstance(state, PolluxState):
        assert state.virtual_nodes and all(c > 0 for parts in state.virtual_nodes.values() for _, c in parts)
        assert any(p.params is not None for p in state.profiles.values())  # a fitted merged profile
    elif isinstance(state, HadarState):
        assert state.nodes == tuple(n.name for n in preset("sia-64").nodes) and jobs
        committed = np.sum([np.array(c) for pieces in state.plans.values() for *_, c in pieces], axis=0)
        assert (committed >= 0).all() and len(state.segment_starts) == len(state.segment_usage) >= 1


def test_a_file_with_another_policys_state_is_refused(saved) -> None:
    name, path, _, _ = saved
    other = "gavel" if name.startswith("pollux") else "pollux-sia"
    with pytest.raises(InputError, match="policy"):
        SchedulingSession.load(path, preset("sia-64"), make_policy(other))


def test_malformed_policy_state_names_the_state_type(tmp_path: Path) -> None:
    session, _ = _drive("gavel-sia", 360.0)
    data = json.loads(session.save(tmp_path / "s.json").read_text())
    data["policy_state"]["data"]["time_fractions"] = [1, 2]
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(InputError, match="GavelState"):
        SchedulingSession.load(tmp_path / "bad.json", preset("sia-64"), make_policy("gavel-sia"))


def test_generator_state_draws_the_same_numbers() -> None:
    rng = np.random.default_rng(7)
    rng.permutation(10)
    state = GeneratorState.of(rng)
    copy = GeneratorState.from_json(json.loads(json.dumps(state.to_json()))).generator()
    assert copy.permutation(50).tolist() == rng.permutation(50).tolist()


class _Rates:
    """A model whose rates (steps/s of the gang per GPU type) its owner changes in place."""

    def __init__(self, rates: dict[str, float]) -> None:
        self.rates = rates

    @property
    def gpu_types(self) -> tuple[str, ...]:
        return tuple(self.rates)

    def goodput(self, gpu_type, num_nodes, num_gpus, progress=0.0):
        return np.full(np.shape(num_gpus), self.rates[gpu_type], dtype=float)


def test_hadar_keeps_the_rates_it_read_across_a_restore() -> None:
    """Hadar reads a job's rates once per model object; a restored Hadar keeps what the original read
    (the original would not read its unchanged model object again), a fresh one reads anew."""
    from heteroplan.policies.base import JobState
    from heteroplan.policies.hadar import HadarPolicy

    cluster = preset("sia-64")
    model = _Rates(dict.fromkeys(cluster.type_names, 1.0))
    job = JobState("a", "custom", 0.0, requested_gpus=2, elastic=False, remaining_work=1e5, estimator=model)
    original = HadarPolicy()
    original.allocate(cluster, [job], 0.0)
    state = HadarState.from_json(json.loads(json.dumps(original.state().to_json())))
    assert state.rates["a"] == (1.0,) * len(cluster.type_names)  # the gang's rate on each type
    model.rates = dict.fromkeys(cluster.type_names, 3.0)
    original.allocate(cluster, [job], 360.0)  # same model object: not read again
    restored, fresh = HadarPolicy(), HadarPolicy()
    restored.restore_state(state)
    moved = JobState("a", "custom", 0.0, requested_gpus=2, elastic=False, remaining_work=1e5,
                     estimator=_Rates(dict(model.rates)))  # the model as a restored session rebuilds it
    restored.allocate(cluster, [moved], 360.0)
    fresh.allocate(cluster, [moved], 360.0)
    assert restored.state().rates == original.state().rates == state.rates
    assert fresh.state().rates["a"] == (3.0,) * len(cluster.type_names)


def test_a_policy_state_that_is_not_a_policy_state_is_refused_by_name(tmp_path: Path) -> None:
    from heteroplan.policies.base import PolicyBase

    class Loose(PolicyBase):
        def allocate(self, cluster, jobs, now):
            return {}

        def state(self):
            return {"turn": 1}  # a dict, not a PolicyState

    assert policy_state(PolicyBase()) is NO_STATE  # the base class keeps nothing
    with pytest.raises(InputError, match="must be a NoState"):
        PolicyBase().restore_state(GeneratorState.of(np.random.default_rng(0)))
    session = SchedulingSession(preset("sia-64"), Loose())
    with pytest.raises(InputError, match=r"policy\[loose\]\.state\(\)"):
        session.save(tmp_path / "s.json")
