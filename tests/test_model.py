"""The Model's expression algebra against dense numpy evaluation, and its input errors."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from heteroplan.errors import ModelError
from heteroplan.milp import Model


def _point(m: Model, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=m.num_vars)


@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(1, 6),
    cols=st.integers(1, 6),
    seed=st.integers(0, 10_000),
)
def test_expression_algebra_matches_numpy(rows: int, cols: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    m = Model()
    x = m.add_variables("x", (rows, cols))
    y = m.add_variables("y", (cols,))
    w = rng.normal(size=(rows, cols))
    v = rng.normal(size=cols)
    A = rng.normal(size=(3, cols))
    p = _point(m, seed)
    X, Y = p[: rows * cols].reshape(rows, cols), p[rows * cols :]

    np.testing.assert_allclose((x * w).sum().value(p), (X * w).sum())
    np.testing.assert_allclose(x.sum(axis=0).value(p), X.sum(axis=0))
    np.testing.assert_allclose(x.sum(axis=1).value(p), X.sum(axis=1))
    np.testing.assert_allclose((A @ y).value(p), A @ Y)
    np.testing.assert_allclose((sp.csr_matrix(A) @ x.sum(axis=0)).value(p), A @ X.sum(axis=0))
    np.testing.assert_allclose((x @ v).value(p), X @ v)
    np.testing.assert_allclose((x + y).value(p), X + Y)  # broadcast y over rows
    np.testing.assert_allclose((2 - 3 * x[0] + y / 2).value(p), 2 - 3 * X[0] + Y / 2)
    np.testing.assert_allclose((x[:, ::2] - 1).value(p), X[:, ::2] - 1)
    np.testing.assert_allclose(x[np.array([0] * 3)].value(p), X[[0] * 3])
    np.testing.assert_allclose((w * x).reshape(-1).value(p), (w * X).ravel())


def _block_menu(x, y, rng):
    """Constraint expressions that exercise every assembly path: blocks that touch each
    variable once in order (strided CSC), once out of order or partly (scatter), and blocks
    with repeated variables (scipy's duplicate-summing conversion)."""
    rows, cols = x.shape
    one_per_col = np.zeros((3, cols))
    one_per_col[rng.integers(0, 3, cols), np.arange(cols)] = rng.normal(size=cols)
    one_per_col[:, rng.integers(0, cols)] = 0.0  # a column with no non-zero
    return [
        lambda: x.sum(axis=1),
        lambda: x.sum(axis=0),
        lambda: one_per_col @ x.sum(axis=0),
        lambda: sp.csr_matrix(one_per_col) @ x.sum(axis=0),
        lambda: rng.normal(size=(2, cols)) @ x.sum(axis=0),
        lambda: (x * rng.normal(size=(rows, cols))).reshape(-1),
        lambda: x[:, ::-1].sum(axis=1),
        lambda: x[0] + y,
        lambda: x.sum(axis=1) + x[:, 0],
        lambda: (x + y).sum(axis=0) - 2 * y,
    ]


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(1, 5),
    cols=st.integers(1, 5),
    picks=st.lists(st.integers(0, 9), min_size=1, max_size=4),
    with_y=st.booleans(),
    seed=st.integers(0, 10_000),
)
def test_standard_form_matrix_matches_stacked_coefficients(
    rows: int, cols: int, picks: list[int], with_y: bool, seed: int
) -> None:
    # The fast CSC assembly against scipy's own COO -> CSR stacking of each block's terms.
    rng = np.random.default_rng(seed)
    m = Model()
    x = m.add_variables("x", (rows, cols))
    y = m.add_variables("y", cols) if with_y else np.zeros(cols)
    menu = _block_menu(x, y, rng)
    for i, k in enumerate(picks):
        m.add_constraints(menu[k]() <= 1.0, f"b{i}")
    m.minimize((x * rng.normal(size=(rows, cols))).sum())
    sf = m.to_standard_form()
    expected = sp.vstack([b.expr.coef for b in m.constraints.values()]).toarray()
    np.testing.assert_allclose(sf.A.toarray(), expected, atol=1e-12)
    assert sf.A.indices.dtype == np.int32 and sf.A.indptr.dtype == np.int32
    assert np.all(sf.A.data != 0)
    np.testing.assert_allclose(sf.c, m.objective.coef.toarray().ravel(), atol=1e-12)
    p = _point(m, seed)
    np.testing.assert_allclose(sf.A @ p, np.concatenate([b.expr.value(p).ravel() for b in m.constraints.values()]))


def test_bounds_are_copied_and_checked_elementwise() -> None:
    m = Model()
    upper = np.array([[1.0, 2.0], [3.0, 4.0]])
    x = m.add_variables("x", (2, 2), lb=0, ub=upper)
    upper[:] = -1  # the caller's array changing later must not change the model
    np.testing.assert_allclose(m.to_standard_form().col_ub, [1, 2, 3, 4])
    assert x.lb.shape == (4,)
    with pytest.raises(ModelError) as info:
        m.add_variables("z", (2, 2), lb=np.array([0.0, 5.0]), ub=np.array([[1.0, 9.0], [1.0, 4.0]]))
    assert info.value.field == "variables[z][1, 1]"
    assert "lb > ub" in str(info.value)


