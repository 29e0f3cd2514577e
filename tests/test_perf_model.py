"""Goodput model: formulas, properties, optimizer vs brute force, bad input."""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heteroplan.errors import InputError
from heteroplan.perf.applications import APPLICATIONS, SIA_TYPE_NAMES, AppSpec, get_app
from heteroplan.perf.efficiency import PhiTable, efficiency
from heteroplan.perf.goodput import GoodputModel, ThroughputParams, ThroughputTable
from heteroplan.perf.sia_data import true_model
from heteroplan.perf.throughput import step_time, sync_time, throughput
from heteroplan.policies.base import PerfModel

DATA = Path(__file__).parent / "data" / "sia"

params_st = st.builds(
    ThroughputParams,
    alpha_c=st.floats(1e-3, 1.0),
    beta_c=st.floats(1e-5, 1e-2),
    alpha_r=st.floats(0.0, 0.5),
    beta_r=st.floats(0.0, 0.05),
    alpha_n=st.floats(0.0, 1.0),
    beta_n=st.floats(0.0, 0.1),
    gamma=st.floats(1.0, 5.0),
)


# -- catalogue -------------------------------------------------------------------------


def _read_csv_gz(path: Path) -> tuple[list[str], list[list[str]]]:
    with gzip.open(path, "rt") as fh:
        rows = [line.strip().split(",") for line in fh if line.strip()]
    return rows[0], rows[1:]


@pytest.mark.parametrize("app", sorted(APPLICATIONS))
def test_catalogue_matches_trace_files(app: str) -> None:
    spec = get_app(app)
    assert spec.total_work == spec.epochs * spec.dataset_size
    # The M0 validation run ends after total_steps M0-sized steps, one row per epoch.
    header, rows = _read_csv_gz(DATA / app / f"validation-{spec.init_batch_size}.csv.gz")
    final = float(rows[-1][header.index("progress")])
    assert spec.total_steps == pytest.approx(final, rel=1e-3)
    assert len(rows) == spec.epochs
    sizes = sorted(int(p.name.split("-")[1].split(".")[0]) for p in (DATA / app).glob("validation-*"))
    assert (sizes[0], sizes[-1]) == (spec.init_batch_size, spec.max_batch_size)
    for gpu_type in SIA_TYPE_NAMES:
        header, rows = _read_csv_gz(DATA / app / f"placements-{gpu_type}.csv.gz")
        biggest = max(int(float(r[header.index("local_bsz")])) for r in rows)
        assert spec.max_local_bsz[gpu_type] == biggest


def test_get_app_unknown_and_bad_spec() -> None:
    with pytest.raises(InputError, match="application='resnet9000'"):
        get_app("resnet9000")
    with pytest.raises(InputError, match="init_batch_size"):
        AppSpec("x", max_batch_size=8, init_batch_size=16, epochs=1, dataset_size=10,
                restart_delay=0.0)
    with pytest.raises(InputError, match="max_local_bsz"):
        AppSpec("x", 64, 8, 1, 10, 0.0, {"aws": 0})


# -- throughput formulas ---------------------------------------------------------------


def test_step_time_by_hand() -> None:
    p = ThroughputParams(0.1, 0.01, alpha_r=0.2, beta_r=0.05, alpha_n=0.5, beta_n=0.1, gamma=2)
    # 1 GPU: compute only; 4 GPUs one node: sync 0.2 + 0.05*2 = 0.3; 2 nodes: 0.5 + 0.1*2.
    assert step_time(p, 1, 1, 10) == pytest.approx(0.2)
    assert sync_time(p, 1, 4) == pytest.approx(0.3)
    assert sync_time(p, 2, 4) == pytest.approx(0.7)
    assert step_time(p, 1, 4, 10) == pytest.approx(math.hypot(0.2, 0.3))
    # Two accumulation steps add two compute-only micro-steps.
    assert step_time(p, 1, 4, 10, 2) == pytest.approx(0.4 + math.hypot(0.2, 0.3))
    assert throughput(p, 1, 4, 10, 2) == pytest.approx(4 * 10 * 3 / (0.4 + math.hypot(0.2, 0.3)))
    no_overlap = ThroughputParams(0.1, 0.01, 0.2, 0.05, 0.5, 0.1, gamma=1)
    assert step_time(no_overlap, 2, 4, 10) == pytest.approx(0.2 + 0.7)


def test_params_validation() -> None:
    with pytest.raises(InputError, match="gamma"):
        ThroughputParams(0.1, 0.01, gamma=0.5)
    with pytest.raises(InputError, match="beta_c"):
        ThroughputParams(0.1, -0.01)
    assert ThroughputParams.from_dict(ThroughputParams(1, 2, 3, 4, 5, 6, 7).to_dict()) == \
        ThroughputParams(1, 2, 3, 4, 5, 6, 7)


