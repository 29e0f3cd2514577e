"""HiGHS against independent oracles (scipy's milp, CBC via pulp, brute force, cvxpy) and statuses."""

from __future__ import annotations

import itertools
import math
import os
import subprocess
import sys
from pathlib import Path

import highspy
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from heteroplan.errors import InputError, ModelError
from heteroplan.milp import Model
from heteroplan.solvers import (
    Backend,
    Capabilities,
    SolveStatus,
    backend_names,
    get_backend,
    register_backend,
    registry,
    solve,
    to_cvxpy,
    to_pulp,
    write_lp,
    write_mps,
)


def random_milp(seed: int, n: int, m: int, integer_share: float = 0.7) -> Model:
    """Bounded random MILP with mixed integer/continuous variables and mixed row senses."""
    rng = np.random.default_rng(seed)
    model = Model(f"rand{seed}")
    n_int = max(1, int(n * integer_share))
    x = model.add_variables("x", n_int, lb=0, ub=rng.integers(1, 4, n_int), integer=True)
    y = model.add_variables("y", n - n_int, lb=-2.0, ub=3.0) if n > n_int else None
    A = rng.integers(-3, 6, (m, n_int)).astype(float)
    expr = A @ x
    if y is not None:
        expr = expr + rng.normal(size=(m, n - n_int)) @ y
    model.add_constraints(expr <= rng.integers(2, 12, m).astype(float), "le")
    model.add_constraints(x.sum() >= 1, "atleast")
    obj = (x * rng.normal(size=n_int)).sum()
    if y is not None:
        obj = obj + (y * rng.normal(size=n - n_int)).sum()
    (model.maximize if seed % 2 else model.minimize)(obj)
    return model


def _close(a: float, b: float, rel: float = 1e-6) -> bool:
    return abs(a - b) <= rel * max(1.0, abs(a), abs(b))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 100_000), n=st.integers(2, 12), m=st.integers(1, 6))
def test_highs_agrees_with_scipy_and_cbc(seed: int, n: int, m: int) -> None:
    model = random_milp(seed, n, m)
    ref = solve(model, mip_gap=0)
    for backend in ("scipy", "cbc"):
        other = solve(model, backend=backend, mip_gap=0)
        assert (ref.status is SolveStatus.OPTIMAL) == (other.status is SolveStatus.OPTIMAL), backend
        if ref.status is SolveStatus.OPTIMAL:
            assert _close(ref.objective, other.objective), (backend, ref.objective, other.objective)
    if ref.has_solution:
        assert model.violation(model.pack(ref.values)) < 1e-6


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 100_000), n=st.integers(1, 10), m=st.integers(1, 4))
def test_highs_equals_brute_force_on_tiny_binary_problems(seed: int, n: int, m: int) -> None:
    rng = np.random.default_rng(seed)
    W = rng.integers(0, 10, (m, n)).astype(float)
    cap = rng.integers(0, 20, m).astype(float)
    v = rng.normal(size=n)
    model = Model()
    x = model.binary("x", n)
    model.add_constraints(W @ x <= cap, "cap")
    model.maximize(x @ v)
    best = max(
        float(np.dot(v, z))
        for z in (np.array(bits) for bits in itertools.product((0, 1), repeat=n))
        if np.all(W @ z <= cap)
    )
    sol = solve(model, mip_gap=0)
    assert sol.status is SolveStatus.OPTIMAL
    assert _close(sol.objective, best, 1e-9)
    assert np.all(W @ sol["x"] <= cap + 1e-9)


def test_lp_matches_cvxpy_clarabel() -> None:
    rng = np.random.default_rng(3)
    model = Model()
    x = model.continuous("x", 8, lb=0, ub=5)
    model.add_constraints(rng.random((4, 8)) @ x <= 3, "le")
    model.add_constraints(x[:2].sum() == 1, "eq")
    model.maximize(x @ rng.random(8))
    ref = solve(model)
    prob, _ = to_cvxpy(model)
    prob.solve(solver="CLARABEL")
    assert ref.optimal and ref.gap == 0
    assert _close(ref.objective, prob.value, 1e-6)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(2, 12), m=st.integers(1, 6))
