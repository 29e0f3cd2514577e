"""The Sia artifact's simulator mechanisms: slowdowns, estimated batch size, per-batch gradient
statistics, measured noise scale, profiling time (heteroplan.sim.fidelity)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from heteroplan.cluster import preset
from heteroplan.errors import InputError
from heteroplan.perf.applications import get_app
from heteroplan.perf.gradstats import GradStats
from heteroplan.perf.measurements import load_validation
from heteroplan.perf.sia_data import grad_stats
from heteroplan.policies.base import Allocation
from heteroplan.sim.fidelity import SIA_SLOWDOWNS, SimFidelity
from heteroplan.sim.job_models import build_jobs
from heteroplan.sim.loop import simulate
from heteroplan.sim.progress_models import GangProgress
from heteroplan.workload.sia import JobSpec

DATA = Path(__file__).parent / "data" / "sia"
CLUSTER = preset("sia-64")


def _runs(app: str):
    return [load_validation(f) for f in sorted((DATA / app).glob("validation-*.csv.gz"))]


class FixedPolicy:
    """Gives every job ``gpus`` GPUs of ``gpu_type`` on whole nodes (elastic or not)."""

    round_length = 60.0
    forking = False

    def __init__(self, gpu_type: str, gpus: int, elastic: bool = True) -> None:
        self.gpu_type, self.gpus, self.elastic, self.name = gpu_type, gpus, elastic, "fixed"
        nodes = [n for n in CLUSTER.nodes if n.gpu_type == gpu_type]
        left, self.placement = gpus, []
        for node in nodes:
            if left <= 0:
                break
            take = min(left, node.num_gpus)
            self.placement.append((node.name, take))
            left -= take

    def allocate(self, cluster, jobs, now):
        return {j.job_id: Allocation(self.gpu_type, self.gpus, tuple(self.placement)) for j in jobs[:1]}


# -- gradient statistics -------------------------------------------------------------------

def test_shipped_grad_stats_match_the_traces() -> None:
    built = GradStats.from_runs(_runs("cifar10"), 128, 100)
    shipped = grad_stats("cifar10")
    np.testing.assert_allclose(shipped.batch_sizes, built.batch_sizes)
    np.testing.assert_allclose(shipped.grad_sqr, built.grad_sqr, rtol=1e-4)  # fixtures keep 5 digits
    np.testing.assert_allclose(shipped.grad_var, built.grad_var, rtol=1e-4)
    np.testing.assert_allclose(shipped.epoch_ends, built.epoch_ends, rtol=1e-4)


def test_phi_during_an_epoch_is_the_runs_row_for_that_epoch() -> None:
    runs = {r.batch_size: r for r in _runs("cifar10")}
    gs = GradStats.from_runs(list(runs.values()), 128, 100)
    ends = np.min(np.stack([r.progress[:100] for r in runs.values()]), axis=0)
    total = ends[-1]
    for epoch in (0, 10, 49, 99):
        start = 0.0 if epoch == 0 else ends[epoch - 1] / total
        inside = start + 0.5 * (ends[epoch] / total - start)
        r = runs[512]
        assert gs.epoch(inside) == epoch
        assert gs.phi(512, inside) == pytest.approx(128 * r.grad_var[epoch] / r.grad_sqr[epoch], rel=1e-9)
    # The end of an epoch starts the next one (the artifact's epoch counter).
    assert gs.epoch(ends[9] / total) == 10
    # Between two runs' batch sizes, grad_sqr and grad_var are interpolated linearly.
    e = gs.epoch(0.3)
    lo, hi = runs[512], runs[1024]
    sqr = 0.25 * lo.grad_sqr[e] + 0.75 * hi.grad_sqr[e]
    var = 0.25 * lo.grad_var[e] + 0.75 * hi.grad_var[e]
    assert gs.stats(896, 0.3) == pytest.approx((sqr, var), rel=1e-12)
    phi = 128 * var / sqr
    assert gs.efficiency(896, 0.3) == pytest.approx((phi + 128) / (phi + 896), rel=1e-12)
    assert gs.efficiency(128, 0.7) == pytest.approx(1.0)


def test_noise_scale_grows_during_training_and_with_the_runs_batch() -> None:
    gs = grad_stats("cifar10")
    assert gs.phi(512, 0.9) > 10 * gs.phi(512, 0.05)
    assert gs.phi(4096, 0.5) > 2 * gs.phi(128, 0.5)


def test_grad_stats_reject_bad_input() -> None:
    ok = dict(init_batch_size=8, batch_sizes=[8.0, 16.0], epoch_ends=[0.5, 1.0],
              grad_sqr=np.ones((2, 2)), grad_var=np.ones((2, 2)))
    GradStats(**ok)
    with pytest.raises(InputError, match="grad_var"):
        GradStats(**{**ok, "grad_var": np.ones((2, 3))})
    with pytest.raises(InputError, match="grad_sqr"):
        GradStats(**{**ok, "grad_sqr": np.array([[1.0, -1.0], [1.0, 1.0]])})
    with pytest.raises(InputError, match="batch_sizes"):
        GradStats(**{**ok, "batch_sizes": [16.0, 8.0]})
    with pytest.raises(InputError, match="progress"):
        GradStats(**ok).phi(8, -0.1)
    with pytest.raises(InputError, match="batch_size"):
        GradStats(**ok).efficiency(0, 0.1)


# -- simulator options ----------------------------------------------------------------------

def test_fidelity_rejects_bad_input() -> None:
    with pytest.raises(InputError, match="fidelity.batch_size"):
        SimFidelity(batch_size="oracle")
    with pytest.raises(InputError, match="fidelity.grad_stats"):
        SimFidelity(grad_stats="mean")
    with pytest.raises(InputError, match=r"fidelity.slowdown\[cifar10\]"):
        SimFidelity(slowdown={"cifar10": 0.0})
    with pytest.raises(InputError, match="fidelity.profiling_time"):
        SimFidelity(profiling_time=-1.0)
    with pytest.raises(InputError, match="fidelity"):
        simulate([JobSpec("a", 0.0, "cifar10", 1, 128)], CLUSTER, FixedPolicy("rtx", 1), fidelity="sia")
    assert SimFidelity().slowdown_of("cifar10") == 1.8 and SimFidelity().slowdown_of("unknown") == 1.0


def test_defaults_are_the_sia_artifacts() -> None:
    f = SimFidelity()
    assert dict(f.slowdown) == dict(SIA_SLOWDOWNS)
    assert (f.batch_size, f.grad_stats, f.profiling_time) == ("estimated", "batch", 0.0)


def test_slowdown_stretches_the_run_by_its_factor() -> None:
    job = [JobSpec("j", 0.0, "deepspeech2", 1, 20)]
    base = SimFidelity.ideal()
    times = {}
    for factor in (1.0, 2.0):
        fid = dataclasses.replace(base, slowdown={"deepspeech2": factor})
        res = simulate(job, CLUSTER, FixedPolicy("dgx-ext", 1, elastic=False), fidelity=fid, progress=False)
        rec = res.jobs[0]
        times[factor] = rec.finish_time - rec.start_time - get_app("deepspeech2").restart_delay
    # Progress is evaluated per 60 s round, so the halved rate sees phi a little later.
    assert times[2.0] / times[1.0] == pytest.approx(2.0, rel=0.01)


def test_elastic_job_runs_at_its_estimators_best_batch() -> None:
    spec = [JobSpec("c", 0.0, "cifar10", 1, 128)]
    policy = FixedPolicy("aws", 8)
    job = build_jobs(spec, CLUSTER, True, None, SimFidelity())[0]
    alloc = policy.allocate(CLUSTER, [job.view()], 0.0)["c"]
    est = job.estimator.optimize("aws", 2, 8, progress=0.0)
    truth = job.truth.optimize("aws", 2, 8, progress=0.0)
    assert int(est[1]) != int(truth[1])  # the 1-GPU-profile model misjudges sync on 2 nodes
    _, local, accum = GangProgress(CLUSTER).rate(job, alloc)
    assert (local, accum) == (int(est[1]), int(est[2]))
    oracle = build_jobs(spec, CLUSTER, True, None, SimFidelity(batch_size="truth"))[0]
    _, local, accum = GangProgress(CLUSTER).rate(oracle, alloc)
    assert (local, accum) == (int(truth[1]), int(truth[2]))


def test_progress_uses_truth_throughput_at_the_chosen_batch_and_its_grad_stats() -> None:
    spec = [JobSpec("c", 0.0, "cifar10", 1, 128)]
    policy = FixedPolicy("aws", 8)
    job = build_jobs(spec, CLUSTER, True, None, SimFidelity())[0]
    alloc = policy.allocate(CLUSTER, [job.view()], 0.0)["c"]
    rate, local, accum = GangProgress(CLUSTER).rate(job, alloc)
    batch = 8 * local * (accum + 1)
    expected = float(job.truth.throughput("aws", 2, 8, local, accum)) \
        * grad_stats("cifar10").efficiency(batch, 0.0) / 1.8
    assert rate == pytest.approx(expected, rel=1e-12)


def test_estimator_sees_the_noise_scale_measured_at_its_batch() -> None:
    spec = [JobSpec("c", 0.0, "cifar10", 1, 128)]
    job = build_jobs(spec, CLUSTER, True, None, SimFidelity())[0]
    assert job.estimator.measured_phi is None
    simulate([job], CLUSTER, FixedPolicy("rtx", 4), progress=False)
    # After the last round the estimator holds phi of the run at the job's batch, final epoch.
    gs = grad_stats("cifar10")
    assert job.estimator.measured_phi is not None
    candidates = [gs.phi(job.batch_size, p) for p in np.linspace(0.9, 1.0, 50)]
    assert min(abs(job.estimator.measured_phi / c - 1) for c in candidates) < 1e-9
    # The ideal simulator leaves the estimator on its phi table.
    ideal = build_jobs(spec, CLUSTER, True, None, SimFidelity.ideal())
    simulate(ideal, CLUSTER, FixedPolicy("rtx", 4), fidelity=SimFidelity.ideal(), max_time=600, progress=False)
    assert ideal[0].estimator.measured_phi is None


def test_profiling_delays_the_first_allocation_by_one_profile_per_type() -> None:
    spec = [JobSpec("c", 30.0, "cifar10", 1, 128)]
    fid = SimFidelity(profiling_time=100.0)
    res = simulate(spec, CLUSTER, FixedPolicy("rtx", 1), fidelity=fid, max_time=1200, progress=False)
    # 3 GPU types x 100 s after the arrival at 30 s: ready at 330 s, first round boundary 360 s.
    assert res.jobs[0].start_time == 360.0
    free = simulate(spec, CLUSTER, FixedPolicy("rtx", 1), max_time=1200, progress=False)
    assert free.jobs[0].start_time == 60.0
    # Rigid baselines get oracle profiles: no profiling delay.
    rigid = simulate(spec, CLUSTER, FixedPolicy("rtx", 1, elastic=False), fidelity=fid, max_time=1200,
                     progress=False)
    assert rigid.jobs[0].start_time == 60.0


# -- scale-up rule ---------------------------------------------------------------------------

def test_scale_up_limit_is_twice_the_most_gpus_ever_run() -> None:
    from heteroplan.policies.base import JobState
    from heteroplan.policies.common import max_gpus_this_round

    shrunk = JobState("j", "cifar10", 0.0, max_gpus=64, allocation=Allocation("rtx", 2),
                      last_gpus=2, max_gpus_run=16)
    assert max_gpus_this_round(shrunk, 2.0) == 32  # Sia/Pollux artifacts: 2 x max profiled
    assert max_gpus_this_round(shrunk, 2.0, "current") == 4
    assert max_gpus_this_round(JobState("n", "cifar10", 0.0), 2.0) == 1  # new jobs start at 1 GPU
    capped = JobState("c", "bert", 0.0, max_gpus=24, max_gpus_run=16)
    assert max_gpus_this_round(capped, 2.0) == 24
    with pytest.raises(InputError, match="scale_up_from"):
        max_gpus_this_round(shrunk, 2.0, "peak")


def test_simulator_reports_the_most_gpus_a_job_ran_on() -> None:
    spec = [JobSpec("c", 0.0, "cifar10", 1, 128)]
    seen = []

    class Recording(FixedPolicy):
        def allocate(self, cluster, jobs, now):
            seen.extend(jobs)
            return super().allocate(cluster, jobs, now)

    simulate(spec, CLUSTER, Recording("dgx-ext", 8), max_time=300, progress=False)
    first, later = seen[0], seen[-1]  # the session carries the bookkeeping between rounds
    assert first.max_gpus_run == 0 and first.last_gpus == 0
    assert later.max_gpus_run == 8 and later.last_gpus == 8 and later.batch_size > 0
