"""Jupyter reprs show the right numbers (escaped); 1F1B timelines respect the schedule's rules;
Pareto fronts are non-dominated, monotone and match the planner's ends and an exhaustive oracle."""

from __future__ import annotations

import html
from html.parser import HTMLParser
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from heteroplan import plots  # noqa: E402
from heteroplan.cluster import SAILOR_GPU_TYPES  # noqa: E402
from heteroplan.errors import InputError  # noqa: E402
from heteroplan.perf.sailor_profiles import load_model_profile  # noqa: E402
from heteroplan.planner import Plan, ReplicaGroup, SearchOptions, Stage, plan_job, simulate_plan  # noqa: E402
from heteroplan.planner.model.schedule import one_f_one_b_order, pipeline_schedule, schedule_1f1b  # noqa: E402
from heteroplan.planner.model.sim_config import SHIPPED_PLATFORMS  # noqa: E402
from heteroplan.planner.pareto import ParetoPoint, non_dominated, pareto_front  # noqa: E402
from heteroplan.planner.search.brute_force import enumerate_plans  # noqa: E402
from heteroplan.policies.base import Allocation  # noqa: E402

DATA = Path(__file__).parent / "data" / "sailor"
A, V = "A100-40", "V100-16"
ZA, ZW = "us-central1-a", "us-west1-b"
GEO_POOL = {(A, ZA): 8, (V, ZA): 8, (A, ZW): 8}


