"""Audit (issue 47, the earlier audit's classes): every public call of the ``Model`` API and of
``solve`` refuses a hostile argument with a :class:`ModelError` naming the argument and the value,
never a raw numpy/scipy/HiGHS error or a silent NaN; and ``HETEROPLAN_SOLVER_THREADS`` is bounded."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from heteroplan.errors import InputError, ModelError
from heteroplan.milp import Model
from heteroplan.solvers import (
    BACKENDS,
    solve,
    to_cvxpy,
    to_pulp,
    to_scipy,
    write_lp,
    write_model,
    write_mps,
)


def small() -> tuple[Model, object]:
    m = Model("small")
    x = m.add_variables("x", (2, 3), ub=5, integer=True)
    m.add_constraints(x.sum(axis=1) <= 4, "rows")
    m.maximize(x.sum())
    return m, x


# ------------------------------------------------------------------ expressions
@pytest.mark.parametrize("axis", ["0", 1.0, ["a"], [None], (0, "1"), True, [0, 0]])
def test_an_axis_that_is_not_an_integer_axis_is_refused(axis) -> None:
    _, x = small()
    with pytest.raises(ModelError, match="axis"):
        x.sum(axis=axis)


@pytest.mark.parametrize("shape", [(5,), ("a",), (-1, -1), (2.0, 3), (((6,),),), (None,), (-2, -3)])
def test_a_bad_reshape_names_the_shape(shape) -> None:
    _, x = small()
    with pytest.raises(ModelError, match="reshape"):
        x.reshape(*shape)


def test_a_good_reshape_still_works() -> None:
    _, x = small()
    assert x.reshape(3, 2).shape == (3, 2)
    assert x.reshape((6,)).shape == (6,)
    assert x.reshape(-1, 2).shape == (3, 2)
    assert x.ravel().shape == (6,)
    assert x.sum(axis=np.int64(1)).shape == (2,)
    assert x.sum(axis=(0, 1)).shape == ()


@pytest.mark.parametrize("shape", ["ab", (2, "3"), 2.5])
def test_broadcast_to_a_shape_that_is_not_one(shape) -> None:
    _, x = small()
    with pytest.raises(ModelError, match="shape"):
        x.broadcast_to(shape)


@pytest.mark.parametrize("operand", ["a", object(), 1j, 10**400, [["a", "b", "c"]], {"a": 1}])
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "le", "ge", "eq"])
def test_a_constant_that_is_not_a_finite_number_is_refused(op, operand) -> None:
    _, x = small()
    apply = {"add": lambda: x + operand, "sub": lambda: x - operand, "mul": lambda: x * operand,
             "div": lambda: x / operand, "le": lambda: x <= operand, "ge": lambda: x >= operand,
             "eq": lambda: x == operand}[op]
    with pytest.raises(ModelError, match="constant"):
        apply()


@pytest.mark.parametrize("matrix", ["abc", [["a", "b", "c"]], np.full((2, 3), np.nan), [[1, math.inf, 1]],
                                    [[1, 10**400, 1]]])
def test_a_matrix_product_with_a_bad_matrix(matrix) -> None:
    _, x = small()
    with pytest.raises(ModelError, match="matrix"):
        matrix @ x.sum(axis=0)


@pytest.mark.parametrize("vector", ["abc", [1, np.nan, 1]])
def test_a_vector_product_with_a_bad_vector(vector) -> None:
    _, x = small()
    with pytest.raises(ModelError):
        x @ vector


@pytest.mark.parametrize(("rows", "coef", "num_rows", "field"), [
    (["a"] * 6, [1] * 6, 2, "out_row"), ([0.5] * 6, [1] * 6, 2, "out_row"), ([0] * 6, [np.nan] * 6, 2, "coef"),
    ([0] * 6, ["x"] * 6, 2, "coef"), ([0] * 6, [1] * 6, "2", "num_rows"), ([0] * 6, [1] * 6, -1, "num_rows"),
])
def test_scatter_checks_its_arguments(rows, coef, num_rows, field) -> None:
    _, x = small()
    with pytest.raises(ModelError, match=field):
        x.ravel().scatter(rows, coef, num_rows)


@pytest.mark.parametrize("point", ["abc", np.zeros(2), np.zeros((6, 1)), [math.nan] * 6, None])
def test_evaluating_at_a_point_of_the_wrong_length(point) -> None:
    m, x = small()
    with pytest.raises(ModelError, match="x"):
        x.value(point)
    with pytest.raises(ModelError, match="x"):
        m.violation(point)
    if not (isinstance(point, list) and math.isnan(point[0])):  # a solver's NaN is unpacked as it is
        with pytest.raises(ModelError, match="x"):
            m.unpack(point)
    with pytest.raises(ModelError, match="y"):
        m.unpack_rows(np.zeros(5))


def test_evaluating_at_a_good_point() -> None:
    m, x = small()
    p = [1, 2, 3, 0, 0, 1]
    assert x.sum().value(p) == 7
    assert m.violation(p) == pytest.approx(2.0)  # row 0 sums to 6 > 4
    assert m.unpack(np.array(p, dtype=float))["x"].tolist() == [[1, 2, 3], [0, 0, 1]]


# ------------------------------------------------------------------ model building
@pytest.mark.parametrize(("kwargs", "field"), [
    ({"A": "abc"}, "A"), ({"A": np.full((1, 6), np.nan)}, "A"), ({"A": [[1, 1, 1, 1, 1, math.inf]]}, "A"),
    ({"A": np.ones((2, 6)), "lb": [1, 2, 3]}, "lb"), ({"A": np.ones((2, 6)), "lb": "a"}, "lb"),
    ({"A": np.ones((2, 6)), "ub": 10**400}, "ub"), ({"A": np.ones((2, 6)), "columns": "x"}, "columns"),
    ({"A": np.ones((2, 6)), "name": 3}, "name"), ({"A": np.ones((2, 6)), "name": ""}, "name"),
])
def test_matrix_constraints_check_their_arguments(kwargs, field) -> None:
    m, _ = small()
    with pytest.raises(ModelError, match=field):
        m.add_matrix_constraints(**({"name": "A"} | kwargs))


def test_constraint_and_model_names_must_be_strings() -> None:
    m, x = small()
    with pytest.raises(ModelError, match="name"):
        m.add_constraints(x <= 1, name=3)
    with pytest.raises(ModelError, match="name"):
        Model(3)
    with pytest.raises(ModelError, match="integer"):
        m.add_variables("y", 2, integer="no")  # truthy: it would have made an integer block


@pytest.mark.parametrize(("kwargs", "field"), [({"shape": "ab"}, "shape"), ({"ub": 10**400}, "ub"),
                                               ({"lb": -(10**400)}, "lb")])
def test_variable_blocks_check_their_arguments(kwargs, field) -> None:
    with pytest.raises(ModelError, match=field):
        Model().add_variables("x", **({"shape": 2} | kwargs))


@pytest.mark.parametrize("objective", [math.nan, math.inf, np.float64("nan")])
def test_a_constant_objective_must_be_finite(objective) -> None:
    m, _ = small()
    with pytest.raises(ModelError, match="objective"):
        m.maximize(objective)


# ------------------------------------------------------------------ solve and its arguments
@pytest.mark.parametrize("not_a_model", ["model", None, {}, 3, np.zeros(3)])
@pytest.mark.parametrize("backend", BACKENDS)
def test_solve_of_something_that_is_not_a_model(not_a_model, backend) -> None:
    with pytest.raises(ModelError, match="model"):
        solve(not_a_model, backend=backend)


@pytest.mark.parametrize("export", [to_scipy, to_pulp, to_cvxpy])
def test_exports_of_something_that_is_not_a_model(export) -> None:
    with pytest.raises(ModelError, match="model"):
        export("model")


@pytest.mark.parametrize("write", [write_lp, write_mps, write_model])
def test_writes_of_something_that_is_not_a_model(write, tmp_path) -> None:
    with pytest.raises(ModelError, match="model"):
        write("model", tmp_path / "m.lp")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("warm_start", [[1, 2, 3], "x", 3, {"x": np.full((2, 3), np.nan)}, {"x": math.inf},
                                        {"x": [1, 2]}, {"y": 1}, {1: 1}, {"x": "a"}])
def test_a_warm_start_that_is_not_values_per_block(warm_start) -> None:
    m, _ = small()
    with pytest.raises(ModelError, match="warm_start"):
        solve(m, warm_start=warm_start)


def test_a_good_warm_start_is_taken() -> None:
    m, _ = small()
    sol = solve(m, warm_start={"x": [[4, 0, 0], [0, 4, 0]]})
    assert sol.objective == 8


def test_pack_refuses_what_is_not_values_per_block() -> None:
    m, _ = small()
    with pytest.raises(ModelError, match="values"):
        m.pack([1, 2])
    with pytest.raises(ModelError, match="values"):
        m.pack({"x": math.nan})


@pytest.mark.parametrize(("kwargs", "field"), [({"algorithm": ["x"]}, "algorithm"), ({"algorithm": None}, "algorithm"),
                                               ({"mip_gap": math.inf}, "mip_gap"), ({"backend": None}, "backend")])
def test_solve_options_of_the_wrong_type(kwargs, field) -> None:
    m, _ = small()
    with pytest.raises(ModelError, match=field):
        solve(m, **kwargs)


# ------------------------------------------------------------------ the environment
@pytest.mark.parametrize("value", ["1000000000", str(10**30), "-3", "0", "two", "1e3"])
def test_a_solver_thread_count_from_the_environment_is_bounded(monkeypatch, value) -> None:
    monkeypatch.setenv("HETEROPLAN_SOLVER_THREADS", value)
    m, _ = small()
    with pytest.raises(InputError, match="HETEROPLAN_SOLVER_THREADS"):
        solve(m)


def test_a_sane_solver_thread_count_from_the_environment_solves(monkeypatch) -> None:
    monkeypatch.setenv("HETEROPLAN_SOLVER_THREADS", " 2 ")
    m, _ = small()
    assert solve(m).objective == 8


# ------------------------------------------------------------------ the property
HOSTILE = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**30), 10**30), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=4), st.complex_numbers(max_magnitude=10), st.just(object()), st.just(10**400),
    st.lists(st.one_of(st.integers(-3, 3), st.floats(), st.text(max_size=2), st.none()), max_size=7),
    st.dictionaries(st.one_of(st.text(max_size=2), st.integers(0, 2)), st.one_of(st.floats(), st.text(max_size=2)),
                    max_size=2),
    st.builds(np.full, st.tuples(st.integers(0, 3), st.integers(0, 4)), st.floats()),
)

CALLS = {
    "sum": lambda m, x, a: x.sum(axis=a),
    "reshape": lambda m, x, a: x.reshape(a),
    "reshape2": lambda m, x, a: x.reshape(a, -1),
    "getitem": lambda m, x, a: x[a],
    "broadcast_to": lambda m, x, a: x.broadcast_to(a),
    "add": lambda m, x, a: x + a,
    "rsub": lambda m, x, a: a - x,
    "mul": lambda m, x, a: x * a,
    "div": lambda m, x, a: x / a,
    "le": lambda m, x, a: m.add_constraints(x <= a, "h"),
    "eq": lambda m, x, a: m.add_constraints(x.sum(axis=0) == a, "h"),
    "matmul": lambda m, x, a: x @ a,
    "rmatmul": lambda m, x, a: a @ x.sum(axis=0),
    "scatter_rows": lambda m, x, a: x.ravel().scatter(a, np.ones(6), 2),
    "scatter_coef": lambda m, x, a: x.ravel().scatter(np.zeros(6, dtype=int), a, 2),
    "scatter_n": lambda m, x, a: x.ravel().scatter(np.zeros(6, dtype=int), np.ones(6), a),
    "value": lambda m, x, a: x.value(a),
    "violation": lambda m, x, a: m.violation(a),
    "unpack": lambda m, x, a: m.unpack(a),
    "pack": lambda m, x, a: m.pack(a),
    "variables_shape": lambda m, x, a: m.add_variables("v", a),
    "variables_lb": lambda m, x, a: m.add_variables("v", 3, lb=a),
    "variables_ub": lambda m, x, a: m.add_variables("v", 3, ub=a),
    "variables_integer": lambda m, x, a: m.add_variables("v", 3, integer=a),
    "variables_name": lambda m, x, a: m.add_variables(a, 3),
    "matrix_A": lambda m, x, a: m.add_matrix_constraints("A", a, ub=1),
    "matrix_lb": lambda m, x, a: m.add_matrix_constraints("A", np.ones((2, 6)), lb=a),
    "matrix_columns": lambda m, x, a: m.add_matrix_constraints("A", np.ones((2, 6)), columns=a),
    "objective": lambda m, x, a: m.minimize(a),
    "solve_model": lambda m, x, a: solve(a),
    "solve_warm": lambda m, x, a: solve(m, warm_start=a, time_limit=5),
    "solve_time": lambda m, x, a: solve(m, time_limit=a),
    "solve_gap": lambda m, x, a: solve(m, mip_gap=a, time_limit=5),
    "solve_threads": lambda m, x, a: solve(m, threads=a, time_limit=5),
    "solve_algorithm": lambda m, x, a: solve(m, algorithm=a, time_limit=5),
    "solve_backend": lambda m, x, a: solve(m, backend=a, time_limit=5),
}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(call=st.sampled_from(sorted(CALLS)), arg=HOSTILE)
def test_nothing_but_input_error_escapes_the_model_api(call, arg) -> None:
    """Any argument to any public call: a result, or an InputError naming what was wrong.
    A result built from the argument holds no NaN (bounds, coefficients, constants)."""
    m, x = small()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            out = CALLS[call](m, x, arg)
        except InputError as exc:
            assert exc.field and exc.reason
            return
    if hasattr(out, "vals"):
        assert np.all(np.isfinite(out.vals)) and np.all(np.isfinite(out.const))
    sf = m.to_standard_form()
    for arr in (sf.c, sf.A.data, sf.col_lb, sf.col_ub, sf.row_lb, sf.row_ub):
        assert not np.isnan(arr).any()