@settings(max_examples=100, deadline=None)
@given(phi=st.floats(1e-3, 1e8), m0=st.integers(1, 1024), extra=st.floats(1e-3, 1e5))
def test_efficiency_is_one_at_m0_and_decreasing(phi: float, m0: int, extra: float) -> None:
    assert efficiency(phi, m0, m0) == pytest.approx(1.0)
    batches = m0 + np.array([0.0, extra, 2 * extra, 10 * extra])
    eff = efficiency(phi, m0, batches)
    assert np.all(np.diff(eff) < 0)
    assert np.all((eff > 0) & (eff <= 1.0))


@settings(max_examples=100, deadline=None)
@given(a=st.floats(1e-4, 1.0), b=st.floats(0.0, 1e-2), m=st.integers(1, 512),
       k=st.integers(1, 63), s=st.integers(0, 8), gamma=st.floats(1.0, 10.0))
def test_throughput_grows_with_gpus_when_sync_is_free(a, b, m, k, s, gamma) -> None:
    p = ThroughputParams(a, b, gamma=gamma)
    nodes = np.array([1, 1, 2])
    assert throughput(p, nodes[:2], [k, k + 1], m, s)[1] > throughput(p, 1, k, m, s)
    # Free sync: linear scaling, whatever the node count.
    assert throughput(p, 2, 2 * k + 2, m, s) == pytest.approx((2 * k + 2) * throughput(p, 1, 1, m, s))


# -- optimizer -------------------------------------------------------------------------

SMALL_APP = AppSpec("small", max_batch_size=256, init_batch_size=8, epochs=1, dataset_size=1000,
                    restart_delay=0.0, max_local_bsz={"t": 32})