class _Tables(HTMLParser):
    """Cells of every table in a snippet: ``tables[i][row][col]`` (header row included), unescaped."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: list[list[list[str]]] = []
        self._cell: list[str] | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def _records(table: list[list[str]]) -> list[dict[str, str]]:
    return [dict(zip(table[0], row, strict=True)) for row in table[1:]]


@pytest.fixture(scope="module")
def geo_result():
    return plan_job("OPT-350", 256, GEO_POOL)


@pytest.fixture(scope="module")
def geo_front():
    return pareto_front("OPT-350", 256, GEO_POOL, n=6, sweep="both")


# ------------------------------------------------------------------ reprs
def test_plan_repr_rows_counts_and_escaping():
    plan = Plan(
        "opt<x>",
        60,
        2,
        (
            Stage(0, 10, (ReplicaGroup("A&B", "z<1>", 2, 2), ReplicaGroup(V, ZA, 1, 1))),
            Stage(10, 26, (ReplicaGroup(A, ZW, 4, 3),)),
        ),
        microbatches_per_replica=(12, 12, 6),
    )
    text = plan._repr_html_()
    assert "<x>" not in text and "z<1>" not in text and "A&B" not in text
    assert html.escape("opt<x>") in text and "A&amp;B" in text
    rows = _records(_Tables(text).tables[0])
    assert [(r["stage"], r["layers"], r["GPU type"], r["zone"], r["TP"], r["replicas"], r["GPUs"]) for r in rows] == [
        ("0", "0-9", "A&B", "z<1>", "2", "2", "4"),
        ("0", "0-9", V, ZA, "1", "1", "1"),
        ("1", "10-25", A, ZW, "4", "3", "12"),
    ]
    assert sum(int(r["GPUs"]) for r in rows) == plan.num_gpus == 17
    assert "PP 2 x DP 3, 17 GPUs" in text and "microbatches per replica: 12 (x2), 6" in text


def test_plan_result_repr_numbers(geo_result):
    res = geo_result
    metrics, stages = _Tables(res._repr_html_()).tables
    (m,) = _records(metrics)
    assert float(m["iteration time (s)"]) == pytest.approx(res.iteration_time_s, rel=1e-3)
    assert float(m["throughput (iter/s)"]) == pytest.approx(res.throughput_iter_s, rel=1e-3)
    assert float(m["$/iteration"]) == pytest.approx(res.cost_per_iteration_usd, rel=1e-3)
    assert float(m["peak memory (GB/GPU)"]) == pytest.approx(res.peak_memory_gb, rel=1e-2)
    rows = _records(stages)
    assert sum(int(r["GPUs"]) for r in rows) == res.plan.num_gpus
    mem = {int(r["stage"]): float(r["memory (GB/GPU)"]) for r in rows}
    assert [mem[s] for s in range(res.plan.pp)] == pytest.approx(res.memory_per_gpu_gb, rel=1e-2)
    assert {(r["GPU type"], r["zone"]) for r in rows} == set(res.plan.gpus_by_type_zone())


def test_allocation_repr():
    alloc = Allocation("v100<&>", 5, (("node<1>", 4), ("n2", 1)))
    text = alloc._repr_html_()
    assert "<&>" not in text and "node<1>" not in text
    rows = _records(_Tables(text).tables[0])
    assert [(r["node"], int(r["GPUs"])) for r in rows] == [("node<1>", 4), ("n2", 1)]
    assert "5 x v100&lt;&amp;&gt; on 2 node(s)" in text
    assert "not placed" in Allocation("k80", 2)._repr_html_()


def test_cluster_and_pareto_reprs(geo_front):
    from heteroplan.cluster import preset

    cluster = preset("sia-64")
    rows = _records(_Tables(cluster._repr_html_()).tables[0])
    assert {r["type"]: int(r["GPUs"]) for r in rows} == cluster.capacity()
    rows = _records(_Tables(geo_front._repr_html_()).tables[0])
    assert len(rows) == len(geo_front)
    assert [int(r["GPUs"]) for r in rows] == [p.result.plan.num_gpus for p in geo_front]


# ---------------------------------------------------------------- schedule
def _check_schedule(f, b, c, M):
    sched = schedule_1f1b(f, b, c, M)
    S = len(f)
    c = np.asarray(c, dtype=float).copy()
    c[0] = c[S] = 0
    eps = 1e-9
    fs, fe, bs, be = sched.forward_start, sched.forward_end, sched.backward_start, sched.backward_end
    assert np.allclose(fe - fs, np.asarray(f)[:, None]) and np.allclose(be - bs, np.asarray(b)[:, None])
    for s in range(S):
        # busy intervals of the stage: receive, compute, send; in 1F1B order, never overlapping
        busy = []
        for kind, m in one_f_one_b_order(S, M, s):
            if kind == "F":
                busy.append((fs[s, m] - c[s], fe[s, m] + c[s + 1]))
            else:
                busy.append((bs[s, m] - c[s + 1], be[s, m] + c[s]))
        starts = np.array([x for x, _ in busy])
        ends = np.array([y for _, y in busy])
        assert np.all(starts[1:] >= ends[:-1] - eps), f"overlap on stage {s}"
        assert starts[0] >= -eps
    # dependencies: forward flows down the pipeline, backward flows up
    assert np.all(fs[1:] >= fe[:-1] + c[1:S, None] - eps)
    assert np.all(bs[:-1] >= be[1:] + c[1:S, None] - eps)
    assert np.all(bs[-1] >= fe[-1] - eps)
    # no op can finish before its stage did all its work, nor microbatch 0 before its critical path
    per_stage = M * (np.asarray(f) + np.asarray(b) + 2 * (c[:-1] + c[1:]))
    assert sched.makespan >= per_stage.max() - 2 * (c.max()) - eps
    assert sched.makespan >= np.sum(f) + np.sum(b) + 2 * c.sum() - eps
    return sched


def test_1f1b_order_and_in_flight_microbatches():
    assert one_f_one_b_order(4, 6, 0) == [("F", 0), ("F", 1), ("F", 2), ("F", 3), ("B", 0), ("F", 4), ("B", 1),
                                          ("F", 5), ("B", 2), ("B", 3), ("B", 4), ("B", 5)]
    assert one_f_one_b_order(4, 2, 3) == [("F", 0), ("B", 0), ("F", 1), ("B", 1)]
    for S in range(1, 7):
        for M in range(1, 9):
            for s in range(S):
                order = one_f_one_b_order(S, M, s)
                assert sorted(order) == sorted([("F", m) for m in range(M)] + [("B", m) for m in range(M)])
                in_flight = np.cumsum([1 if k == "F" else -1 for k, _ in order])
                # the simulator's memory model: stage s holds min(S - s, M) microbatches at peak
                assert in_flight.max() == min(S - s, M) and in_flight.min() >= 0


@settings(max_examples=60, deadline=None)
@given(
    S=st.integers(1, 6),
    M=st.integers(1, 10),
    data=st.data(),
)
def test_schedule_respects_1f1b_rules(S, M, data):
    times = st.floats(0.0, 5.0, allow_nan=False)
    f = data.draw(st.lists(times, min_size=S, max_size=S))
    b = data.draw(st.lists(times, min_size=S, max_size=S))
    c = data.draw(st.lists(st.floats(0.0, 2.0), min_size=S + 1, max_size=S + 1))
    _check_schedule(f, b, c, M)


@pytest.mark.parametrize("S,M", [(1, 1), (1, 7), (3, 2), (4, 8), (8, 4), (6, 20)])
def test_uniform_stages_without_comm_take_m_plus_s_minus_1_steps(S, M):
    sched = _check_schedule([1.0] * S, [2.0] * S, [0.0] * (S + 1), M)
    assert sched.makespan == pytest.approx((M + S - 1) * 3.0)


@pytest.mark.parametrize("M", [1, 2, 5, 16])
def test_two_uniform_stages_match_simulator_closed_form(M):
    f, b, c = 1.0, 2.5, 0.4
    sched = _check_schedule([f, f], [b, b], [0.0, c, 0.0], M)
    sigma = f + b + 2 * c
    assert sched.makespan == pytest.approx((M - 1) * sigma + 2 * (f + b) + 2 * c)


def test_schedules_of_real_plans_close_to_simulator():
    """On Sailor's 15 validation plans the explicit schedule is within 1% of the closed form
    (every transfer blocking, as the schedule lays them out)."""
    for path in sorted(DATA.glob("plan_config_*.json")):
        sched = pipeline_schedule(Plan.from_json(path), config=SHIPPED_PLATFORMS.with_values(eager_send_bytes=0.0))
        assert abs(sched.makespan / sched.simulated_time - 1) < 0.01, path.name
        assert sched.makespan <= sched.simulated_time * (1 + 1e-9)


def test_pipeline_schedule_uses_slowest_replica_and_plan_numbers(geo_result):
    plan = geo_result.plan
    sim = simulate_plan(plan)
    sched = pipeline_schedule(geo_result)
    assert sched.simulated_time == pytest.approx(sim.pipeline_time_s)
    assert sched.num_stages == plan.pp and sched.num_microbatches == plan.microbatches()[sched.replica]
    fb = sim.stage_times.compute[:, sched.replica]
    assert sched.forward + sched.backward == pytest.approx(fb)
    assert np.all(sched.forward > 0) and np.all(sched.forward < fb)  # forward is the smaller part
    _check_schedule(sched.forward, sched.backward, sched.comm, sched.num_microbatches)
    with pytest.raises(InputError, match="replica"):
        pipeline_schedule(plan, replica=plan.dp)
    with pytest.raises(InputError, match="plan_or_result"):
        pipeline_schedule("not a plan")
    with pytest.raises(InputError, match="num_microbatches"):
        schedule_1f1b([1.0], [1.0], [0.0, 0.0], 0)
    with pytest.raises(InputError, match="forward"):
        schedule_1f1b([-1.0], [1.0], [0.0, 0.0], 2)
    with pytest.raises(InputError, match="comm"):
        schedule_1f1b([1.0, 1.0], [1.0, 1.0], [0.0, 0.0], 2)


def _bars(ax, label):
    (container,) = [c for c in ax.containers if c.get_label() == label]
    return [(p.get_y() + p.get_height() / 2, p.get_x(), p.get_x() + p.get_width()) for p in container.patches]


def test_timeline_bars_match_schedule(geo_result):
    fig = plots.pipeline_timeline(geo_result)
    ax = fig.axes[0]
    sched = pipeline_schedule(geo_result)
    S, M = sched.num_stages, sched.num_microbatches
    fwd, bwd = _bars(ax, "forward"), _bars(ax, "backward")
    assert len(fwd) == len(bwd) == S * M
    for s in range(S):
        row = sorted([(x0, x1) for y, x0, x1 in fwd + bwd if round(y) == s])
        assert len(row) == 2 * M
        assert all(b0 >= a1 - 1e-9 for (_, a1), (b0, _) in zip(row, row[1:], strict=False)), "bars overlap"
        assert sorted(x0 for y, x0, _ in fwd if round(y) == s) == pytest.approx(sorted(sched.forward_start[s]))
        assert sorted(x0 for y, x0, _ in bwd if round(y) == s) == pytest.approx(sorted(sched.backward_start[s]))
    assert _bars(ax, "comm")  # a two-zone pipeline has transfers to draw
    plt.close(fig)
    fig = plots.pipeline_timeline(sched, max_microbatches=3)
    assert len(_bars(fig.axes[0], "forward")) == S * 3
    plt.close(fig)
    with pytest.raises(InputError, match="max_microbatches"):
        plots.pipeline_timeline(sched, max_microbatches=0)


def test_a_replayed_replica_is_laid_out_as_the_replay_that_priced_it():
    """MIT N4_D1 (4 stages of TP 8, 2 MiB per rank: buffered sends) is priced by the 1F1B replay:
    its timeline ends when the simulator says (the blocking layout runs about 30% longer), ops
    on a stage never overlap, every transfer lands before the op that needs it, and the plot
    draws one bar per transfer under its sender's row."""
    plan = Plan.from_sailor(__import__("json").loads((DATA / "mit" / "plan_config_N4_D1.json").read_text()), "OPT-350")
    sim = simulate_plan(plan)
    sched = pipeline_schedule(plan)
    S, M = sched.num_stages, sched.num_microbatches
    assert sched.makespan == pytest.approx(sim.pipeline_time_s, rel=1e-12)
    blocking = schedule_1f1b(sched.forward, sched.backward, sched.comm, M)
    assert blocking.makespan > 1.1 * sched.makespan
    assert sched.transfers.shape == (2 * M * (S - 1), 5)
    for s in range(S):
        ops = sorted(zip(np.r_[sched.forward_start[s], sched.backward_start[s]],
                         np.r_[sched.forward_end[s], sched.backward_end[s]], strict=True))
        assert all(b0 >= a1 - 1e-9 for (_, a1), (b0, _) in zip(ops, ops[1:], strict=False)), f"stage {s} overlaps"
    for sender, receiver, mb, on_wire, landed in sched.transfers:
        s, o, m = int(sender), int(receiver), int(mb)
        assert landed >= on_wire + sched.comm[max(s, o)] - 1e-9  # never faster than the link's full rate
        if o == s + 1:  # an activation: sent after the forward, before the next stage's forward
            assert on_wire >= sched.forward_end[s, m] - 1e-9 and sched.forward_start[o, m] >= landed - 1e-9
        else:  # a gradient: after the backward, before the previous stage's backward
            assert on_wire >= sched.backward_end[s, m] - 1e-9 and sched.backward_start[o, m] >= landed - 1e-9
    fig = plots.pipeline_timeline(sched)
    comm = _bars(fig.axes[0], "comm")
    assert len(comm) == len(sched.transfers)
    drawn = np.array(sorted((round(y), x0, x1) for y, x0, x1 in comm))
    assert drawn == pytest.approx(np.array(sorted((t[0], t[3], t[4]) for t in sched.transfers)))
    plt.close(fig)