def test_lp_algorithms_agree_on_relaxations(seed: int, n: int, m: int) -> None:
    model = random_milp(seed, n, m)
    ref = solve(model, relax=True, algorithm="simplex")
    for algorithm in ("simplex-no-presolve", "ipm"):
        other = solve(model, relax=True, algorithm=algorithm)
        assert other.status is ref.status
        if ref.optimal:
            assert _close(other.objective, ref.objective)
            sf, x = model.to_standard_form(), model.pack(other.values)
            ax = sf.A @ x  # feasible for the relaxation: rows and bounds (integrality dropped)
            assert np.all(ax <= sf.row_ub + 1e-6) and np.all(ax >= sf.row_lb - 1e-6)
            assert np.all(x <= sf.col_ub + 1e-6) and np.all(x >= sf.col_lb - 1e-6)


def test_infeasible_and_unbounded_statuses_carry_no_values() -> None:
    m = Model()
    y = m.continuous("y", 2)
    m.add_constraints(y.sum() >= 3, "lo")
    m.add_constraints(y.sum() <= 1, "hi")
    m.minimize(y.sum())
    sol = solve(m)
    assert sol.status is SolveStatus.INFEASIBLE and not sol.has_solution
    with pytest.raises(ModelError, match="no solution"):
        _ = sol["y"]
    u = Model()
    z = u.continuous("z", 2, lb=-np.inf)
    u.minimize(z.sum())
    assert solve(u).status in (SolveStatus.UNBOUNDED, SolveStatus.INFEASIBLE_OR_UNBOUNDED)


def hard_knapsack(n: int = 400, k: int = 15, seed: int = 0) -> Model:
    rng = np.random.default_rng(seed)
    w = rng.integers(20, 100, (k, n))
    v = w.sum(0) / k + rng.integers(-5, 5, n)
    m = Model("hard")
    x = m.binary("x", n)
    m.add_constraints(w @ x <= w.sum(1) / 2, "cap")
    m.maximize(x @ v.astype(float))
    return m


def test_time_limit_returns_feasible_incumbent_and_says_so() -> None:
    m = hard_knapsack()
    sol = solve(m, time_limit=0.3)
    assert sol.status is SolveStatus.TIME_LIMIT
    assert sol.has_solution and m.violation(m.pack(sol.values)) == 0
    assert sol.bound >= sol.objective  # maximization: bound above incumbent
    assert sol.gap > 0 and "time limit" in sol.summary()


def test_warm_start_and_relaxation_bound() -> None:
    m = random_milp(11, 10, 4)
    full = solve(m, mip_gap=0)
    relaxed = solve(m, relax=True)
    assert relaxed.optimal
    # The relaxation bounds the MILP optimum in the objective's direction.
    if m.maximize_objective:
        assert relaxed.objective >= full.objective - 1e-9
    else:
        assert relaxed.objective <= full.objective + 1e-9
    warm = solve(m, warm_start=full.values, mip_gap=0)
    assert _close(warm.objective, full.objective)


@pytest.mark.parametrize("maximize", [True, False])
def test_lp_row_duals_per_block(maximize: bool) -> None:
    # max x + y s.t. x + 2y <= 4, x <= 3: optimum (3, 0.5); each row's bound is worth 0.5 per unit
    m = Model()
    x = m.add_variables("x", 2, lb=0.0)
    m.add_constraints(x[0] + 2 * x[1] <= 4.0, "mixed")
    m.add_constraints(x[0] <= 3.0, "cap")
    if maximize:
        m.maximize(x[0] + x[1])
    else:
        m.minimize(-x[0] - x[1])
    sol = solve(m)
    sign = 1.0 if maximize else -1.0
    assert sol.duals["mixed"].shape == sol.duals["cap"].shape == ()  # scalar rows
    np.testing.assert_allclose(sign * sol.duals["mixed"], [0.5], atol=1e-9)
    np.testing.assert_allclose(sign * sol.duals["cap"], [0.5], atol=1e-9)
    m.variables["x"].integer = True  # a MILP reports none; its relaxation does
    assert solve(m).duals == {}
    np.testing.assert_allclose(sign * solve(m, relax=True).duals["cap"], [0.5], atol=1e-9)


def test_exports_round_trip(tmp_path) -> None:
    m = random_milp(5, 8, 3)
    ref = solve(m, mip_gap=0)
    for path in (write_lp(m, tmp_path / "m"), write_mps(m, tmp_path / "m")):
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        h.readModel(str(path))
        h.setOptionValue("mip_rel_gap", 0.0)
        h.run()
        assert _close(h.getInfo().objective_function_value, ref.objective), path.suffix
    prob, xs = to_pulp(m)
    assert len(xs) == m.num_vars and len(prob.constraints) >= m.num_rows


