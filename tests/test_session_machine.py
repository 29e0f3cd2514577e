"""The scheduling session under random and hostile use (issue 47, item 5; issue 48, item 6).

A hypothesis state machine drives :class:`SchedulingSession` -- submit / report / round / finish
/ save / load / load a damaged file -- in random order with random values, hostile ones
included (NaN, infinities, negative numbers, strings, booleans, huge counts, unknown job ids, a
finish before the arrival or the last round, reports that rewind progress or rewrite a finished
job). One property per class of finding of the issue's audit:

- only :class:`InputError` escapes for bad input, and a refused call changes nothing;
- the clock is finite and never goes back;
- GPU-seconds <= (clock - arrival) x the job's most GPUs; JCT >= 0; work done never goes back;
- every allocation respects the job's caps (a rigid job on exactly its requested GPUs, never
  above ``max_gpus``) and each node's capacity (an oracle independent of ``check_allocations``);
- a job that can never fit the cluster is parked with a reason (an oracle computing the GPUs of
  the types it can run on from what was submitted), every round, never silently waiting;
- save -> load gives equal records and the same next decisions; a truncated or hand-edited file
  is an InputError naming the file;
- faults (issue 46): a failed job holds nothing and counts its failure and redone steps; a job given
  up leaves the rounds; when the cluster changes, exactly the jobs on lost nodes lose their GPUs
  and no round places anything on a node that is gone.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
import warnings
from pathlib import Path

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from heteroplan.cluster import Cluster, preset
from heteroplan.errors import InputError
from heteroplan.perf.goodput import ThroughputTable
from heteroplan.policies.registry import make_policy
from heteroplan.scheduling import DecisionKind, ParkReason, SchedulingSession, StepTiming

CLUSTER = Cluster.from_counts(preset("sia-64").gpu_types, {"rtx": 8, "aws": 4}, "rtx-aws")  # 8 rtx + 4 aws
TYPES = CLUSTER.type_names
CAPACITY = {n.name: n.num_gpus for n in CLUSTER.nodes}
NODE_TYPE = dict(CLUSTER.node_types)
POLICIES = ("fifo", "tiresias", "gavel", "hadar", "sia", "pollux")  # rigid, stateful and elastic ones

HOSTILE_NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.integers(-10, 10**7), st.just(10**400),
    st.text(max_size=3), st.booleans(), st.none(), st.lists(st.integers(0, 3), max_size=2))
SECONDS = st.floats(0, 1e5, allow_nan=False)
UNKNOWN = "nobody"


def or_hostile(valid: st.SearchStrategy, hostile: st.SearchStrategy = HOSTILE_NUMBERS) -> st.SearchStrategy:
    """``valid`` mostly, a hostile value one time in eight (so that sessions get somewhere)."""
    return st.integers(0, 7).flatmap(lambda i: hostile if i == 0 else valid)


def _records(session: SchedulingSession) -> tuple:
    return session.records()


def _decisions(decisions) -> list:
    return [(d.job_id, d.kind, d.allocation, d.previous, d.restart, d.restore_s, d.parked) for d in decisions]


class SessionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="session-machine-"))
        self.session: SchedulingSession | None = None
        self.clock: float | None = None
        self.jobs: dict[str, dict] = {}  # what was submitted (the oracle's view)
        self.done: dict[str, float] = {}  # fraction done last seen
        self.saves = 0
        self.horizon = 0.0  # the latest failure time accepted (GPUs are charged up to it)

    def teardown(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    # ----------------------------------------------------------------- helpers
    def refused(self, call, *args, **kwargs):
        """Run ``call``; an InputError must leave the records and the clock as they were."""
        before = (_records(self.session), self.session.rounds)
        try:
            return call(*args, **kwargs)
        except InputError:
            assert (_records(self.session), self.session.rounds) == before, "a refused call changed the session"
            return None

    def never_fits(self, job_id: str) -> bool:
        """The oracle: GPUs it needs together > GPUs of the types its model can run on."""
        job = self.jobs[job_id]
        need = 1 if (self.policy.elastic and job["elastic"]) else job["requested_gpus"]
        usable = sum(n.num_gpus for n in self.cluster.nodes if n.gpu_type in job["types"])
        return need > usable

    @property
    def job_ids(self) -> st.SearchStrategy[str]:
        hostile = st.sampled_from([UNKNOWN, ["j0"], None, 3, ""])
        return or_hostile(st.sampled_from(sorted(self.jobs)), hostile) if self.jobs else hostile

    # ------------------------------------------------------------------- rules
    @initialize(name=st.sampled_from(POLICIES), data=st.data(), jobs=st.integers(0, 4))
    def start(self, name: str, data, jobs: int) -> None:
        self.name = name
        self.policy = make_policy(name)
        self.cluster = CLUSTER  # what the session schedules on now (update_cluster changes it)
        self.session = SchedulingSession(CLUSTER, self.policy)
        for _ in range(jobs):  # a few well-formed jobs, so that sessions get somewhere
            self.submit_one(data, lambda valid: valid)

    @rule(data=st.data())
    def submit(self, data) -> None:
        self.submit_one(data, or_hostile)

    def submit_one(self, data, values) -> None:
        """Submit a job with arguments drawn from ``values(<valid strategy>)``."""
        job_id = f"j{len(self.jobs)}"
        kind = data.draw(st.sampled_from(["bootstrap", "oracle", "table", "zero-table"]), label="kind")
        arrival = data.draw(values(SECONDS), label="arrival")
        requested = data.draw(values(st.sampled_from([1, 2, 4, 8, 12, 10**6])), label="requested_gpus")
        max_gpus = data.draw(values(st.one_of(st.none(), st.integers(1, 16))), label="max_gpus")
        elastic = data.draw(st.booleans(), label="elastic")
        if kind in ("bootstrap", "oracle"):
            model, app, types, work = kind, "cifar10", set(TYPES), None
        else:
            rates = {t: data.draw(st.sampled_from([0.0, 1.0, 3.0]), label=t) for t in TYPES}
            if kind == "zero-table":
                rates = dict.fromkeys(TYPES, 0.0)
            work = data.draw(values(st.floats(1, 1e6)), label="total_work")
            model, app, types = ThroughputTable(rates), "mine", {t for t, r in rates.items() if r > 0}
        accepted = self.refused(self.session.submit, job_id, arrival_time=arrival, application=app, perf_model=model,
                                requested_gpus=requested, max_gpus=max_gpus, elastic=elastic, total_work=work)
        if job_id in self.session.job_ids:
            assert accepted is None  # submit returns nothing
            view = self.session.view(job_id)
            assert view.max_gpus >= view.requested_gpus  # a job never runs above its maximum
            self.jobs[job_id] = {"requested_gpus": view.requested_gpus, "max_gpus": view.max_gpus,
                                 "elastic": elastic, "types": types, "arrival": float(arrival)}
            self.done[job_id] = 0.0

    @rule(now=or_hostile(st.floats(0, 600)), relative=st.booleans())
    def round(self, now, relative) -> None:
        if relative and self.clock is not None and isinstance(now, float) and math.isfinite(now):
            now = self.clock + abs(now)
        decisions = self.refused(self.session.round, now)
        if decisions is None:
            return
        assert math.isfinite(decisions.time) and (self.clock is None or decisions.time >= self.clock)
        self.clock = decisions.time
        used = dict.fromkeys(CAPACITY, 0)
        for d in decisions:
            event(f"decision {d.kind.value}{' parked' if d.parked else ''}")
            job = self.jobs[d.job_id]
            if self.never_fits(d.job_id):  # never silently waiting
                assert d.parked is not None and d.allocation is None and d.kind in (DecisionKind.WAIT,
                                                                                   DecisionKind.PREEMPT)
                assert d.parked.reason in (ParkReason.TOO_LARGE, ParkReason.NO_USABLE_TYPE)
                assert str(d.parked.need_gpus) in d.parked.detail
                assert d.job_id in decisions.parked
                continue
            assert d.parked is None
            if d.allocation is None:
                continue
            a = d.allocation
            assert isinstance(a.num_gpus, int) and 1 <= a.num_gpus <= job["max_gpus"]
            if not job["elastic"]:
                assert a.num_gpus == job["requested_gpus"]
            nodes = [n for n, _ in a.placement]
            assert len(nodes) == len(set(nodes)) and sum(c for _, c in a.placement) == a.num_gpus
            for node, count in a.placement:
                assert NODE_TYPE[node] in a.gpu_types
                used[node] += count
        assert all(used[n] <= CAPACITY[n] for n in CAPACITY)
        assert all(n in {node.name for node in self.cluster.nodes} for n, c in used.items() if c)  # only nodes that exist

    @rule(data=st.data(), work=or_hostile(st.floats(0, 2e6)),
          steps=or_hostile(st.integers(0, 10**6)), phi=or_hostile(st.floats(1, 1e5)))
    def report(self, data, work, steps, phi) -> None:
        job_id = data.draw(self.job_ids, label="job_id")
        timing = data.draw(st.one_of(st.none(), st.builds(
            StepTiming, st.sampled_from([*TYPES, "dgx-ext", "k80", 3]),
            st.one_of(st.tuples(st.integers(1, 4)), st.tuples(st.integers(1, 4), st.integers(1, 4)),
                      st.just(()), st.just((0,)), st.just((True,))),
            or_hostile(st.floats(1, 256)), or_hostile(st.floats(0.01, 2)),
            or_hostile(st.floats(0, 0.01)))), label="timing")
        fields = data.draw(st.sets(st.sampled_from(["work_done", "steps_done", "phi", "step_timing"]), min_size=1),
                           label="fields")
        given = {"work_done": work, "steps_done": steps, "phi": phi, "step_timing": timing}
        self.refused(self.session.report, job_id, **{k: given[k] for k in fields})

    @rule(data=st.data(), at=or_hostile(st.floats(-100, 1e5)), relative=st.booleans())
    def finish(self, data, at, relative) -> None:
        job_id = data.draw(self.job_ids, label="job_id")
        if relative and self.clock is not None and isinstance(at, float) and math.isfinite(at):
            at = self.clock + at  # around the last round: before it too
        record = self.refused(self.session.finish, job_id, at)
        if record is not None:
            assert record.jct_s is not None and record.jct_s >= 0
            assert self.clock is None or record.finish_time >= self.clock

    @precondition(lambda self: self.session is not None)
    @rule(later=st.floats(0, 300))
    def save_and_load(self, later) -> None:
        self.saves += 1
        path = self.session.save(self.dir / f"s{self.saves}.json")
        loaded = SchedulingSession.load(path, self.cluster, make_policy(self.name))
        event(f"saved and loaded {len(self.jobs)} jobs")
        assert loaded.records() == self.session.records()
        assert loaded.job_ids == self.session.job_ids and loaded.rounds == self.session.rounds
        now = (self.clock or 0.0) + later
        assert _decisions(loaded.round(now)) == _decisions(self.session.round(now))  # the same next decisions
        assert loaded.records() == self.session.records()
        self.clock = now
        self.session = loaded  # go on with the restored one

    @rule(data=st.data())
    def load_a_damaged_file(self, data) -> None:
        self.saves += 1
        path = self.session.save(self.dir / f"s{self.saves}.json")
        text = path.read_text()
        how = data.draw(st.sampled_from(["truncate", "edit", "drop", "format"]), label="damage")
        if how == "truncate":
            path.write_text(text[:data.draw(st.integers(0, max(0, len(text) - 1)), label="cut")])
        else:
            saved = json.loads(text)
            target, key = saved, data.draw(st.sampled_from(sorted(saved)), label="key")
            while isinstance(target[key], dict | list) and target[key] and data.draw(st.booleans(), label="deeper"):
                target = target[key]  # into a job, its model, its allocation, the policy's state ...
                keys = sorted(target) if isinstance(target, dict) else list(range(len(target)))
                key = data.draw(st.sampled_from(keys), label="key")
            if how == "drop":
                del target[key]
            elif how == "format":
                saved["format"] = data.draw(st.sampled_from([0, 3, 99, "2", None, 2.5]), label="format")
            else:
                target[key] = data.draw(st.one_of(HOSTILE_NUMBERS, st.dictionaries(st.text(max_size=2), st.integers(),
                                                                                   max_size=2)), label="value")
            path.write_text(json.dumps(saved))
        try:
            SchedulingSession.load(path, self.cluster, make_policy(self.name))
            event("a damaged file loaded")
        except InputError as exc:
            assert str(path) in str(exc)  # names the file
            event("a damaged file refused")

    @rule(data=st.data(), at=or_hostile(st.floats(0, 120)), redone=or_hostile(st.integers(0, 50)))
    def fail(self, data, at, redone) -> None:
        """A job's ranks died: it holds nothing afterwards, the failure and the redone steps are counted."""
        job_id = data.draw(self.job_ids, label="job_id")
        if self.clock is not None and isinstance(at, float) and math.isfinite(at):
            at = self.clock + at
        before = self.session.record(job_id) if isinstance(job_id, str) and job_id in self.jobs else None
        self.refused(self.session.fail, job_id, at, steps_redone=redone)
        if before is None:
            return
        after = self.session.record(job_id)
        if after.failures == before.failures + 1:  # taken
            event("a failure")
            self.horizon = max(self.horizon, float(at))  # GPUs were charged up to the failure
            assert self.session.allocation(job_id) is None and after.steps_redone == before.steps_redone + redone
            assert after.steps_done == max(0, before.steps_done - redone)
            self.done[job_id] = after.fraction_done  # the work since the checkpoint is lost: may go back
        else:
            assert after == before

    @rule(data=st.data(), reason=st.sampled_from(["ranks kept failing", "", None]))
    def give_up(self, data, reason) -> None:
        job_id = data.draw(self.job_ids, label="job_id")
        record = self.refused(self.session.give_up, job_id, self.clock or 0.0, reason)
        if record is not None:
            event("given up")
            assert record.gave_up == reason and job_id not in self.session.unfinished()
            assert self.session.allocation(job_id) is None

    @rule(data=st.data())
    def change_the_cluster(self, data) -> None:
        """A node lost or back: jobs placed on a lost node lose their GPUs (a failure each)."""
        keep = data.draw(st.sets(st.sampled_from(sorted(CAPACITY)), min_size=1), label="nodes kept")
        cluster = Cluster(CLUSTER.gpu_types, tuple(n for n in CLUSTER.nodes if n.name in keep), name="changed")
        held = {j: self.session.allocation(j) for j in self.session.job_ids}
        failures = {j: self.session.record(j).failures for j in self.session.job_ids}
        lost = self.refused(self.session.update_cluster, cluster, self.clock or 0.0)
        self.cluster = cluster
        for job_id, alloc in held.items():
            on_lost = alloc is not None and any(node not in keep for node, _ in alloc.placement)
            assert (job_id in lost) == on_lost
            assert self.session.record(job_id).failures == failures[job_id] + on_lost
            if on_lost:
                assert self.session.allocation(job_id) is None
        event(f"cluster of {len(keep)} nodes, {len(lost)} jobs lost")

    # -------------------------------------------------------------- invariants
    @invariant()
    def bookkeeping_holds(self) -> None:
        if self.session is None:
            return
        clock = self.clock
        for record in self.session.records():
            job = self.jobs[record.job_id]
            end = max(t for t in (clock, record.finish_time, record.arrival_time, self.horizon) if t is not None)
            assert record.gpu_seconds <= (end - record.arrival_time) * job["max_gpus"] + 1e-6
            assert record.jct_s is None or record.jct_s >= 0
            assert record.fraction_done >= self.done[record.job_id]  # work never goes back
            self.done[record.job_id] = record.fraction_done


SessionMachine.TestCase.settings = settings(max_examples=80, stateful_step_count=30, deadline=None,
                                            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


class TestSessionMachine(SessionMachine.TestCase):
    def setUp(self) -> None:
        warnings.simplefilter("ignore")  # unreported-job and lost-state warnings are expected here