# ------------------------------------------------------------------ pareto
def _dominates(p, q) -> bool:
    return p.cost <= q.cost and p.throughput >= q.throughput and (p.cost < q.cost or p.throughput > q.throughput)


def test_front_is_non_dominated_monotone_and_complete(geo_front):
    front, evaluated = list(geo_front), geo_front.evaluated
    assert len(front) >= 3 and len(evaluated) > len(front)
    for p in front:
        assert not any(_dominates(q, p) for q in evaluated)
    for q in evaluated:  # everything found is on the front or dominated by (or equal to) a front point
        assert any(_dominates(p, q) or (p.cost, p.throughput) == (q.cost, q.throughput) for p in front)
    costs = [p.cost for p in front]
    thr = [p.throughput for p in front]
    assert all(a < b for a, b in zip(costs, costs[1:], strict=False))
    assert all(a < b for a, b in zip(thr, thr[1:], strict=False))
    assert len({(p.cost, p.throughput) for p in front}) == len(front)


def test_front_ends_match_unconstrained_planner(geo_front):
    fastest = plan_job("OPT-350", 256, GEO_POOL, objective="throughput")
    cheapest = plan_job("OPT-350", 256, GEO_POOL, objective="cost")
    assert geo_front.fastest.throughput == pytest.approx(fastest.throughput_iter_s, rel=1e-12)
    assert geo_front.fastest.cost <= fastest.cost_per_iteration_usd * (1 + 1e-12)
    assert geo_front.cheapest.cost == pytest.approx(cheapest.cost_per_iteration_usd, rel=1e-12)
    zones = {z for _, z in geo_front.fastest.result.plan.gpus_by_type_zone()}
    assert len(zones) == 2  # the fastest plan on this pool spans both zones


