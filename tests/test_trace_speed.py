"""Issue 32, the 960-job trace: the shortcuts of the simulator's inner loop (kept fits, trusted
measurements, ...) against the computations they replace -- same fits, same decisions."""

from __future__ import annotations

import json

import numpy as np
import pytest

import heteroplan.perf.fit as fit_module
import heteroplan.perf.goodput as goodput_module
import heteroplan.policies.common as common_module
from heteroplan.cluster import preset
from heteroplan.errors import InputError
from heteroplan.perf.fit import clear_fit_cache, fit_compute, fit_throughput_params
from heteroplan.perf.measurements import Measurements
from heteroplan.perf.sia_data import bootstrap_model, true_model
from heteroplan.perf.throughput import ThroughputParams, sync_time
from heteroplan.scheduling import SchedulingSession
from heteroplan.sim import SimFidelity, make_policy, simulate
from heteroplan.sim.job_models import build_jobs
from heteroplan.workload.newtrace import NewTraceSpec, generate_newtrace

# (gpu type, nodes, GPUs, local batch) a job might be observed on, in order.
STEPS = [("aws", 1, 2, 64), ("aws", 1, 4, 64), ("rtx", 1, 2, 32), ("aws", 2, 8, 64),
         ("rtx", 2, 6, 32), ("aws", 1, 2, 64)]


def _observed(app: str, steps=STEPS) -> list[tuple[str, Measurements]]:
    """The ground truth's step and sync times on ``steps``, one observation each."""
    truth = true_model(app)
    out = []
    for gpu_type, n, k, m in steps:
        step = float(truth.step_time(gpu_type, n, k, m, 0))
        sync = float(sync_time(truth.params[gpu_type], n, k))
        out.append((gpu_type, Measurements(np.array([n]), np.array([k]), np.array([m]), np.array([step]),
                                           np.array([sync]))))
    return out


def test_kept_fit_is_the_fit_of_that_exact_input() -> None:
    clear_fit_cache()
    rows = Measurements.empty()
    for _, meas in _observed("cifar10", [s for s in STEPS if s[0] == "aws"]):
        rows = rows.concat(meas)
        fresh = fit_module._fit(rows, None, None, 0.05, 0.0, None, "tie")
        first = fit_throughput_params(rows)
        assert first == fresh
        assert fit_throughput_params(rows) is first  # kept
        # One step time 1% off is another input: its own fit, not the kept one.
        moved = Measurements(rows.num_nodes, rows.num_gpus, rows.local_bsz,
                             rows.step_time * np.r_[np.ones(len(rows) - 1), 1.01], rows.sync_time)
        assert fit_throughput_params(moved) == fit_module._fit(moved, None, None, 0.05, 0.0, None, "tie")
        assert fit_throughput_params(moved) != first
        # A warm start or prior is part of the input too.
        warm = fit_throughput_params(rows, init=fresh, prior=fresh)
        assert warm == fit_module._fit(rows, fresh, None, 0.05, 0.0, fresh, "tie")


@pytest.mark.parametrize("app", ["cifar10", "bert", "imagenet"])
def test_fit_reusing_the_last_point_equals_fit_evaluating_every_time(app, monkeypatch) -> None:
    rows = Measurements.empty()
    for _, meas in _observed(app):
        rows = rows.concat(meas)
        reused = fit_module._fit(rows, None, None, 0.05, 0.0, None, "tie")
        monkeypatch.setattr(fit_module, "REUSE_LAST_POINT", False)
        fresh = fit_module._fit(rows, None, None, 0.05, 0.0, None, "tie")
        monkeypatch.setattr(fit_module, "REUSE_LAST_POINT", True)
        assert reused == fresh


def _fits_along(app: str) -> list[dict]:
    model = bootstrap_model(app)
    seen = []
    for gpu_type, meas in _observed(app):
        model.observe_many(gpu_type, meas)
        seen.append({t: model.params[t] for t in model.gpu_types})
    return seen


@pytest.mark.parametrize("app", ["cifar10", "bert"])
def test_bootstrapped_fits_with_kept_fits_equal_fits_without(app, monkeypatch) -> None:
    clear_fit_cache()
    kept = [_fits_along(app), _fits_along(app)]  # the second model reuses the first's fits
    monkeypatch.setattr(fit_module.FITS, "capacity", 0)
    clear_fit_cache()
    fresh = _fits_along(app)
    assert kept[0] == fresh and kept[1] == fresh
    clear_fit_cache()


