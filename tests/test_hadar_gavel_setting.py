"""Hadar's utility and prices, and the Gavel-setting runner: floors, one restart delay for all."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from heteroplan.cluster import Cluster, GPUType, Node, preset
from heteroplan.errors import InputError
from heteroplan.formulations.hadar import (
    completion_utility,
    density_bounds,
    makespan_bound_lp,
    pace_slots,
)
from heteroplan.policies.hadar import HadarPolicy
from heteroplan.policies.registry import make_policy
from heteroplan.sim.hadar_experiments import (
    GavelSetting,
    floors,
    gavel_metrics,
    load_regime,
    makespan_floor,
    simulate_gavel,
)
from heteroplan.solvers import solve
from heteroplan.workload.gavel import generate_workload, load_throughputs
from heteroplan.workload.rigid import RigidJob, rigid_jobs_from_gavel


def two_types(slow: int = 1, fast: int = 1) -> Cluster:
    types = (GPUType("slow", 16, max(slow, 1)), GPUType("fast", 16, max(fast, 1)))
    return Cluster(types, (Node("s0", "slow", slow), Node("f0", "fast", fast)))


def test_utility_and_density_bounds_known_values():
    # pace slots: 100 steps at 1 and 4 steps/s, 10 s slots -> 10 and 3 slots (ceil of 2.5)
    n = pace_slots(np.array([100.0]), np.array([[1.0, 4.0]]), 10.0)
    assert n.tolist() == [[10.0, 3.0]]
    assert pace_slots(np.array([100.0]), np.array([[1.0, 0.0]]), 10.0, delay=5.0)[0, 1] == np.inf
    assert completion_utility(np.array([3.0, 10.0, 25.0]), 10.0).tolist() == [17.0, 10.0, 0.0]
    # W = 2: densities (20 - 10) / 20 = 0.5 at the slow pace, (20 - 3) / 6 at the fast one
    lo, hi = density_bounds(n, np.array([2]))
    assert lo == pytest.approx(0.5) and hi == pytest.approx(17 / 6)


def test_makespan_lp_known_optimum():
    # job a: 600 steps, 1/s slow or 3/s fast; job b: 300 steps on slow only; one GPU of each.
    # b holds the slow GPU 300 s; a runs 200 s on fast -> max(300, 200)... but a may split:
    # slow 1 GPU x T >= 300 + y_as, fast T >= y_af, y_as + 3 y_af >= 600 -> T = 225.
    sol = solve(makespan_bound_lp(np.array([600.0, 300.0]), np.array([[1.0, 3.0], [1.0, 0.0]]),
                                  np.array([1, 1]), np.array([1.0, 1.0])))
    assert sol.objective == pytest.approx(300.0)
    sol = solve(makespan_bound_lp(np.array([900.0, 100.0]), np.array([[1.0, 3.0], [1.0, 0.0]]),
                                  np.array([1, 1]), np.array([1.0, 1.0])))
    # T = 100 + y_as on slow, y_af on fast, y_as + 3 y_af = 900 -> 100 + 900 - 3T = T -> T = 250
    assert sol.objective == pytest.approx(250.0)


def test_a_slower_type_is_used_when_it_finishes_sooner():
    # 'long' holds the only fast GPU (100 steps/slot) in slots 0-10 (30 s restore + 1000 s; it
    # is the shorter job, so shortest-first re-planning keeps it). 'x' (2000 steps) arrives in slot 1; every
    # (re)start costs 30 s. Waiting for the fast GPU finishes x at 1100 + 30 + 2000 = 3130 s.
    # Running on the slow GPU meanwhile costs one more restore, on the slow GPU (its restore on
    # the fast one is paid either way): any slow rate gains. The primal-dual rule alone (no
    # idle fill) takes the slow GPU at 0.8 steps/s, whose gain clears its price, not at 0.02;
    # the idle fill (price 0 for this slot's idle GPU) takes it at both: at 0.02, 70 s x 0.02
    # + 9 slots x 2 = 19.4 steps before slot 11, so x ends at 1100 + 30 + 1980.6 = 3110.6 s.
    for slow_rate, fill, expect_slow, end in ((0.8, False, True, None), (0.02, False, False, 3130.0),
                                              (0.8, True, True, None), (0.02, True, True, 3110.6)):
        cluster = two_types()
        jobs = [RigidJob("long", 1, 1000.0, 0.0, {"slow": 0.0, "fast": 1.0}),
                RigidJob("x", 1, 2000.0, 100.0, {"slow": slow_rate, "fast": 1.0})]
        res = simulate_gavel(jobs, cluster, HadarPolicy(slot=100.0, order="shortest", fill_idle=fill),
                             GavelSetting(restart_delay_s=30.0), round_length=100.0)
        first = dict(res.schedule[1][1])
        assert res.completion["long"] == pytest.approx(1030.0)
        assert ("x" in first and first["x"].gpu_type == "slow") == expect_slow
        assert res.completion["x"] < 3130.0 - 1e-6 if end is None else res.completion["x"] == pytest.approx(end)


def test_idle_gpus_go_to_queued_jobs_by_saving_per_gpu():
    # One slow and one fast GPU; 'a' holds the fast one (the shortest job). Queued: 'y' runs at
    # 0.1 of its best on the slow GPU, 'z' at 0.3 (both 1 GPU): the idle slow GPU saves z 0.3 of
    # a slot per slot and y 0.1, so z gets it (listed after y, so not by list order). Without
    # the fill neither clears the slow GPU's price and it stays idle.
    cluster = two_types()
    jobs = [RigidJob("a", 1, 500.0, 0.0, {"slow": 0.0, "fast": 1.0}),
            RigidJob("y", 1, 3000.0, 0.0, {"slow": 0.1, "fast": 1.0}),
            RigidJob("z", 1, 3000.0, 0.0, {"slow": 0.3, "fast": 1.0})]
    for fill in (True, False):
        res = simulate_gavel(jobs, cluster, HadarPolicy(slot=100.0, order="shortest", fill_idle=fill), GavelSetting(),
                             round_length=100.0)
        first = dict(res.schedule[0][1])
        assert first["a"].gpu_type == "fast" and "y" not in first
        assert ("z" in first and first["z"].gpu_type == "slow") == fill
        busy = [sum(a.gpu_type == "slow" for a in allocs.values()) for _, allocs in res.schedule]
        waiting = [len(allocs) < len([j for j in jobs if j.job_id not in res.completion or
                                      res.completion[j.job_id] > now]) for now, allocs in res.schedule]
        if fill:  # the slow GPU works in every round in which a job waits
            assert all(b == 1 for b, w in zip(busy, waiting, strict=True) if w)


def test_one_restart_delay_for_every_policy():
    # One job, one GPU: every policy finishes it after its work plus one restore.
    cluster = Cluster((GPUType("g", 16, 1),), (Node("n0", "g", 1),))
    job = RigidJob("a", 1, 1000.0, 0.0, {"g": 1.0})
    for name in ("gavel", "yarn-cs", "hadar", "hadar-committed", "tiresias"):
        policy = make_policy(name, round_length=100.0)
        res = simulate_gavel([job], cluster, policy, GavelSetting(restart_delay_s=50.0), round_length=100.0)
        assert res.completion["a"] == pytest.approx(1050.0), name
        assert res.jobs[0].restarts == 0  # the first start pays the restore but is not a restart
    with pytest.raises(InputError, match="restart_delay_s"):
        GavelSetting(restart_delay_s=-1.0)
    with pytest.raises(InputError, match="window"):
        GavelSetting(window=(5, 2))


def test_floors_bound_every_policy_on_a_gavel_workload():
    cluster = preset("gavel-108")
    jobs = rigid_jobs_from_gavel(generate_workload(20, None, seed=3, duration_scale=0.05), load_throughputs())
    setting = GavelSetting(restart_delay_s=30.0)
    fl = floors(jobs, cluster, setting)
    assert fl.makespan_h * 3600 == pytest.approx(makespan_floor(jobs, cluster, 30.0))
    for name in ("gavel", "yarn-cs", "hadar", "hadare"):
        policy = make_policy(name)
        policy.name = name
        res = simulate_gavel(jobs, cluster, policy, setting)
        m = gavel_metrics(res, jobs, cluster, setting, policy.forking)
        assert m["makespan_h"] >= m["floor_makespan_h"] * (1 - 1e-9), name
        if policy.forking:  # forks beat a job's solo time: only the LP part bounds HadarE
            assert m["floor_makespan_h"] == pytest.approx(floors(jobs, cluster, setting, True).makespan_h)
            assert m["floor_makespan_h"] <= fl.makespan_h
        else:
            assert m["floor_makespan_h"] == pytest.approx(fl.makespan_h)
            assert m["avg_jct_h"] >= fl.avg_jct_h * (1 - 1e-9), name
        for k in cluster.type_names:
            assert 0.0 <= m[f"util_{k}"] <= 1.0


def test_regime_files_load():
    root = Path(__file__).resolve().parents[1] / "examples" / "sweeps"
    files = sorted(p for p in root.glob("hadar_*.toml") if "[gavel_setting]" in p.read_text())
    assert len(files) == 3
    for path in files:
        regime = load_regime(path)
        assert regime.spec.cells() and regime.spec.simulator == "slotted"
        assert regime.setting.restart_delay_s == 30.0