def test_constraint_bounds_move_constants_to_rhs() -> None:
    m = Model()
    x = m.add_variables("x", 3)
    c = (x + 2 <= np.array([5.0, 6.0, 7.0]))
    np.testing.assert_allclose(c.ub, [3, 4, 5])
    assert np.all(np.isneginf(c.lb))
    c2 = (x >= x[0] * 2)
    assert np.all(c2.lb == 0) and np.all(np.isposinf(c2.ub))
    c3 = (x.sum() == 4)
    assert c3.lb[0] == c3.ub[0] == 4
    # numpy on the left defers to the expression.
    c4 = np.ones(3) <= x
    np.testing.assert_allclose(c4.lb, 1.0)


def test_standard_form_stacks_blocks() -> None:
    m = Model()
    x = m.binary("x", (2, 3))
    y = m.continuous("y", 2, lb=-1, ub=4)
    m.add_constraints(x.sum(axis=1) <= 1, "one")
    m.add_constraints(y - x[:, 0] >= 0, "link")
    m.maximize((x * np.arange(6).reshape(2, 3)).sum() + y.sum() + 5)
    sf = m.to_standard_form()
    assert sf.A.shape == (4, 8)
    np.testing.assert_array_equal(sf.integrality, [True] * 6 + [False] * 2)
    np.testing.assert_allclose(sf.c, [0, 1, 2, 3, 4, 5, 1, 1])
    assert sf.offset == 5 and sf.maximize
    np.testing.assert_allclose(sf.col_lb[6:], -1)
    assert m.constraints["link"].slice == slice(2, 4)
    assert m.variable_names()[:2] == ["x[0,0]", "x[0,1]"]


def test_build_is_vectorized_for_100k_variables() -> None:
    # Not a timing assertion: checks the structure is right at scale (one nnz per entry).
    m = Model()
    x = m.binary("x", (2000, 50))
    m.add_constraints(x.sum(axis=1) <= 1, "one")
    m.add_constraints(np.ones((4, 50)) @ x.sum(axis=0) <= 10, "cap")
    sf = m.to_standard_form()
    assert sf.A.nnz == 100_000 + 4 * 100_000


@pytest.mark.parametrize(
    "build, field",
    [
        (lambda m: m.add_variables("x", 3, lb=2, ub=1), "variables[x][0]"),
        (lambda m: m.add_variables("x", (2, -1)), "variables[x].shape"),
        (lambda m: m.add_variables("x", 2, ub=[1, 2, 3]), "variables[x].ub"),
        (lambda m: m.add_variables("x", 2, lb=np.nan), "variables[x].lb"),
        (lambda m: m.add_variables("", 2), "variables.name"),
    ],
)
def test_bad_variables_name_field(build, field: str) -> None:
    with pytest.raises(ModelError) as info:
        build(Model())
    assert info.value.field == field
    assert isinstance(info.value, ValueError)


def test_bad_expressions_and_constraints() -> None:
    m = Model()
    x = m.add_variables("x", (2, 3))
    with pytest.raises(ModelError, match="name exists"):
        m.add_variables("x", 1)
    with pytest.raises(ModelError, match="not linear"):
        _ = x * x
    with pytest.raises(ModelError, match="does not broadcast"):
        _ = x + np.ones(4)
    with pytest.raises(ModelError, match="scalar"):
        m.maximize(x.sum(axis=0))
    with pytest.raises(ModelError, match="expected"):
        m.add_constraints(x.sum(), "bad")  # type: ignore[arg-type]
    with pytest.raises(ModelError, match="finite"):
        _ = x <= np.nan
    with pytest.raises(ModelError, match="another Model"):
        Model().add_constraints(x.sum() <= 1)
    with pytest.raises(ModelError, match="columns"):
        _ = np.ones((2, 4)) @ x.sum(axis=0)
    with pytest.raises(TypeError, match="truth value"):
        bool(x.sum() <= 1)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 30), st.integers(1, 6), st.integers(0, 2**31 - 1), st.booleans())
def test_scatter_equals_the_one_per_column_matrix_product(n: int, rows: int, seed: int, shifted: bool) -> None:
    """``x.scatter(out_row, coef, m)`` is ``A @ x`` for the CSC matrix with ``coef[i]`` in row
    ``out_row[i]`` of column ``i``: the same terms, constants and standard form."""
    rng = np.random.default_rng(seed)
    out_row = rng.integers(0, rows, n)
    coef = rng.choice([0.0, 1.0, 2.5, 8.0], n)
    built = []
    for how in ("matrix", "scatter"):
        model = Model()
        x = model.add_variables("x", n, ub=1.0, integer=True)
        expr = x + 3.0 if shifted else x
        A = sp.csc_matrix((coef, out_row, np.arange(n + 1)), shape=(rows, n))
        lhs = A @ expr if how == "matrix" else expr.scatter(out_row, coef, rows)
        model.add_constraints(lhs <= np.arange(rows, dtype=float), "rows")
        model.minimize(x.sum())
        built.append((lhs, model.to_standard_form()))
    (a, fa), (b, fb) = built
    assert np.array_equal(a.rows, b.rows) and np.array_equal(a.cols, b.cols) and np.array_equal(a.vals, b.vals)
    assert np.array_equal(a.const, b.const) and a.unique == b.unique
    assert (fa.A != fb.A).nnz == 0 and np.array_equal(fa.row_ub, fb.row_ub)
    x0 = rng.random(n)
    assert np.allclose(b.value(x0), A @ (x0 + (3.0 if shifted else 0.0)))


def test_scatter_checks_its_rows() -> None:
    model = Model()
    x = model.add_variables("x", 3)
    with pytest.raises(ModelError, match="out_row"):
        x.scatter([0, 1, 3], [1.0, 1.0, 1.0], 3)
    with pytest.raises(ModelError, match="shape"):
        x.scatter([0, 1], [1.0, 1.0], 3)
