"""Trace loaders, fitting against measured data, bootstrapping, shipped reference data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from heteroplan.errors import InputError
from heteroplan.perf.applications import APPLICATIONS, SIA_TYPE_NAMES
from heteroplan.perf.bootstrap import BootstrappedModel
from heteroplan.perf.evaluate import (
    holdout_split,
    learning_curve,
    projection_params,
    relative_errors,
)
from heteroplan.perf.fit import fit_compute, fit_throughput_params
from heteroplan.perf.goodput import GoodputModel
from heteroplan.perf.measurements import (
    Measurements,
    load_placements,
    load_scalability,
    load_validation,
    parse_placement,
)
from heteroplan.perf.sia_data import (
    bootstrap_model,
    build_reference,
    load_app_measurements,
    load_app_phi,
    true_model,
)
from heteroplan.perf.throughput import ThroughputParams, step_time

DATA = Path(__file__).parent / "data" / "sia"

# Median relative step-time error allowed on held-out configurations (median over 3 seeds).
# 10% everywhere except yolov3 on rtx/dgx-ext, whose measured step times are not monotone in
# the local batch (powers of two run faster): there the model's in-sample error is already
# 9.7% / 23.6% (benchmarks/goodput_fit.py), so hold-out gets in-sample + ~3 points.
HOLDOUT_LIMIT = {("yolov3", "rtx"): 0.13, ("yolov3", "dgx-ext"): 0.28}


# -- loaders ---------------------------------------------------------------------------


def test_parse_placement() -> None:
    assert parse_placement("22") == (2, 4)
    assert parse_placement("1444") == (4, 13)
    assert parse_placement((8, 8, 8)) == (3, 24)
    assert parse_placement(4) == (1, 4)
    for bad in ("", "2x2", "20", (), (1, 0)):
        with pytest.raises(InputError, match="placement"):
            parse_placement(bad)


def test_load_trace_files_any_column_order() -> None:
    # aws files list placement first, rtx/dgx-ext files last: columns are found by name.
    aws = load_placements(DATA / "cifar10" / "placements-aws.csv.gz")
    rtx = load_placements(DATA / "cifar10" / "placements-rtx.csv.gz")
    assert len(aws) == 1183 and len(rtx) == 446
    # "4444" = 4 nodes x 4 GPUs; "88" = 2 nodes x 8 GPUs.
    assert aws.num_gpus.max() == 16 and aws.num_nodes.max() == 4
    assert rtx.num_gpus.max() == 16 and rtx.num_nodes.max() == 2
    scal = load_scalability(DATA / "cifar10" / "scalability-aws.csv.gz")
    assert scal.num_nodes.max() == 16 and np.all(scal.num_gpus >= scal.num_nodes)
    run = load_validation(DATA / "cifar10" / "validation-128.csv.gz")
    assert run.batch_size == 128 and len(run.progress) == 100


@pytest.mark.parametrize(("text", "match"), [
    ("placement,local_bsz,step_time\n1,32,0.1\n", r"placements-aws\.csv: column='sync_time'"),
    ("placement,local_bsz,step_time,sync_time\n1,32,fast,0.0\n", "step_time"),
    ("placement,local_bsz,step_time,sync_time\n1,-4,0.1,0.0\n", "local_bsz"),
])
def test_bad_placements_file_names_file_and_column(tmp_path: Path, text: str, match: str) -> None:
    bad = tmp_path / "placements-aws.csv"
    bad.write_text(text)
    with pytest.raises(InputError, match=match):
        load_placements(bad)


def test_missing_placements_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        load_placements(tmp_path / "nope.csv")


def test_measurements_validation() -> None:
    with pytest.raises(InputError, match="num_gpus"):
        Measurements([1], [0], [4], [0.1], [0.0])
    with pytest.raises(InputError, match="num_gpus"):
        Measurements([2], [1], [4], [0.1], [0.0])
    with pytest.raises(InputError, match="length"):
        Measurements([1, 1], [1], [4], [0.1], [0.0])


# -- fitting ---------------------------------------------------------------------------


def _synthetic(p: ThroughputParams) -> Measurements:
    rng = np.random.default_rng(0)
    placements = ["1", "2", "4", "8", "22", "44", "88", "1111", "8888"]
    rows = [(pl, m) for pl in placements for m in (4, 16, 64, 256)]
    nodes = np.array([len(pl) for pl, _ in rows], float)
    gpus = np.array([sum(map(int, pl)) for pl, _ in rows], float)
    m = np.array([m for _, m in rows], float)
    t = step_time(p, nodes, gpus, m)
    return Measurements(nodes, gpus, m, t, rng.uniform(0, 0.01, len(t)))


def test_fit_recovers_generating_model() -> None:
    truth = ThroughputParams(0.05, 0.002, 0.03, 0.004, 0.2, 0.01, gamma=2.5)
    meas = _synthetic(truth)
    fitted = fit_throughput_params(meas, prior_weight=0.0)
    assert np.max(relative_errors(fitted, meas)) < 1e-3
    # Configurations the fit never saw (3 nodes, 24 GPUs; 6 GPUs on one node).
    probe_n, probe_k = np.array([3, 1, 2]), np.array([24, 6, 12])
    assert step_time(fitted, probe_n, probe_k, 32) == pytest.approx(
        step_time(truth, probe_n, probe_k, 32), rel=1e-3)


def test_fit_holds_unsupported_parameters() -> None:
    truth = ThroughputParams(0.05, 0.002, 0.03, 0.004, 0.2, 0.01, gamma=1.0)
    meas = _synthetic(truth)
    single = meas.select(meas.num_gpus == 1)
    p1 = fit_throughput_params(single)
    assert (p1.alpha_r, p1.beta_r, p1.alpha_n, p1.beta_n) == (0, 0, 0, 0)
    assert (p1.alpha_c, p1.beta_c) == pytest.approx((0.05, 0.002), rel=1e-3)
    fb = ThroughputParams(1.0, 1.0, 0.5, 0.1, 0.7, 0.2, 3.0)
    p2 = fit_throughput_params(single, fallback=fb)
    assert (p2.alpha_r, p2.beta_r, p2.alpha_n, p2.beta_n, p2.gamma) == (0.5, 0.1, 0.7, 0.2, 3.0)
    intra = fit_throughput_params(meas.select(meas.num_nodes == 1), prior_weight=0.0)
    assert (intra.alpha_n, intra.beta_n) == (intra.alpha_r, intra.beta_r)
    assert step_time(intra, 1, [3, 6], 32) == pytest.approx(step_time(truth, 1, [3, 6], 32), rel=0.01)
    assert fit_compute(np.array([8.0, 8.0]), np.array([0.2, 0.2])) == pytest.approx((0.1, 0.1 / 8))
    with pytest.raises(InputError, match="meas"):
        fit_throughput_params(Measurements.empty())


@pytest.mark.parametrize("app", sorted(APPLICATIONS))
def test_holdout_error_on_measured_placements(app: str) -> None:
    for gpu_type in SIA_TYPE_NAMES:
        meas = load_app_measurements(DATA, app, gpu_type, scalability=False)
        errs = []
        for seed in range(3):
            train, test = holdout_split(meas, 0.3, seed)
            assert not np.any(train & test) and np.all(meas.num_gpus[test] > 1)
            params = fit_throughput_params(meas.select(train))
            errs.append(np.median(relative_errors(params, meas.select(test))))
        limit = HOLDOUT_LIMIT.get((app, gpu_type), 0.10)
        assert np.median(errs) < limit, (app, gpu_type, errs)


def test_goodput_model_fit_factory() -> None:
    meas = {t: load_app_measurements(DATA, "ncf", t, scalability=False) for t in SIA_TYPE_NAMES}
    model = GoodputModel.fit(true_model("ncf").app, meas, 1e6)
    for gpu_type, m in meas.items():
        direct = fit_throughput_params(m)
        assert model.params[gpu_type] == direct


def test_ignoring_sync_would_fail_the_holdout() -> None:
    # Sanity of the error metric: a compute-only model misses multi-node steps badly.
    meas = load_app_measurements(DATA, "bert", "aws", scalability=False)
    p = fit_throughput_params(meas)
    compute_only = ThroughputParams(p.alpha_c, p.beta_c)
    multi = meas.select(meas.num_nodes > 1)
    assert np.median(relative_errors(compute_only, multi)) > 0.3
    assert np.median(relative_errors(p, multi)) < 0.1


# -- bootstrapping ---------------------------------------------------------------------


def test_bootstrap_starts_from_profiles_and_learns() -> None:
    model = bootstrap_model("cifar10")
    assert {model.source(t) for t in SIA_TYPE_NAMES} == {"profile"}
    assert set(model.gpu_types) == set(SIA_TYPE_NAMES)
    # No multi-GPU data anywhere: sync is free, so 8 GPUs give 8x the 1-GPU throughput.
    assert model.throughput("rtx", 1, 8, 64) == pytest.approx(8 * model.throughput("rtx", 1, 1, 64))

    aws = load_app_measurements(DATA, "cifar10", "aws", scalability=False)
    rtx = load_app_measurements(DATA, "cifar10", "rtx", scalability=False)
    before = model.goodput("rtx", 2, 16, 0.5)
    model.observe("aws", "22", 128, 0.2, 0.05)
    assert model.source("aws") == "fit" and model.source("rtx") == "projected"
    model.observe_many("aws", aws.select(aws.num_gpus > 1))
    assert len(model.observations("aws")) == 1 + len(aws)
    # Borrowed sync cost: rtx goodput at 16 GPUs drops from the free-sync estimate.
    assert model.goodput("rtx", 2, 16, 0.5) < before
    projected = relative_errors(model.params["rtx"], rtx.select(rtx.num_gpus > 1))
    assert np.median(projected) < 0.15  # measured 5.4% (benchmarks/goodput_fit.py)
    # Real rtx data replaces the projection; the lazy refit equals a cold fit on the same data.
    model.observe_many("rtx", rtx.select(rtx.num_gpus > 1))
    assert model.source("rtx") == "fit"
    cold = fit_throughput_params(model.observations("rtx"))
    warm = model.params["rtx"]
    assert np.median(relative_errors(warm, rtx)) == pytest.approx(
        np.median(relative_errors(cold, rtx)), abs=0.005)
    assert np.median(relative_errors(warm, rtx)) < 0.05


def test_learning_curve_improves_on_projection() -> None:
    # Sia's bootstrapped model, knowing aws/rtx/dgx-ext except the target's multi-GPU steps,
    # observes 8 of the target's configurations; it must beat the pure projection clearly.
    projected, learned = [], []
    for app in ("cifar10", "imagenet"):
        data = {t: load_app_measurements(DATA, app, t, scalability=False) for t in SIA_TYPE_NAMES}
        for target in SIA_TYPE_NAMES:
            errs = learning_curve(true_model(app).app, data, target, steps=(8,))
            projected.append(errs[0])
            learned.append(errs[-1])
            assert errs[-1] < 0.13, (app, target, errs)  # measured 3.6-12.1%
    assert np.median(learned) < 0.6 * np.median(projected)


def test_projection_scales_sync_by_one_gpu_ratio() -> None:
    ref = ThroughputParams(0.1, 0.01, 0.2, 0.02, 0.4, 0.04, 2.0)
    # Target 1-GPU steps are exactly twice the reference's: every time doubles.
    m = np.array([4.0, 8.0, 16.0])
    target = Measurements(np.ones(3), np.ones(3), m, 2 * (0.1 + 0.01 * m), np.zeros(3))
    proj = projection_params(target, ref)
    assert step_time(proj, [1, 2], [4, 8], 8) == pytest.approx(2 * step_time(ref, [1, 2], [4, 8], 8))
    flat = projection_params(target, ref, scale_sync=False)
    assert flat.alpha_n == ref.alpha_n
    with pytest.raises(InputError, match="profile"):
        projection_params(target.select(np.zeros(3, bool)), ref)


def test_bootstrap_bad_input() -> None:
    model = bootstrap_model("bert", profiled_types=("aws",))
    assert model.gpu_types == ("aws",) and model.goodput("rtx", 1, 1) == 0
    with pytest.raises(InputError, match="placement"):
        model.observe("aws", "0", 4, 0.1, 0.0)
    with pytest.raises(InputError, match="step_time"):
        model.observe("aws", "2", 4, -0.1, 0.0)
    with pytest.raises(InputError, match="profiled_types"):
        bootstrap_model("bert", profiled_types=("h100",))
    with pytest.raises(InputError, match="profiles"):
        BootstrappedModel(true_model("bert").app, {"aws": Measurements.empty()}, 100.0)


# -- shipped reference data ------------------------------------------------------------


def test_shipped_reference_reproducible_from_traces() -> None:
    rebuilt = build_reference(DATA)
    probe_n = np.array([1, 1, 1, 2, 4])
    probe_k = np.array([1, 2, 8, 8, 16])
    for app in APPLICATIONS:
        shipped = true_model(app)
        entry = rebuilt["apps"][app]
        assert entry["phi"]["phi"] == pytest.approx(shipped.phi.phi.tolist(), rel=1e-3)
        for gpu_type in SIA_TYPE_NAMES:
            p = ThroughputParams.from_dict(entry["params"][gpu_type])
            assert step_time(p, probe_n, probe_k, 16) == pytest.approx(
                shipped.step_time(gpu_type, probe_n, probe_k, 16), rel=1e-3)


def test_true_model_matches_measurements() -> None:
    for app in APPLICATIONS:
        model = true_model(app)
        assert model.gpu_types == SIA_TYPE_NAMES
        for gpu_type in SIA_TYPE_NAMES:
            meas = load_app_measurements(DATA, app, gpu_type)
            limit = HOLDOUT_LIMIT.get((app, gpu_type), 0.10)
            err = np.abs(model.step_time(gpu_type, meas.num_nodes, meas.num_gpus,
                                         meas.local_bsz) / meas.step_time - 1)
            assert np.median(err) < limit, (app, gpu_type)


def test_phi_grows_with_progress() -> None:
    for app in APPLICATIONS:
        phi = load_app_phi(DATA, app)
        assert phi.progress[-1] == pytest.approx(1.0, abs=1e-3)
        # The gradient noise scale rises during training (Pollux, McCandlish et al.).
        assert phi.at(1.0) > 3 * phi.at(0.0), app
