"""Every registered policy x every workload family x every cluster preset, short horizon.

Each run completes, or fails before its first round with a MissingDataError naming the job,
its application and the GPU types it has no data for. Families: Sia CSV jobs (goodput models
for the Sia testbed's types), Gavel-generated jobs (Gavel's k80/p100/v100 throughputs) and
Hadar tasks (rigid jobs with the user's own throughput matrix over the cluster's types).
"""

from __future__ import annotations

import numpy as np
import pytest

from heteroplan.cluster import PRESETS, Cluster, preset
from heteroplan.errors import MissingDataError
from heteroplan.policies.base import Policy
from heteroplan.policies.registry import POLICIES, make_policy
from heteroplan.sim.loop import simulate
from heteroplan.workload.gavel import generate_workload, load_throughputs
from heteroplan.workload.rigid import RigidJob, rigid_jobs_from_gavel
from heteroplan.workload.sia import bundled_workload

HORIZON = 2 * 3600.0  # s


def sia_csv(cluster: Cluster) -> list:
    return bundled_workload("philly/workload-1")[:3]


def gavel_generated(cluster: Cluster) -> list:
    return rigid_jobs_from_gavel(generate_workload(3, 20.0, seed=1, duration_scale=0.02), load_throughputs())


def hadar_tasks(cluster: Cluster) -> list:
    """The user's own matrix: steps/s per type of this cluster, gangs of 1, 2 and 4 tasks."""
    rng = np.random.default_rng(7)
    return [RigidJob(f"t{i}", w, 600.0, 300.0 * i, {k: float(rng.uniform(0.5, 2.0)) for k in cluster.type_names},
                     f"task-app-{i}")
            for i, w in enumerate((1, 2, 4))]


FAMILIES = {"sia-csv": (sia_csv, {"aws", "rtx", "dgx-ext"}), "gavel": (gavel_generated, {"k80", "p100", "v100"}),
            "hadar-tasks": (hadar_tasks, None)}


class Counting:
    """Wraps a policy and counts its rounds (to show a refusal came before the first one)."""

    def __init__(self, inner: Policy) -> None:
        self.inner, self.calls = inner, 0
        self.name, self.round_length = inner.name, inner.round_length
        self.elastic, self.forking = inner.elastic, inner.forking

    def allocate(self, cluster, jobs, now):
        self.calls += 1
        return self.inner.allocate(cluster, jobs, now)


@pytest.mark.parametrize("cluster_name", sorted(PRESETS))
@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("policy_name", sorted(POLICIES))
def test_every_policy_runs_every_workload_family_on_every_preset(policy_name, family, cluster_name) -> None:
    cluster = preset(cluster_name)
    make_jobs, data_types = FAMILIES[family]
    jobs = make_jobs(cluster)
    policy = Counting(make_policy(policy_name))
    assert isinstance(policy, Policy)
    missing = sorted(set(cluster.type_names) - data_types) if data_types is not None else []
    if missing:
        with pytest.raises(MissingDataError) as info:
            simulate(jobs, cluster, policy, max_time=HORIZON, progress=False)
        message = str(info.value)
        first = jobs[0]
        assert getattr(first, "name", getattr(first, "job_id", None)) in message
        assert (getattr(first, "application", None) or first.job_type) in message
        assert all(t in message for t in missing)
        assert policy.calls == 0  # refused before the first round
        return
    res = simulate(jobs, cluster, policy, max_time=HORIZON, progress=False)
    assert res.error is None and res.stop_reason in ("finished", "max_time")
    assert policy.calls == res.rounds > 0
    assert len(res.jobs) + len(res.rejected) == len(jobs)
    cap = cluster.capacity()
    assert all(u[t] <= cap[t] for _, u, _ in res.timeline for t in cap)
    assert any(j.fraction_done > 0 for j in res.jobs)  # work got done
    if family != "sia-csv":  # short rigid jobs: all of them finish inside the horizon
        assert res.stop_reason == "finished" and not res.unfinished


@pytest.mark.parametrize("policy_name", ["sia", "pollux", "gavel", "tiresias", "hadar", "hadare"])
def test_a_lone_table_job_finishes_at_its_known_optimum(policy_name) -> None:
    """One 2-task job with the user's throughputs on an idle sia-64: heterogeneity-aware policies
    run it on its fastest type from the first round (JCT = steps / best rate); HadarE may add
    copies on idle GPUs (faster still); Pollux and Tiresias are type-blind (no faster than that)."""
    job = RigidJob("j", 2, 7200.0, 0.0, {"aws": 1.0, "rtx": 2.0, "dgx-ext": 4.0})
    res = simulate([job], preset("sia-64"), make_policy(policy_name), progress=False)
    jct = res.jobs[0].jct_s
    if policy_name in ("sia", "gavel", "hadar"):
        assert jct == pytest.approx(7200.0 / 4.0)
    else:
        assert jct <= 7200.0 / 4.0 + 1e-9 if policy_name == "hadare" else jct >= 7200.0 / 4.0 - 1e-9
