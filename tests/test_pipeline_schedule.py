"""The 1F1B replay (DeepSpeed's TrainSchedule, blocking transfers) against hand-computed cases,
and the simulator's closed-form pipeline time against the replay on Sailor's real plans."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heteroplan.errors import InputError
from heteroplan.planner import Plan, simulate
from heteroplan.planner.pipeline_schedule import one_f_one_b_time, stage_instructions

DATA = Path(__file__).parent / "data" / "sailor"


def test_two_stages_two_microbatches_by_hand():
    # f = 1, b = 2 on both stages, 0.5 s per transfer. Stage 0: F0 [0,1], act0 [1,1.5], F1 [1.5,2.5];
    # stage 1: F0 [1.5,2.5], B0 [2.5,4.5], grad0 [4.5,5]; act1 [5,5.5]; stage 1: F1 [5.5,6.5],
    # B1 [6.5,8.5]; stage 0: B0 [5.5,7.5], grad1 [8.5,9], B1 [9,11].
    assert one_f_one_b_time([1, 1], [2, 2], [0.5], 2) == pytest.approx(11.0)
    # the closed form (M-1) max sigma + sum(f+b) + 2 sum c gives the same here: 1*4 + 6 + 1
    assert one_f_one_b_time([1], [2], [], 3) == pytest.approx(9.0)  # one stage: M (f + b)


def test_transfers_block_both_ends():
    # a slow link is paid on every microbatch: stage 1's step is f + b + 2 c = 0.3 + 2 * 1
    slow = one_f_one_b_time([0.1, 0.1], [0.2, 0.2], [1.0], 10)
    fast = one_f_one_b_time([0.1, 0.1], [0.2, 0.2], [0.0], 10)
    assert fast == pytest.approx(10 * 0.3 + 0.3)
    assert slow == pytest.approx(9 * (0.3 + 2.0) + 0.6 + 2.0)


@pytest.mark.parametrize(("stages", "microbatches"), [(1, 1), (2, 5), (3, 2), (4, 7), (5, 3)])
def test_every_stage_runs_each_microbatch_once_and_transfers_pair_up(stages, microbatches):
    programs = [stage_instructions(s, stages, microbatches) for s in range(stages)]
    for s, prog in enumerate(programs):
        kinds = [k for k, _ in prog]
        assert sorted(m for k, m in prog if k == "forward") == list(range(microbatches))
        assert sorted(m for k, m in prog if k == "backward") == list(range(microbatches))
        assert kinds.count("send_act") == kinds.count("recv_grad") == (microbatches if s < stages - 1 else 0)
        assert kinds.count("recv_act") == kinds.count("send_grad") == (microbatches if s > 0 else 0)
        # 1F1B: a stage never holds more than S - s activations
        held, peak = 0, 0
        for k, _ in prog:
            held += (k == "forward") - (k == "backward")
            peak = max(peak, held)
        assert peak == min(stages - s, microbatches)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1), st.floats(0, 0.5)), min_size=1, max_size=5),
    st.integers(1, 12),
)
def test_replay_is_bounded_by_work_and_by_the_closed_form_for_one_microbatch(stages, m):
    f, b, c = (np.array(x) for x in zip(*stages, strict=True))
    c = c[1:]
    t = one_f_one_b_time(f, b, c, m)
    assert t >= m * (f + b).max() - 1e-9  # the busiest stage computes every microbatch
    assert t >= (f + b).sum() + 2 * c.sum() - 1e-9  # one microbatch crosses the pipe and back
    if m == 1:
        assert t == pytest.approx((f + b).sum() + 2 * c.sum())


def test_bad_input_is_a_clear_error():
    with pytest.raises(InputError):
        one_f_one_b_time([1, 1], [1, 1], [], 2)
    with pytest.raises(InputError):
        one_f_one_b_time([1], [-1], [], 2)
    with pytest.raises(InputError):
        one_f_one_b_time([1], [1], [], 0)


@pytest.mark.parametrize("pattern", ["plan_config_*.json", "mit/plan_config_*.json"])
def test_closed_form_pipeline_matches_the_replay_on_real_plans(pattern):
    """On Sailor's measured plans the simulator's closed form is within 1% of the replay of the
    schedule that ran them (so its errors there are not the schedule's)."""
    for path in sorted(DATA.glob(pattern)):
        plan = Plan.from_sailor(json.loads(path.read_text()), "OPT-350")
        sim = simulate(plan)
        fb, share, comm = (sim.details[k] for k in ("stage_compute", "forward_share", "comm"))
        replay = max(
            one_f_one_b_time(fb[:, d] * share[:, d], fb[:, d] * (1 - share[:, d]), comm[1:-1, d], m)
            for d, m in enumerate(plan.microbatches())
        )
        assert sim.pipeline_time == pytest.approx(replay, rel=0.01), path.name