@pytest.mark.parametrize("pool", [{(A, ZA): 2, (V, ZA): 4, (A, ZW): 2}, {(A, ZA): 8, (V, ZA): 8}])
def test_front_equals_exhaustive_front_on_small_pool(pool):
    """Budgets at the exact front's costs recover the exact front (unpruned search vs enumeration)."""
    gbs, mbs = 128, (2,)
    profile = load_model_profile("OPT-350")
    types = {t.name: t for t in SAILOR_GPU_TYPES}
    everything = []
    for plan in enumerate_plans(profile, gbs, pool, types, max_pp=2, microbatch_sizes=mbs):
        sim = simulate_plan(plan, profile=profile, gpu_types=types)
        if all(m <= types[s.replicas[0].gpu_type].memory_gb for m, s in zip(sim.memory_per_stage_gb, plan.stages,
                                                                            strict=True)):
            everything.append(ParetoPoint(sim.cost_per_iteration_usd, sim.throughput_iter_s, None))
    exact = non_dominated(everything)
    assert len(exact) >= 4  # a front with several points (4 on pool0 since the per-platform simulator)
    opts = SearchOptions(max_pp=2, microbatch_sizes=mbs, prune=False, mixed_stages=False)
    front = pareto_front("OPT-350", gbs, pool, budgets=[p.cost * (1 + 1e-9) for p in exact], options=opts)
    assert [p.throughput for p in front] == pytest.approx([p.throughput for p in exact], rel=1e-9)
    assert [p.cost for p in front] == pytest.approx([p.cost for p in exact], rel=1e-9)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(1, 8), st.integers(1, 8)), min_size=1, max_size=25))