def _facility_model():
    m = Model("facility")
    opened = m.binary("open", 4)
    flow = m.continuous("flow", (4, 3), ub=10)
    m.add_constraints(flow.sum(axis=0) >= np.array([3.0, 4.0, 5.0]), "demand")
    m.add_constraints(flow.sum(axis=1) <= 10 * opened, "capacity")
    m.minimize(7 * opened.sum() + flow.sum())
    return m


def test_exports_keep_names_and_read_back_to_the_same_model(tmp_path) -> None:
    from heteroplan.solvers.exports import file_names

    m = _facility_model()
    ref = solve(m, mip_gap=0)
    cols, rows = file_names(m.variable_names()), file_names(m.row_names())
    assert cols[:2] == ["open(0)", "open(1)"] and "flow(1,2)" in cols and rows[-1] == "capacity(3)"
    for path in (write_lp(m, tmp_path / "m"), write_mps(m, tmp_path / "m")):
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        assert h.readModel(str(path)) == highspy.HighsStatus.kOk
        lp = h.getLp()
        assert (lp.num_col_, lp.num_row_) == (m.num_vars, m.num_rows), path.suffix
        assert [h.getColName(j)[1] for j in range(m.num_vars)] == cols, path.suffix
        assert [h.getRowName(i)[1] for i in range(m.num_rows)] == rows, path.suffix
        h.setOptionValue("mip_rel_gap", 0.0)
        h.run()
        assert _close(h.getInfo().objective_function_value, ref.objective), path.suffix
        assert "c0" not in path.read_text().split()


def test_file_names_are_one_to_one_and_valid() -> None:
    from heteroplan.solvers.exports import file_names

    names = file_names(["a b[0]", "a_b(0)", "1x", "e1", "x[1,2]", "é"])
    assert len(set(names)) == len(names)
    assert names[0] == "a_b(0)" and names[1].startswith("a_b(0)~")
    assert names[2] == "_1x" and names[3] == "_e1" and names[4] == "x(1,2)" and names[5] == "_"


def test_integer_blocks_come_back_as_integers() -> None:
    m = _facility_model()
    for backend in ("highs", "scipy"):
        sol = solve(m, backend=backend, mip_gap=0)
        opened = sol["open"]
        assert opened.dtype == np.int64, backend
        assert set(opened.tolist()) <= {0, 1} and not np.signbit(opened).any()
        assert sol["flow"].dtype == np.float64
    assert solve(m, relax=True)["open"].dtype == np.float64  # the relaxation: fractions allowed


def test_bad_solve_arguments() -> None:
    m = random_milp(1, 3, 1)
    with pytest.raises(ModelError, match="backend"):
        solve(m, backend="gurobi-please")
    with pytest.raises(ModelError, match="time_limit"):
        solve(m, time_limit=0)
    with pytest.raises(ModelError, match="mip_gap"):
        solve(m, mip_gap=-1)


def test_cbc_matches_highs_where_its_preprocessing_lost_the_optimum() -> None:
    model = random_milp(6000, 10, 2)  # CBC with preprocessing returned -8.71 and called it optimal
    ref = solve(model, mip_gap=0)
    cbc = solve(model, backend="cbc", mip_gap=0)
    assert cbc.optimal and _close(cbc.objective, ref.objective), (ref.objective, cbc.objective)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 100_000), n=st.integers(2, 8), m=st.integers(1, 4))
def test_every_registered_backend_agrees_on_small_milps(seed: int, n: int, m: int) -> None:
    model = random_milp(seed, n, m)
    ref = solve(model, mip_gap=0)
    for backend in backend_names():
        other = solve(model, backend=backend, mip_gap=0)
        assert other.backend == backend
        assert (ref.status is SolveStatus.OPTIMAL) == (other.status is SolveStatus.OPTIMAL), backend
        if ref.optimal:
            assert _close(ref.objective, other.objective), (backend, ref.objective, other.objective)


UNSUPPORTED = [  # (backend, option, value): every option a built-in backend cannot honour
    ("scipy", "threads", 2),
    ("scipy", "warm_start", "values"),
    ("scipy", "algorithm", "ipm"),
    ("cbc", "algorithm", "simplex"),
    ("cvxpy", "threads", 2),
    ("cvxpy", "warm_start", "values"),
    ("cvxpy", "algorithm", "pdlp"),
]