def _brute_force(p: ThroughputParams, app: AppSpec, nodes: int, gpus: int, phi: float) -> float:
    """Best goodput over every integer local batch and accumulation count."""
    best = 0.0
    ml = app.max_local_bsz["t"]
    for s in range(app.max_batch_size // gpus + 1):
        m = np.arange(1, ml + 1)
        batch = gpus * m * (s + 1)
        ok = (batch >= app.init_batch_size) & (batch <= app.max_batch_size)
        if not ok.any():
            continue
        gp = throughput(p, nodes, gpus, m[ok], s) * efficiency(phi, app.init_batch_size, batch[ok])
        best = max(best, float(gp.max()))
    return best


@settings(max_examples=40, deadline=None)
@given(p=params_st, phi=st.floats(1.0, 1e5), config=st.sampled_from(
    [(1, 1), (1, 2), (1, 3), (1, 8), (2, 4), (2, 10), (4, 16), (4, 40), (8, 64), (16, 200), (32, 300)]
))
def test_optimize_matches_brute_force(p: ThroughputParams, phi: float, config) -> None:
    nodes, gpus = config
    model = GoodputModel(SMALL_APP, {"t": p}, phi)
    good, local, accum = model.optimize("t", nodes, gpus)
    expected = _brute_force(p, SMALL_APP, nodes, gpus, phi)
    if expected == 0.0:
        assert good == 0.0 and local == 0 and accum == 0
        return
    batch = gpus * local * (accum + 1)
    # Our answer is a feasible point whose goodput we recompute independently...
    assert SMALL_APP.init_batch_size <= batch <= SMALL_APP.max_batch_size
    assert 1 <= local <= 32
    direct = throughput(p, nodes, gpus, local, accum) * efficiency(phi, 8, batch)
    assert good == pytest.approx(direct, rel=1e-9)
    # ...and within 2% of the exhaustive optimum (grid of 32 total batch sizes).
    assert expected * 0.98 <= good <= expected * (1 + 1e-9)


@settings(max_examples=60, deadline=None)
@given(p=params_st, progress=st.floats(0.0, 1.0),
       app_name=st.sampled_from(sorted(APPLICATIONS)), gpu_type=st.sampled_from(SIA_TYPE_NAMES),
       gpus=st.lists(st.integers(1, 64), min_size=1, max_size=10))
def test_optimal_batch_within_limits(p, progress, app_name, gpu_type, gpus) -> None:
    app = get_app(app_name)
    model = GoodputModel(app, {gpu_type: p}, true_model(app_name).phi)
    k = np.array(gpus)
    n = np.ceil(k / 8)
    good, local, accum = model.optimize(gpu_type, n, k, progress)
    batch = k * local * (accum + 1)
    assert np.all(batch <= app.max_batch_size)
    assert np.all(local <= app.max_local_bsz[gpu_type])
    assert np.all(good >= 0)
    assert np.all((good > 0) == (local > 0))


@settings(max_examples=40, deadline=None)
@given(p=params_st, phi=st.floats(1.0, 1e6), factor=st.floats(1.01, 100.0),
       gpus=st.integers(1, 64))
def test_goodput_nondecreasing_in_noise_scale(p, phi, factor, gpus) -> None:
    # For M >= M0, E(M) = (phi + M0) / (phi + M) grows with phi, so the optimum cannot drop.
    low = GoodputModel(SMALL_APP, {"t": p}, phi).goodput("t", -(-gpus // 8), gpus)
    high = GoodputModel(SMALL_APP, {"t": p}, phi * factor).goodput("t", -(-gpus // 8), gpus)
    assert high >= low * (1 - 1e-12)


def test_goodput_zero_for_impossible_configs() -> None:
    model = true_model("bert")  # max batch 384
    nodes = np.array([1, 0, 2, 1, 50])
    gpus = np.array([0, 1, 1, 8, 400])
    assert np.array_equal(model.goodput("aws", nodes, gpus) > 0, [False, False, False, True, False])
    assert np.all(model.goodput("h100", [1, 1], [1, 2]) == 0)


def test_mixed_types_broadcast_and_cache() -> None:
    model = true_model("cifar10")
    types = np.array(["aws", "rtx", "dgx-ext", "v100"])
    nodes, gpus = np.array([1, 1, 2, 1]), np.array([4, 8, 16, 1])
    mixed = model.goodput(types, nodes, gpus, 0.3)
    single = [float(model.goodput(str(t), n, g, 0.3)) for t, n, g in zip(types, nodes, gpus, strict=True)]
    assert mixed.tolist() == pytest.approx(single) and mixed[-1] == 0
    grid = model.goodput("rtx", np.array([[1], [2]]), np.array([4, 8, 16]), 0.5)
    assert grid.shape == (2, 3) and np.all(grid > 0)
    # Later progress -> larger noise scale -> more goodput at scale (same cached grid).
    assert model.goodput("aws", 4, 16, 0.9) > model.goodput("aws", 4, 16, 0.0)
    before = model.goodput("aws", 1, 4)
    p = model.params["aws"]
    model.set_params("aws", ThroughputParams(p.alpha_c * 2, p.beta_c * 2, p.alpha_r, p.beta_r,
                                             p.alpha_n, p.beta_n, p.gamma))
    assert model.goodput("aws", 1, 4) < before


def test_bad_input_errors() -> None:
    model = true_model("imagenet")
    with pytest.raises(InputError, match="num_nodes"):
        model.goodput("aws", -1, 4)
    with pytest.raises(InputError, match="num_gpus"):
        model.goodput("aws", 1, 2.5)
    with pytest.raises(InputError, match="progress"):
        model.goodput("aws", 1, 4, progress=-0.1)
    with pytest.raises(InputError, match="local_bsz"):
        model.throughput("aws", 1, 4, -32)
    with pytest.raises(InputError, match="num_gpus"):
        model.throughput("aws", 1, 0, 32)
    with pytest.raises(InputError, match="gpu_type='h100'"):
        model.throughput("h100", 1, 1, 32)
    with pytest.raises(InputError, match="num_nodes"):
        model.goodput("aws", "two", 4)
    with pytest.raises(InputError, match="batch_size"):
        model.efficiency(-5)


def test_phi_table_interpolation() -> None:
    table = PhiTable(np.array([0.0, 0.5, 1.0]), np.array([10.0, 1000.0, 1000.0]))
    assert table.at(0.25) == pytest.approx(100.0)  # geometric midpoint
    assert table(np.array([0.0, 0.25, 2.0])).tolist() == pytest.approx([10.0, 100.0, 1000.0])
    assert table.at(0.7) == pytest.approx(float(table(0.7)))
    with pytest.raises(InputError, match="phi"):
        PhiTable(np.array([0.0, 1.0]), np.array([1.0, 0.0]))


def test_throughput_table_and_protocol() -> None:
    table = ThroughputTable({"k80": 1.5, "v100": 6.0})
    assert table.goodput("v100", [1, 1, 2], [1, 4, 8]).tolist() == [6.0, 24.0, 48.0]
    assert table.goodput("p100", 1, 4) == 0.0
    assert table.gpu_types == ("k80", "v100")
    with pytest.raises(InputError, match="rates"):
        ThroughputTable({"k80": -1.0})
    assert isinstance(table, PerfModel)
    assert isinstance(true_model("ncf"), PerfModel)