def test_simulation_with_kept_fits_equals_simulation_without(monkeypatch) -> None:
    jobs = generate_newtrace(NewTraceSpec(jobs=24, hours=2.0), seed=3)
    cluster = preset("sia-64")

    def run(name: str):
        result = simulate(jobs, cluster, make_policy(name), progress=False, record=True)
        return result.jobs, result.schedule, result.timeline

    clear_fit_cache()
    kept = {name: run(name) for name in ("sia", "pollux-sia")}
    monkeypatch.setattr(fit_module.FITS, "capacity", 0)
    clear_fit_cache()
    for name, want in kept.items():
        assert run(name) == want, name
    clear_fit_cache()


def test_trusted_measurements_equal_checked_ones() -> None:
    empty = Measurements.empty()
    assert len(empty) == 0 and empty is Measurements.empty()
    with pytest.raises(ValueError):  # shared, so read-only
        empty.step_time[...] = 1.0
    rows = [m for _, m in _observed("bert")]
    joined = rows[0]
    for m in rows[1:]:
        joined = joined.concat(m)
    checked = Measurements(*(np.concatenate([getattr(m, c) for m in rows]) for c in
                             ("num_nodes", "num_gpus", "local_bsz", "step_time", "sync_time")))
    for part in (joined, joined.select(joined.num_gpus > 2), joined.select(np.array([1, 1, 0]))):
        cols = [getattr(part, c) for c in ("num_nodes", "num_gpus", "local_bsz", "step_time", "sync_time")]
        assert all(c.dtype == np.float64 and c.ndim == 1 and not c.flags.writeable for c in cols)
    for c in ("num_nodes", "num_gpus", "local_bsz", "step_time", "sync_time"):
        assert np.array_equal(getattr(joined, c), getattr(checked, c))
        assert np.array_equal(getattr(joined.select(np.array([1, 1, 0])), c), getattr(checked, c)[[1, 1, 0]])
    with pytest.raises(InputError, match="other"):
        joined.concat([1, 2])
    with pytest.raises(InputError, match="mask"):
        joined.select(np.array([True, False]))


def test_session_visits_finished_jobs_once_and_keeps_their_records(tmp_path) -> None:
    """Rounds skip finished jobs; a report to a finished job is still settled (its flag cleared)."""
    session = SchedulingSession(preset("sia-64"), make_policy("fifo"))
    for i in range(5):
        session.submit(f"j{i}", arrival_time=0.0, application="cifar10", perf_model=None, total_work=100.0)
    first = session.round(0.0)
    assert [d.job_id for d in first] == [f"j{i}" for i in range(5)]
    for i in range(5):
        session.report(f"j{i}", work_done=10.0)
    session.finish("j1", 30.0)
    session.finish("j3", 40.0)
    second = session.round(60.0)
    assert [d.job_id for d in second] == ["j0", "j2", "j4"]
    session.report("j3", work_done=100.0)  # a round after it finished
    for i in (0, 2, 4):
        session.report(f"j{i}", work_done=20.0)
    session.round(120.0)
    saved = json.loads(session.save(tmp_path / "s.json").read_text())
    flags = {j["job_id"]: j["reported"] for j in saved["jobs"]}
    assert flags == dict.fromkeys(flags, False)
    assert session.unfinished() == ("j0", "j2", "j4")
    assert session.record("j3").finish_time == 40.0 and session.record("j1").finish_time == 30.0


def test_per_epoch_shortcuts_equal_the_grad_stats() -> None:
    """A job's epoch, epoch end, noise scale and efficiency (kept per batch and epoch) against
    :class:`GradStats` asked directly, across progress values including the epoch ends."""
    spec = generate_newtrace(NewTraceSpec(jobs=1, hours=1.0, mix={"bert": 1.0}), seed=0)[0]
    (job,) = build_jobs([spec], preset("sia-64"), True, None, SimFidelity())
    grad = job.grad
    ends = grad.epoch_ends
    probes = np.concatenate([[0.0], ends[:5], np.nextafter(ends[:5], 0), np.linspace(0, 1, 23), [1.0]])
    for batch in (job.app.init_batch_size, 3 * job.app.init_batch_size):
        for fraction in probes:
            job.done = float(fraction) * job.total_work
            job.batch_size = batch
            fd = job.fraction_done
            assert job._epoch() == grad.epoch(fd)
            later = ends[ends > fd]
            want = float(later[0]) * job.total_work if len(later) and later[0] < 1.0 else np.inf
            assert job.next_rate_change() == want
            assert job._phi() == grad.phi(batch, fd)
            assert job._efficiency(batch) == grad.efficiency(batch, fd)


