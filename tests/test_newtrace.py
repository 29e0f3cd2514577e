"""The newTrace-setting generator: mix, arrival span, requests, determinism, bad input."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from heteroplan.errors import InputError
from heteroplan.sim.sweep.spec import parse_sweep
from heteroplan.workload.newtrace import (
    NEWTRACE_MIX,
    REQUEST_WEIGHTS,
    NewTraceSpec,
    generate_newtrace,
)
from heteroplan.workload.sia import (
    JobSpec,
    bundled_workload,
    is_bundled_workload,
    read_sia_workload,
    write_sia_workload,
)


def test_mix_and_arrival_span_for_many_jobs():
    jobs = generate_newtrace(NewTraceSpec(jobs=40_000, hours=48.0, hourly_dispersion=1.0), seed=3)
    counts = collections.Counter(j.application for j in jobs)
    total = sum(NEWTRACE_MIX.values())
    for app, weight in NEWTRACE_MIX.items():
        assert counts[app] / len(jobs) == pytest.approx(weight / total, abs=0.01), app
    arrivals = [j.arrival_time for j in jobs]
    assert arrivals == sorted(arrivals)
    assert 0.0 <= arrivals[0] < 60.0 and 48 * 3600 - 60.0 < arrivals[-1] < 48 * 3600
    # uniform: each quarter of the window gets a quarter of the jobs
    for q in range(4):
        inside = sum(q * 12 * 3600 <= t < (q + 1) * 12 * 3600 for t in arrivals)
        assert inside / len(jobs) == pytest.approx(0.25, abs=0.01)


@pytest.mark.parametrize("dispersion", [1.0, 4.27])
def test_hourly_arrival_counts_have_the_asked_dispersion(dispersion):
    # 20 jobs/h as in the newTrace setting, over 3000 hours: var/mean of the hourly counts.
    jobs = generate_newtrace(NewTraceSpec(jobs=60_000, hours=3000.0, hourly_dispersion=dispersion), seed=5)
    counts = np.bincount([int(j.arrival_time // 3600) for j in jobs], minlength=3000)
    assert counts.mean() == pytest.approx(20.0)
    assert counts.var() / counts.mean() == pytest.approx(dispersion, rel=0.12)
    assert max(j.arrival_time for j in jobs) < 3000 * 3600


def test_partial_last_hour_gets_its_share():
    jobs = generate_newtrace(NewTraceSpec(jobs=30_000, hours=1.5, hourly_dispersion=1.0), seed=2)
    late = sum(j.arrival_time >= 3600 for j in jobs)
    assert late / len(jobs) == pytest.approx(1 / 3, abs=0.02)
    assert max(j.arrival_time for j in jobs) < 1.5 * 3600


def test_requests_come_from_the_bundled_configurations():
    jobs = generate_newtrace(NewTraceSpec(jobs=20_000), seed=1)
    assert {j.num_replicas for j in jobs} <= set(range(4, 17))
    cifar = collections.Counter((j.num_replicas, j.batch_size) for j in jobs if j.application == "cifar10")
    table = REQUEST_WEIGHTS["cifar10"]
    n = sum(cifar.values())
    for config, weight in table.items():
        assert cifar[config] / n == pytest.approx(weight / sum(table.values()), abs=0.02), config
    assert set(cifar) == set(table)
    assert all((j.num_replicas, j.batch_size) in REQUEST_WEIGHTS[j.application] for j in jobs)


def test_deterministic_per_seed_and_default_setting():
    a, b, c = generate_newtrace(seed=7), generate_newtrace(seed=7), generate_newtrace(seed=8)
    assert a == b and a != c
    assert len(a) == 960 and len({j.name for j in a}) == 960
    assert max(j.arrival_time for j in a) < 48 * 3600
    assert bundled_workload("newtrace/seed-7") == a
    assert is_bundled_workload("newtrace/seed-7") and not is_bundled_workload("newtrace/seed-07")
    assert not is_bundled_workload("newtrace/seed-x")


def test_sweeps_name_the_family_like_the_bundled_traces(tmp_path):
    spec = parse_sweep({"name": "n", "simulator": "sia",
                        "workloads": [{"bundled": ["newtrace/seed-1", "newtrace/seed-2"]}],
                        "clusters": [{"preset": "sia-64"}], "policies": [{"name": "sia"}]}, tmp_path)
    assert [c.workload.family for c in spec.cells()] == ["newtrace", "newtrace"]


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"jobs": 0}, "newtrace.jobs"),
    ({"jobs": 2.5}, "newtrace.jobs"),
    ({"hours": 0.0}, "newtrace.hours"),
    ({"hours": float("nan")}, "newtrace.hours"),
    ({"mix": {"resnet": 1.0}}, "newtrace.mix[resnet]"),
    ({"mix": {"bert": -1.0}}, "newtrace.mix[bert]"),
    ({"mix": {"bert": 0.0}}, "newtrace.mix"),
    ({"hourly_dispersion": 0.5}, "newtrace.hourly_dispersion"),
    ({"hourly_dispersion": True}, "newtrace.hourly_dispersion"),
])
def test_bad_input_names_the_field(kwargs, field):
    with pytest.raises(InputError) as err:
        NewTraceSpec(**kwargs)
    assert err.value.field == field


def test_bad_seed():
    with pytest.raises(InputError, match="newtrace.seed"):
        generate_newtrace(seed=-1)


@pytest.mark.parametrize("name", ["newtrace/seed-4", "philly/workload-1", "saturn/workload-3"])
def test_written_workload_reads_back_as_the_same_jobs(tmp_path, name):
    jobs = bundled_workload(name)
    path = write_sia_workload(jobs, tmp_path / "w.csv")
    assert read_sia_workload(path) == jobs
    header, first = path.read_text().splitlines()[:2]
    assert header == "name,time,application,num_replicas,batch_size"  # the Sia artifact's columns
    j = jobs[0]
    assert first == f"{j.name},{int(j.arrival_time)},{j.application},{j.num_replicas},{j.batch_size}"


def test_written_workload_keeps_fractional_times_and_sorts_by_arrival(tmp_path):
    jobs = [JobSpec("b", 7.25, "bert", 6, 384), JobSpec("a", 0.1 + 0.2, "cifar10", 4, 2048)]
    back = read_sia_workload(write_sia_workload(jobs, tmp_path / "w.csv"))
    assert [j.name for j in back] == ["a", "b"]
    assert back[0].arrival_time == 0.1 + 0.2 and back[1].arrival_time == 7.25


@pytest.mark.parametrize(("jobs", "field"), [
    ([], "jobs"),
    ([JobSpec("a", 0, "bert", 6, 384), JobSpec("a", 1, "bert", 6, 384)], "jobs"),
    ([JobSpec("a,b", 0, "bert", 6, 384)], "JobSpec[a,b].name"),
    ([JobSpec("a", 0, "be\nrt", 6, 384)], "JobSpec[a].application"),
])
def test_writing_a_workload_that_would_not_read_back_names_the_field(tmp_path, jobs, field):
    with pytest.raises(InputError) as err:
        write_sia_workload(jobs, tmp_path / "w.csv")
    assert err.value.field == field
    assert not (tmp_path / "w.csv").exists()