def test_non_dominated_matches_pairwise_definition(pairs):
    pts = [ParetoPoint(float(c), float(t), None) for c, t in pairs]
    got = {(p.cost, p.throughput) for p in non_dominated(pts)}
    want = {(p.cost, p.throughput) for p in pts if not any(_dominates(q, p) for q in pts)}
    assert got == want
    assert len(non_dominated(pts)) == len(want)


def test_non_dominated_merges_ties_within_tolerance():
    pts = [ParetoPoint(1.0, 1.0, "a"), ParetoPoint(1.0 + 1e-12, 2.0, "b"), ParetoPoint(2.0, 2.0 + 1e-12, "c")]
    assert [p.result for p in non_dominated(pts)] == ["b"]


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"n": 1}, "n"),
        ({"n": True}, "n"),
        ({"sweep": "cheap"}, "sweep"),
        ({"budgets": []}, "budgets"),
        ({"budgets": [0.1, -1.0]}, "budgets"),
        ({"budgets": "0.1"}, "budgets"),
        ({"min_throughputs": [float("nan")]}, "min_throughputs"),
        ({"objective": "cost"}, "objective"),
    ],
)
def test_pareto_bad_arguments(kwargs, field):
    with pytest.raises(InputError) as err:
        pareto_front("OPT-350", 64, {(A, ZA): 4}, **kwargs)
    assert err.value.field == field


def test_front_plot_has_one_marker_per_point(geo_front):
    fig = plots.cost_throughput_front(geo_front)
    ax = fig.axes[0]
    (line,) = [ln for ln in ax.lines if ln.get_label() == "Pareto front"]
    assert list(line.get_xdata()) == [p.throughput for p in geo_front]
    assert list(line.get_ydata()) == [p.cost for p in geo_front]
    (scatter,) = ax.collections
    assert len(scatter.get_offsets()) == len(geo_front.evaluated)
    plt.close(fig)
    fig = plots.cost_throughput_front([(2.0, 3.0), (1.0, 1.0)])
    (line,) = fig.axes[0].lines
    assert list(line.get_xdata()) == [1.0, 3.0]
    plt.close(fig)
    with pytest.raises(InputError, match="points"):
        plots.cost_throughput_front([("a", 1)])