def test_profile_only_types_keep_the_compute_fit_of_their_rows() -> None:
    """Without multi-GPU data a type's parameters are the compute fit of its 1-GPU rows."""
    model = bootstrap_model("cifar10")
    for gpu_type in model.gpu_types:
        meas = model.observations(gpu_type)
        assert model.source(gpu_type) == "profile"
        assert model.params[gpu_type] == ThroughputParams(*fit_compute(meas.local_bsz, meas.step_time))
    truth = true_model("cifar10")
    model.observe("aws", [1], 16, float(truth.step_time("aws", 1, 1, 16, 0)), 0.0)  # still 1-GPU only
    meas = model.observations("aws")
    assert model.params["aws"] == ThroughputParams(*fit_compute(meas.local_bsz, meas.step_time))


def test_kept_grids_give_the_goodputs_of_fresh_grids(monkeypatch) -> None:
    """Goodputs and batch choices from grids kept across models (same parameters, other
    models, after refits) equal those computed from scratch; other parameters get other grids."""
    types = np.array(["aws", "rtx", "dgx-ext", "aws", "rtx"], dtype=object)
    nodes, gpus = np.array([1, 1, 2, 2, 1]), np.array([1, 4, 8, 6, 2])

    def answers(model):
        out = [model.goodput(types, nodes, gpus, progress=0.3)]
        out += list(model.optimize(types, nodes, gpus, progress=0.6))
        out += list(model.optimize("rtx", 1, 4, progress=0.1))
        return out

    def models():
        first, second = bootstrap_model("bert"), bootstrap_model("bert")  # same profiles
        seen = [answers(first), answers(second)]
        for gpu_type, meas in _observed("bert"):
            first.observe_many(gpu_type, meas)
            seen.append(answers(first))
        return seen

    goodput_module.clear_grid_cache()
    kept = models()
    monkeypatch.setattr(goodput_module.GRIDS, "capacity", 0)  # every grid built anew
    goodput_module.clear_grid_cache()
    fresh = models()
    for a, b in zip(kept, fresh, strict=True):
        assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(kept[0], kept[-1], strict=True))  # refits matter
    goodput_module.clear_grid_cache()


def _records(jobs, name: str):
    result = simulate(jobs, preset("sia-64"), make_policy(name), progress=False, record=True)
    return result.jobs, result.schedule, result.timeline, result.rounds


@pytest.mark.parametrize("name", ["pollux", "pollux-sia"])
def test_pollux_with_kept_goodputs_equals_pollux_evaluating_every_round(name, monkeypatch) -> None:
    """Pollux's goodputs as one reference type and its fair-share goodputs, kept per job while
    its model (estimator, version, noise scale) is unchanged: the same records as evaluating
    every round (``model_state`` None: nothing kept)."""
    jobs = generate_newtrace(NewTraceSpec(jobs=30, hours=3.0), seed=5)
    kept = _records(jobs, name)
    monkeypatch.setattr(common_module, "model_state", lambda job: None)
    assert _records(jobs, name) == kept


@pytest.mark.parametrize("app", ["cifar10", "bert", "imagenet", "yolov3"])
def test_fit_calling_minpack_directly_equals_least_squares(app, monkeypatch) -> None:
    """Fits through MINPACK's lmder called as ``least_squares(method="lm")`` calls it: the same
    parameters, bit for bit, cold and warm-started, on noisy step times."""
    rng = np.random.default_rng(7)
    rows = Measurements.empty()
    for _, meas in _observed(app):
        step = meas.step_time * (1.0 + 0.05 * rng.standard_normal(len(meas)))
        rows = rows.concat(Measurements(meas.num_nodes, meas.num_gpus, meas.local_bsz, step, meas.sync_time))
        for init in (None, ThroughputParams(0.05, 0.002, 0.01, 0.001, 0.02, 0.002, 1.3)):
            monkeypatch.setattr(fit_module, "DIRECT_MINPACK", True)
            direct = fit_module._fit(rows, init, None, 0.05, 0.0, None, "tie")
            monkeypatch.setattr(fit_module, "DIRECT_MINPACK", False)
            assert direct == fit_module._fit(rows, init, None, 0.05, 0.0, None, "tie")
