"""The load breakdown reads the session's decisions (issue 48): its preemptions and allocation
changes equal those re-derived from the recorded allocations round by round (the former method,
kept here as the oracle), and the typed events say the same, on runs with preemptions, rescales
and free moves."""

from __future__ import annotations

from collections import Counter

import pytest

from heteroplan.cluster import preset
from heteroplan.policies.registry import make_policy
from heteroplan.scheduling import DecisionKind
from heteroplan.sim import SimEventKind, simulate
from heteroplan.sim.breakdown import load_breakdown
from heteroplan.sim.fidelity import SimFidelity
from heteroplan.workload.newtrace import NewTraceSpec, generate_newtrace


def _from_schedule(result) -> tuple[dict[str, int], dict[str, int]]:
    """Preemptions and allocation changes per job, re-derived from ``result.schedule`` alone."""
    L = result.round_length
    end = {j.job_id: (j.finish_time if j.finish_time is not None else result.end_time) for j in result.jobs}
    changes, preempt = Counter(), Counter()
    previous: dict = {}
    for t, allocs in result.schedule:
        for name, alloc in allocs.items():
            old = previous.get(name)
            if old is None or (old.gpu_type, sorted(old.placement)) != (alloc.gpu_type, sorted(alloc.placement)):
                changes[name] += 1
        for name in previous:
            if name not in allocs and end[name] > t:
                changes[name] += 1
                preempt[name] += 1
        previous = {n: a for n, a in allocs.items() if end.get(n, t) > t + L - 1e-9}
    return dict(preempt), dict(changes)


# (policy, free moves): Sia and Pollux rescale jobs; Gavel preempts and, with free moves, moves them
@pytest.mark.parametrize(("policy", "free_moves"), [("sia", True), ("pollux-sia", False), ("gavel-sia", True)])
def test_preemptions_and_changes_from_decisions_equal_those_from_the_schedule(policy, free_moves) -> None:
    jobs = generate_newtrace(NewTraceSpec(jobs=40, hours=0.5), seed=7)
    result = simulate(jobs, preset("sia-64"), make_policy(policy), fidelity=SimFidelity(free_moves=free_moves),
                      progress=False, record=True, max_rounds=40)
    preempt, changes = _from_schedule(result)
    bd = {j.name: j for j in load_breakdown(result).jobs}
    assert {n: j.preemptions for n, j in bd.items() if j.preemptions} == preempt
    assert {n: j.allocation_changes for n, j in bd.items() if j.allocation_changes} == changes
    kinds = Counter(d.kind for rd in result.decisions for d in rd)
    assert kinds[DecisionKind.RESCALE] > 0  # the run exercises what the breakdown counts
    if policy == "gavel-sia":
        assert sum(preempt.values()) > 0
        assert any(d.kind is DecisionKind.KEEP and d.allocation != d.previous for rd in result.decisions for d in rd)
    # the typed events say the same: a PREEMPT event per preemption, a (re)start per start and restart
    assert dict(Counter(e.job for e in result.events if e.kind is SimEventKind.PREEMPT)) == preempt
    starts = Counter(e.job for e in result.events if e.kind in (SimEventKind.START, SimEventKind.RESTART))
    assert {r.job_id: starts[r.job_id] for r in result.jobs} == {
        r.job_id: r.restarts + (r.start_time is not None) for r in result.jobs}
    assert all(e.to_list()[2] == e.kind.value for e in result.events)
