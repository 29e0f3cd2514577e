"""Where a new job's 1-GPU profiles come from: the measured traces or the simulator's ground truth."""

from __future__ import annotations

import numpy as np
import pytest

from heteroplan.cluster import preset
from heteroplan.errors import InputError
from heteroplan.perf.applications import SIA_TYPE_NAMES
from heteroplan.perf.sia_data import ProfileSource, bootstrap_model, true_model
from heteroplan.sim.fidelity import SimFidelity
from heteroplan.sim.job_models import build_jobs
from heteroplan.workload.sia import JobSpec

APPS = ("bert", "cifar10", "deepspeech2", "imagenet", "yolov3")


def _one_gpu(model, gpu_type: str, local: np.ndarray) -> np.ndarray:
    one = np.ones(len(local), dtype=int)
    return np.asarray(model.throughput(gpu_type, one, one, local, 0 * one), dtype=float)


@pytest.mark.parametrize("app", APPS)
def test_truth_profiles_give_the_ground_truths_one_gpu_speed(app):
    """Profiled from the truth, the starting model runs one GPU as the truth does (samples/s),
    at every local batch a GPU of each type holds."""
    truth, model = true_model(app), bootstrap_model(app, profiles_from="truth")
    for gpu_type in SIA_TYPE_NAMES:
        local = np.unique(np.geomspace(1, truth.max_local_bsz(gpu_type), 6).astype(int))
        np.testing.assert_allclose(_one_gpu(model, gpu_type, local), _one_gpu(truth, gpu_type, local), rtol=1e-6)


def test_the_noisy_yolov3_traces_make_one_a100_look_faster_than_the_truth_runs_it():
    """The disagreement the option removes: the measured 1-GPU yolov3 steps on dgx-ext (81
    samples/s at local batch 32) against the model fitted to all of yolov3's measurements
    (40 samples/s); other types agree within 25%."""
    truth = true_model("yolov3")
    traces, truthful = bootstrap_model("yolov3"), bootstrap_model("yolov3", profiles_from="truth")
    local = np.array([32])
    assert _one_gpu(traces, "dgx-ext", local)[0] > 1.4 * _one_gpu(truth, "dgx-ext", local)[0]
    assert _one_gpu(truthful, "dgx-ext", local)[0] == pytest.approx(_one_gpu(truth, "dgx-ext", local)[0], rel=1e-6)
    for gpu_type in ("aws", "rtx"):
        local = np.array([truth.max_local_bsz(gpu_type)])
        ratio = _one_gpu(traces, gpu_type, local)[0] / _one_gpu(truth, gpu_type, local)[0]
        assert 0.75 < ratio < 1.25


def test_the_simulator_builds_jobs_with_the_fidelitys_profiles():
    spec = JobSpec(name="yolov3-0", arrival_time=0.0, application="yolov3", num_replicas=4, batch_size=64)
    local = np.array([32])
    speeds = {}
    for source in ("traces", "truth"):
        (job,) = build_jobs([spec], preset("sia-64"), True, None, SimFidelity(profiles=source))
        speeds[source] = _one_gpu(job.estimator, "dgx-ext", local)[0]
        assert speeds[source] == pytest.approx(
            _one_gpu(bootstrap_model("yolov3", profiles_from=source), "dgx-ext", local)[0], rel=1e-9)
    assert speeds["traces"] > 1.4 * speeds["truth"]


def test_bad_profile_source_names_the_field():
    with pytest.raises(InputError, match="fidelity.profiles"):
        SimFidelity(profiles="measured")
    with pytest.raises(InputError, match="profiles_from"):
        bootstrap_model("yolov3", profiles_from="measured")


def test_a_sweep_fidelity_may_choose_the_profiles():
    from heteroplan.sim.sweep.spec import _fidelity

    assert _fidelity(0, {"label": "trace-profiles", "profiles": "traces"}).build().profiles is ProfileSource.TRACES
    assert _fidelity(0, {"preset": "ideal"}).build().profiles is ProfileSource.TRUTH
    with pytest.raises(InputError, match=r"fidelities\[0\]\.profiles"):
        _fidelity(0, {"profiles": "measured"})


def test_the_simulator_profiles_new_jobs_on_its_ground_truth_by_default():
    """Default fidelity: a job is profiled at the speed the simulator then runs it at; the
    model-free helper keeps the measured traces (what a real job's profile would be)."""
    assert SimFidelity().profiles is ProfileSource.TRUTH
    assert SimFidelity(profiles="traces").profiles is ProfileSource.TRACES
    spec = JobSpec(name="yolov3-0", arrival_time=0.0, application="yolov3", num_replicas=4, batch_size=64)
    (job,) = build_jobs([spec], preset("sia-64"), True, None, SimFidelity())
    local = np.array([32])
    assert _one_gpu(job.estimator, "dgx-ext", local)[0] == pytest.approx(
        _one_gpu(true_model("yolov3"), "dgx-ext", local)[0], rel=1e-6)
    assert _one_gpu(bootstrap_model("yolov3"), "dgx-ext", local)[0] > 1.4 * _one_gpu(job.estimator, "dgx-ext", local)[0]