@pytest.mark.parametrize(("backend", "option", "value"), UNSUPPORTED)
def test_backend_raises_on_an_option_it_cannot_honour(backend: str, option: str, value: object) -> None:
    m = random_milp(3, 4, 2)
    if value == "values":
        value = solve(m).values
    with pytest.raises(InputError, match=rf"{option}=.*backend '{backend}' cannot honour"):
        solve(m, backend=backend, **{option: value})


def test_capability_flags_match_what_the_backends_accept() -> None:
    m = random_milp(3, 4, 2)
    warm = solve(m, mip_gap=0).values
    refused = {(b, o) for b, o, _ in UNSUPPORTED}
    for name in backend_names():
        caps = get_backend(name).capabilities
        assert caps.threads == ((name, "threads") not in refused)
        assert caps.warm_start == ((name, "warm_start") not in refused)
        if caps.threads and caps.warm_start:  # honoured options still give the optimum
            sol = solve(m, backend=name, threads=1, warm_start=warm, mip_gap=0)
            assert sol.optimal and _close(sol.objective, solve(m, mip_gap=0).objective), name


def test_lp_only_and_no_time_limit_backends_refuse_what_they_cannot_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "_BACKENDS", dict(registry._BACKENDS))  # registered for this test only
    lp_only = Backend("lp-only", Capabilities(mip=False, time_limit=False), lambda model, options: solve(model, relax=True))
    register_backend(lp_only, replace=True)
    m = random_milp(5, 5, 2)
    with pytest.raises(InputError, match="integer variables and backend 'lp-only'"):
        solve(m, backend="lp-only", time_limit=math.inf)
    with pytest.raises(InputError, match="time_limit=5.*backend 'lp-only'"):
        solve(m, backend="lp-only", relax=True, time_limit=5)
    assert solve(m, backend="lp-only", relax=True, time_limit=math.inf).optimal
    with pytest.raises(InputError, match="already registered"):
        register_backend(lp_only)


@pytest.mark.parametrize("backend", ["cbc", "cvxpy", "scipy", "highs"])
def test_time_limited_solve_reports_its_limit_not_optimal(backend: str) -> None:
    m = hard_knapsack()  # HiGHS needs > 10 s to prove optimality; nobody finishes in 0.2 s
    sol = solve(m, backend=backend, time_limit=0.2, mip_gap=0)
    assert sol.status is SolveStatus.TIME_LIMIT, (backend, sol.message)
    if sol.has_solution:
        assert m.violation(m.pack(sol.values)) < 1e-6


def test_solve_prints_nothing_unless_verbose() -> None:
    code = (
        "import sys; sys.path.insert(0, 'tests')\n"
        "from test_solvers import random_milp\n"
        "from heteroplan.solvers import backend_names, solve\n"
        "m = random_milp(2, 5, 2)\n"
        "for b in backend_names(): solve(m, backend=b)\n"
    )
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root)}
    quiet = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, check=True)
    assert quiet.stdout == "" and quiet.stderr == ""
    loud = subprocess.run([sys.executable, "-c", code.replace("backend=b)", "backend=b, verbose=b == 'highs')")],
                          cwd=root, env=env, capture_output=True, text=True, check=True)
    assert "HiGHS" in loud.stdout


def test_cbc_reports_an_infeasible_model_it_crashed_on_without_preprocessing() -> None:
    model = random_milp(5722, 3, 5)  # CBC without preprocessing exits with an error on it
    assert solve(model).status is SolveStatus.INFEASIBLE
    assert solve(model, backend="cbc", mip_gap=0).status is SolveStatus.INFEASIBLE


def test_solver_threads_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """HETEROPLAN_SOLVER_THREADS (set to 1 in sweep workers) sizes HiGHS's pool when a solve names
    no threads; switching between it, an explicit count and HiGHS's default keeps the optimum
    (a pool of the wrong size would fail the solve), and a bad value names the variable."""
    m = random_milp(4, 5, 3)
    best = solve(m, mip_gap=0).objective
    monkeypatch.setenv("HETEROPLAN_SOLVER_THREADS", "1")
    assert _close(solve(m, mip_gap=0).objective, best)
    assert _close(solve(m, mip_gap=0, threads=2).objective, best)
    monkeypatch.delenv("HETEROPLAN_SOLVER_THREADS")
    assert _close(solve(m, mip_gap=0).objective, best)
    for bad in ("abc", "0"):
        monkeypatch.setenv("HETEROPLAN_SOLVER_THREADS", bad)
        with pytest.raises(InputError, match="HETEROPLAN_SOLVER_THREADS"):
            solve(m)
