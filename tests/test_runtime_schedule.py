"""Pipeline schedules and rank layout (pure Python: no processes)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

# the schedules are pure Python, but heteroplan.runtime (their package) needs torch to import
pytest.importorskip("torch", reason="the runtime tests need torch: pip install torch==2.13.0 (CPU wheel: --index-url https://download.pytorch.org/whl/cpu)")

from heteroplan.errors import InputError  # noqa: E402
from heteroplan.planner.plan import Plan, ReplicaGroup, Stage  # noqa: E402
from heteroplan.runtime.layout import rank_layout, stage_tp  # noqa: E402
from heteroplan.runtime.schedule import SCHEDULES, choose_pipeline, gpipe, one_f_one_b  # noqa: E402


def run_pipeline(num_stages: int, micro: int, schedule) -> int:
    """Execute every stage's op list with blocking receives and unbounded send queues.

    Returns the number of rounds it took; raises AssertionError on a deadlock.
    """
    ops = [list(schedule(num_stages, s, micro)) for s in range(num_stages)]
    acts = [set() for _ in range(num_stages + 1)]   # acts[s]: microbatches whose input reached stage s
    grads = [set() for _ in range(num_stages + 1)]  # grads[s]: output gradients that reached stage s
    acts[0] = set(range(micro))
    grads[num_stages - 1] = set()
    done_f = [set() for _ in range(num_stages)]
    pos = [0] * num_stages
    rounds = 0
    while any(pos[s] < len(ops[s]) for s in range(num_stages)):
        moved = False
        for s in range(num_stages):
            if pos[s] == len(ops[s]):
                continue
            kind, m = ops[s][pos[s]]
            if kind == "F" and m in acts[s]:
                done_f[s].add(m)
                acts[s + 1].add(m)
            elif kind == "B" and m in done_f[s] and (s == num_stages - 1 or m in grads[s]):
                if s > 0:
                    grads[s - 1].add(m)
            else:
                continue
            pos[s] += 1
            moved = True
        assert moved, f"deadlock at {pos}"
        rounds += 1
    return rounds


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(1, 12), st.sampled_from(sorted(SCHEDULES)))
def test_schedules_run_every_microbatch_once_without_deadlock(num_stages: int, micro: int, name: str) -> None:
    schedule = SCHEDULES[name]
    for s in range(num_stages):
        ops = schedule(num_stages, s, micro)
        assert sorted(m for k, m in ops if k == "F") == list(range(micro))
        assert sorted(m for k, m in ops if k == "B") == list(range(micro))
        seen = set()
        for kind, m in ops:
            if kind == "B":
                assert m in seen, "backward before its forward"
            seen.add(m)
    run_pipeline(num_stages, micro, schedule)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(1, 12))
def test_1f1b_keeps_at_most_stages_minus_s_activations(num_stages: int, micro: int) -> None:
    for s in range(num_stages):
        live = peak = 0
        for kind, _ in one_f_one_b(num_stages, s, micro):
            live += 1 if kind == "F" else -1
            peak = max(peak, live)
        assert peak == min(num_stages - s, micro)
        gpipe_peak = max(i + 1 for i, (k, _) in enumerate(gpipe(num_stages, s, micro)) if k == "F")
        assert gpipe_peak == micro


def test_1f1b_known_order() -> None:
    assert [f"{k}{m}" for k, m in one_f_one_b(3, 0, 4)] == ["F0", "F1", "F2", "B0", "F3", "B1", "B2", "B3"]
    assert [f"{k}{m}" for k, m in one_f_one_b(3, 2, 2)] == ["F0", "B0", "F1", "B1"]


@pytest.mark.parametrize("args", [(0, 0, 1), (2, 2, 1), (2, 0, 0), (2, -1, 3)])
def test_schedule_bad_input(args) -> None:
    with pytest.raises(InputError):
        one_f_one_b(*args)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.lists(st.integers(1, 5), min_size=1, max_size=4), st.integers(1, 3))
def test_layout_covers_every_sample_once_per_stage(pp: int, micro: list[int], mbs: int) -> None:
    dp = len(micro)
    layers = 2 * pp
    stages = tuple(Stage(2 * s, 2 * s + 2, (ReplicaGroup("cpu", "local", 1, dp),)) for s in range(pp))
    plan = Plan("m", sum(micro) * mbs, mbs, stages, tuple(micro))
    layout = rank_layout(plan)
    assert [r.rank for r in layout] == list(range(pp * dp))
    for s in range(pp):
        covered = []
        for r in (r for r in layout if r.stage == s):
            covered += range(r.sample_offset, r.sample_offset + r.num_microbatches * mbs)
            assert (r.first_layer, r.last_layer) == (2 * s, 2 * s + 2)
        assert sorted(covered) == list(range(plan.global_batch_size))
    assert layout[-1].last_layer == layers


def test_layout_of_replicas_of_one_stage_with_different_tp_and_one_degree_per_stage_refused() -> None:
    plan = Plan("m", 4, 1, (Stage(0, 2, (ReplicaGroup("A100-40", "z", 2, 1), ReplicaGroup("V100-16", "z", 1, 1))),))
    with pytest.raises(InputError, match="tp"):
        stage_tp(plan)
    assert [(r.rank, r.replica, r.tp) for r in rank_layout(plan)] == [(0, 0, 2), (1, 0, 2), (2, 1, 1)]
    assert len(rank_layout(Plan("m", 4, 1, (Stage(0, 2, (ReplicaGroup("A100-40", "z", 2, 2),)),)))) == 4


def test_torch_pipelining_runs_equal_tp_plans_and_heteroplan_the_tp_changing_boundaries() -> None:
    """torch where every stage has one TP degree; Schedule1F1B needs M >= S (torch refuses fewer),
    so a replica with fewer microbatches runs ScheduleGPipe; a TP 2 -> TP 1 boundary runs heteroplan's loop."""
    hetero = choose_pipeline([2, 2], [3, 1])
    assert hetero.engine == "torch" and hetero.schedules == ("Schedule1F1B", "ScheduleGPipe")
    assert hetero.describe().startswith("torch: replica 0 Schedule1F1B x 3 microbatches, replica 1 ScheduleGPipe x 1")
    assert choose_pipeline([1, 1, 1], [3, 2], "gpipe").schedules == ("ScheduleGPipe", "ScheduleGPipe")
    assert choose_pipeline([1], [1, 4]).schedules == ("Schedule1F1B", "Schedule1F1B")
    changing = choose_pipeline([2, 1], [2])
    assert changing.engine == "heteroplan" and changing.schedules == ("1f1b",) and "[2, 1]" in changing.reason
    assert choose_pipeline([2, 2], [3, 1], "gpipe", "heteroplan").schedules == ("gpipe", "gpipe")
    with pytest.raises(InputError, match="config.pipeline"):
        choose_pipeline([2, 1], [2], engine="torch")
    with pytest.raises(InputError, match="config.pipeline"):
        choose_pipeline([1], [2], engine="deepspeed")
