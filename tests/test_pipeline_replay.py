"""The 1F1B replay (DeepSpeed's TrainSchedule; blocking, buffered and NIC-sharing transfers)
against hand-computed cases and invariants, and the simulator's closed-form pipeline time
against the replay on Sailor's real plans."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heteroplan.errors import InputError
from heteroplan.planner import Plan, simulate_plan
from heteroplan.planner.model.comm import pipeline_send_buffered
from heteroplan.planner.model.pipeline_replay import (
    one_f_one_b_lower_bound,
    one_f_one_b_time,
    stage_instructions,
)
from heteroplan.planner.model.sim_config import SHIPPED_PLATFORMS, SimConfig

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


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0, 1), st.floats(0, 2), st.floats(0, 1), st.booleans()), min_size=1, max_size=5),
    st.integers(1, 10),
    st.booleans(),
)
def test_lower_bound_never_exceeds_the_replay(stages, m, shared_nic):
    """The bound the search prunes replayed splits with: below every replay, any buffering."""
    f, b, c, buf = (np.array(x) for x in zip(*stages, strict=True))
    c, buf = c[1:], buf[1:]
    t = one_f_one_b_time(f, b, c, m, buf, shared_nic)
    lb = float(one_f_one_b_lower_bound(f, b, c, m, buf))
    assert lb <= t * (1 + 1e-9) + 1e-12
    # at least the busiest stage's compute, and vectorized rows agree with single calls
    assert lb >= m * (f + b).max() - 1e-9
    rows = one_f_one_b_lower_bound(np.stack([f, 2 * f]), np.stack([b, 2 * b]), np.stack([c, 2 * c]), m, np.stack([buf, buf]))
    assert rows == pytest.approx([lb, 2 * lb])


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0, 1), st.floats(0, 2), st.floats(0, 1), st.booleans()), min_size=2, max_size=5),
    st.integers(1, 10),
)
def test_sharing_a_nic_never_speeds_a_pipeline_up(stages, m):
    """A flow through a shared NIC crosses at most at its full rate, so no event comes earlier
    than with a link per boundary and direction; with nothing to share (every transfer
    blocking, or zero-length) the two are the same."""
    f, b, c, buf = (np.array(x) for x in zip(*stages, strict=True))
    c, buf = c[1:], buf[1:]
    own = one_f_one_b_time(f, b, c, m, buf)
    assert one_f_one_b_time(f, b, c, m, buf, shared_nic=True) >= own * (1 - 1e-12) - 1e-12
    assert one_f_one_b_time(f, b, 0 * c, m, buf, shared_nic=True) == pytest.approx(one_f_one_b_time(f, b, 0 * c, m, buf))


def test_lower_bound_by_hand():
    # one stage: exact. Blocking, 2 stages, M = 3: stage 1 starts after stage 0's first forward (1),
    # is held 3 (f + b) + 2 * 3 c = 9 + 6, and stage 0's last backward follows (2): 18, the replay's time
    assert one_f_one_b_lower_bound([1.0], [2.0], np.zeros(0), 4) == pytest.approx(12.0)
    assert one_f_one_b_lower_bound([1.0, 1.0], [2.0, 2.0], [1.0], 3, [False]) == pytest.approx(18.0)
    assert one_f_one_b_time([1.0, 1.0], [2.0, 2.0], [1.0], 3) == pytest.approx(18.0)
    # buffered, a slow link: 3 activations cross one after another (3 x 5) after stage 0's first
    # forward (1), then microbatch 2's way down and back: c + f1 + b1 + c + b0 = 5 + 1 + 2 + 5 + 2
    assert one_f_one_b_lower_bound([1.0, 1.0], [2.0, 2.0], [5.0], 3, [True]) == pytest.approx(1 + 15 + 1 + 2 + 5 + 2)
    assert one_f_one_b_time([1.0, 1.0], [2.0, 2.0], [5.0], 3, [True]) >= 26.0


def test_buffered_send_hides_behind_the_senders_compute_by_hand():
    # stage 0 (f 1, b 2) is the bottleneck, stage 1 (0.1, 0.2) is fast, 0.5 s per transfer, M = 3.
    # Buffered: stage 0 sends act0 at 1 and computes F1 [1,2]; grad0 arrives at 2.3 (act0 at 1.5,
    # F0 B0 on stage 1 until 1.8, +0.5); act1 leaves at 2.3, B0 [2.3,4.3], F2 [4.3,5.3]; grad1
    # arrived at 3.6, act2 leaves at 5.3, B1 [5.3,7.3]; grad2 arrives at 6.6, B2 [7.3,9.3].
    assert one_f_one_b_time([1, 0.1], [2, 0.2], [0.5], 3, [True]) == pytest.approx(9.3)
    # blocking, each transfer holds stage 0 too: (M-1) (3 + 2 * 0.5) + 3.3 + 2 * 0.5 + the wait
    assert one_f_one_b_time([1, 0.1], [2, 0.2], [0.5], 3, [False]) == pytest.approx(12.0)
    # a transfer longer than the compute it could hide behind is exposed: M (f + b) + waits
    assert one_f_one_b_time([1, 0.1], [2, 0.2], [5.0], 3, [True]) > 3 * 3.0 + 2 * 5.0


def test_a_middle_stages_two_sends_share_its_nic_by_hand():
    # S = 3, M = 2, no compute, buffered, 2 s over boundary 0 and 1 s over boundary 1.
    # Own links (one per boundary and direction): stage 1 gets act0 at 2, sends it on [2,3]; act1
    # arrives at 4 (act0 [0,2], act1 [2,4]); grad0 from stage 2 arrives at 4; stage 1 sends act1
    # [4,5] and grad0 to stage 0 [4,6]; grad1 arrives from stage 2 at 6 (act1 at 5 + 1) and goes
    # to stage 0 on [6,8]. Stage 0 ends at 8.
    assert one_f_one_b_time([0, 0, 0], [0, 0, 0], [2, 1], 2, [True, True]) == pytest.approx(8.0)
    # One NIC per stage, full duplex (its sends share its egress, its receives its ingress):
    # act0 [0,2] and act1 [2,4] into stage 1 (one pair: one after another); act0 on to stage 2
    # [2,3]; grad0, sent by stage 2 at 3, shares stage 1's ingress with act1 (1 s of it left):
    # both at half rate, both land at 5; stage 1 sends act1 to stage 2 and grad0 to stage 0 at 5,
    # sharing its egress: act1 lands at 7, grad0 (1 s left) at 8; grad1 from stage 2 [7,8];
    # grad1 to stage 0 after grad0 (same pair): [8,10]. Stage 0 ends at 10.
    assert one_f_one_b_time([0, 0, 0], [0, 0, 0], [2, 1], 2, [True, True], shared_nic=True) == pytest.approx(10.0)
    # blocking sends never overlap on one stage, so the NIC changes nothing there
    for f, b, c, m in [([1, 0.5, 2], [2, 1, 3], [0.7, 0.3], 4), ([0, 0, 0], [0, 0, 0], [2, 1], 2)]:
        assert one_f_one_b_time(f, b, c, m, shared_nic=True) == pytest.approx(one_f_one_b_time(f, b, c, m))


def test_flows_through_one_nic_share_its_bandwidth_by_hand():
    # S = 3, M = 2, no compute, buffered, 1 s per transfer on both boundaries. act0 [0,1] and
    # act1 [1,2] into stage 1; act0 on to stage 2 [1,2]; grad0 from stage 2 [2,3]. At 3 stage 1
    # sends act1 to stage 2 and grad0 to stage 0 through its one egress: half rate each, both
    # land at 5 (first come, first served would land act1 at 4 and grad0 at 5). grad1 from
    # stage 2 [5,6], on to stage 0 [6,7]: 7 s (6 s first come, first served).
    assert one_f_one_b_time([0, 0, 0], [0, 0, 0], [1, 1], 2, [True, True], shared_nic=True) == pytest.approx(7.0)
    # own links: act1 and grad0 both cross [3,4]; grad1 [4,5] to stage 1 and [5,6] on to stage 0
    assert one_f_one_b_time([0, 0, 0], [0, 0, 0], [1, 1], 2, [True, True]) == pytest.approx(6.0)


def test_with_values_sets_a_constant_on_every_row_and_the_default():
    blocking = SHIPPED_PLATFORMS.with_values(eager_send_bytes=0.0)
    assert {c.eager_send_bytes for c in blocking.platforms.values()} == {0.0} and blocking.default.eager_send_bytes == 0
    assert blocking.for_gpu("GH-96").compute_scale == SHIPPED_PLATFORMS.for_gpu("GH-96").compute_scale
    assert blocking.uncalibrated(["A100-40"]) == ("A100-40",)


def test_a_rank_message_within_the_transport_buffer_is_buffered():
    cfg = SHIPPED_PLATFORMS.for_gpu("GH-96")
    assert cfg.eager_send_bytes == 4 * 2**20 and not cfg.replicated_tp_sends
    # Sailor's engine partitions the activation over the TP ranks: each sends n / tp
    assert pipeline_send_buffered(16 * 2**20, 4, cfg)
    assert not pipeline_send_buffered(16 * 2**20 + 4, 4, cfg)
    assert not pipeline_send_buffered(16 * 2**20, 4, SHIPPED_PLATFORMS.default)  # uncalibrated: blocking


def test_bad_input_is_a_clear_error():
    with pytest.raises(InputError):
        one_f_one_b_time([1, 1], [1, 1], [], 2)
    with pytest.raises(InputError):
        one_f_one_b_time([1], [-1], [], 2)
    with pytest.raises(InputError):
        one_f_one_b_time([1], [1], [], 0)
    with pytest.raises(InputError):
        one_f_one_b_time([1, 1], [1, 1], [0.5], 2, [True, False])
    with pytest.raises(InputError, match="eager_send_bytes"):
        SimConfig(eager_send_bytes=-1.0)


@pytest.mark.parametrize("pattern", ["plan_config_*.json", "mit/plan_config_*.json"])
def test_closed_form_pipeline_matches_the_replay_on_real_plans(pattern):
    """On Sailor's measured plans the simulator's closed form (every transfer blocking) is within
    1% of the replay of the schedule that ran them (so its errors there are not the schedule's)."""
    blocking = SHIPPED_PLATFORMS.with_values(eager_send_bytes=0.0)
    for path in sorted(DATA.glob(pattern)):
        plan = Plan.from_sailor(json.loads(path.read_text()), "OPT-350")
        sim = simulate_plan(plan, config=blocking)
        fb, share, comm = (sim.stage_times.compute, sim.stage_times.forward_share, sim.stage_times.pipeline_send)
        replay = max(
            one_f_one_b_time(fb[:, d] * share[:, d], fb[:, d] * (1 - share[:, d]), comm[1:-1, d], m)
            for d, m in enumerate(plan.microbatches())
        )
        assert sim.pipeline_time_s == pytest.approx(replay, rel=0.01), path.name


def test_simulate_replays_a_replica_with_buffered_sends():
    """MIT N4_D1 (4 stages of TP 8, microbatch 2): each rank sends 2 MiB, buffered; the pipeline
    time is the buffered replay of the simulator's own stage times."""
    plan = Plan.from_sailor(json.loads((DATA / "mit" / "plan_config_N4_D1.json").read_text()), "OPT-350")
    sim = simulate_plan(plan)
    fb, share, comm = (x[:, 0] for x in (sim.stage_times.compute, sim.stage_times.forward_share, sim.stage_times.pipeline_send))
    m = plan.microbatches()[0]
    assert sim.pipeline_time_s == pytest.approx(
        one_f_one_b_time(fb * share, fb * (1 - share), comm[1:-1], m, [True] * 3, shared_nic=True))
    assert sim.pipeline_time_s < one_f_one_b_time(fb * share, fb * (1 - share), comm[1:-1], m)
