"""Generated workloads in the Sia paper's "newTrace" setting (SOSP'23, Table 3).

960 jobs arriving over 48 hours on the 64-GPU ``sia-64`` cluster, about 50% cifar10, 24%
deepspeech2, 22% bert, 4% yolov3 and under 1% imagenet, each requesting 4-16 GPUs.

The mechanism follows the Sia artifact's workload generator (``utils/generate_workload.py``):
a job's application fixes its work (the application's epochs over its dataset, see
:mod:`heteroplan.perf.applications`), and its rigid request (``num_replicas``, ``batch_size``)
is drawn from the application's configurations at 50-80% scaling efficiency on 8-GPU RTX
nodes, at most 16 GPUs. Those configurations, and how often the artifact drew each, are taken
from the 16 bundled Philly/Helios workloads (:data:`REQUEST_WEIGHTS`), so a generated job is
one the bundled traces could hold. The artifact samples arrival times from a production trace's
timestamps (not bundled), which come in bursts: the hourly job counts of the bundled workloads
(20 jobs/h, the newTrace rate) have a variance 2.1-7.4 times their mean (median 4.27; a Poisson
process has 1). Arrivals here are a Poisson process whose rate is redrawn every hour from a gamma
distribution with that index of dispersion (``hourly_dispersion``; 1 = uniform arrivals),
conditioned on the job count.

``generate_newtrace(seed=s)`` is deterministic per seed; ``bundled_workload("newtrace/seed-s")``
gives the same jobs, so sweeps name the family like the bundled traces.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from heteroplan.errors import InputError
from heteroplan.workload.job_spec import JobSpec

__all__ = ["NEWTRACE_MIX", "REQUEST_WEIGHTS", "NewTraceSpec", "generate_newtrace", "newtrace_seed"]

# The paper's newTrace job mix (fractions of jobs). Its text gives "under 1%" for imagenet.
NEWTRACE_MIX: Mapping[str, float] = MappingProxyType({
    "cifar10": 0.495, "deepspeech2": 0.24, "bert": 0.22, "yolov3": 0.04, "imagenet": 0.005,
})

# (num_replicas GPUs, batch_size samples) -> how many of the 2,560 jobs of the bundled
# philly/saturn workloads 1-8 request it: the artifact's configurations at 50-80% scaling
# efficiency on RTX nodes, <= 16 GPUs, with the frequencies its sampling gave them.
REQUEST_WEIGHTS: Mapping[str, Mapping[tuple[int, int], int]] = MappingProxyType({
    "cifar10": MappingProxyType({(4, 2048): 119, (6, 2048): 486, (8, 2048): 363, (8, 4096): 80,
                                 (10, 4096): 151, (12, 4096): 491, (16, 4096): 366}),
    "deepspeech2": MappingProxyType({(6, 320): 55, (8, 320): 66, (12, 640): 67}),
    "bert": MappingProxyType({(6, 384): 35, (8, 384): 30, (12, 384): 33, (16, 384): 42}),
    "yolov3": MappingProxyType({(4, 64): 117}),
    "imagenet": MappingProxyType({(10, 1600): 21, (12, 3200): 15, (14, 3200): 23}),
})

# Median over the 16 bundled workloads of var/mean of their hourly arrival counts.
BUNDLED_HOURLY_DISPERSION = 4.27
MAX_JOBS = 1_000_000
MAX_HOURS = 10 * 365 * 24.0
PREFIX = "newtrace/seed-"


@dataclass(frozen=True)
class NewTraceSpec:
    """What to generate.

    Attributes:
        jobs: number of jobs.
        hours: arrival window (hours); arrivals fall in ``[0, hours)``.
        mix: application -> weight (normalised to fractions); applications must be in
            :data:`REQUEST_WEIGHTS`.
        hourly_dispersion: variance over mean of the jobs arriving per hour, at the mean rate
            ``jobs / hours`` (>= 1; 1: uniform arrivals; default: the bundled workloads').
    """

    jobs: int = 960
    hours: float = 48.0
    mix: Mapping[str, float] = field(default_factory=lambda: NEWTRACE_MIX)
    hourly_dispersion: float = BUNDLED_HOURLY_DISPERSION

    def __post_init__(self) -> None:
        if isinstance(self.jobs, bool) or not isinstance(self.jobs, int) or not 1 <= self.jobs <= MAX_JOBS:
            raise InputError("newtrace.jobs", self.jobs, f"must be an integer in [1, {MAX_JOBS}]")
        if isinstance(self.hours, bool) or not isinstance(self.hours, int | float) \
                or not (math.isfinite(self.hours) and 0 < self.hours <= MAX_HOURS):
            raise InputError("newtrace.hours", self.hours, f"must be a number in (0, {MAX_HOURS:g}] hours")
        if not isinstance(self.mix, Mapping) or not self.mix:
            raise InputError("newtrace.mix", self.mix, "must be a non-empty table application -> weight")
        for app, weight in self.mix.items():
            if app not in REQUEST_WEIGHTS:
                raise InputError(f"newtrace.mix[{app}]", app, f"unknown application; known: {sorted(REQUEST_WEIGHTS)}")
            if isinstance(weight, bool) or not isinstance(weight, int | float) \
                    or not (math.isfinite(weight) and weight >= 0):
                raise InputError(f"newtrace.mix[{app}]", weight, "must be a finite number >= 0")
        if not math.isfinite(sum(float(w) for w in self.mix.values())):  # 1e308 + 1e308: fractions of inf
            raise InputError("newtrace.mix", dict(self.mix), "the weights must add up to a finite number")
        d = self.hourly_dispersion
        if isinstance(d, bool) or not isinstance(d, int | float) or not (math.isfinite(d) and 1 <= d <= 1e6):
            raise InputError("newtrace.hourly_dispersion", d, "must be a number in [1, 1e6]")
        if sum(self.mix.values()) <= 0:
            raise InputError("newtrace.mix", dict(self.mix), "needs a weight > 0")
        object.__setattr__(self, "hours", float(self.hours))
        object.__setattr__(self, "mix", MappingProxyType(dict(self.mix)))


def generate_newtrace(spec: NewTraceSpec | None = None, seed: int = 0) -> list[JobSpec]:
    """``spec.jobs`` Sia jobs in the newTrace setting, sorted by arrival (deterministic per ``seed``).

    Each job's application is drawn from ``spec.mix``, its rigid request from the
    application's :data:`REQUEST_WEIGHTS`, its arrival in ``[0, spec.hours)`` (whole seconds): an
    hour is drawn with probability proportional to its gamma-distributed rate, then a uniform
    time within it. Names are ``<application>-<index in arrival order>``.
    """
    spec = NewTraceSpec() if spec is None else spec
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InputError("newtrace.seed", seed, "must be an integer >= 0")
    rng = np.random.default_rng(seed)
    apps = sorted(spec.mix)
    weights = np.array([spec.mix[a] for a in apps], dtype=float)
    drawn = rng.choice(len(apps), size=spec.jobs, p=weights / weights.sum())
    arrivals = _arrivals(spec, rng)
    requests = {}
    for k, app in enumerate(apps):
        table = REQUEST_WEIGHTS[app]
        configs = list(table)
        freq = np.array([table[c] for c in configs], dtype=float)
        picks = rng.choice(len(configs), size=int(np.sum(drawn == k)), p=freq / freq.sum())
        requests[app] = iter([configs[i] for i in picks])
    jobs = []
    for i, (k, arrival) in enumerate(zip(drawn, arrivals, strict=True)):
        app = apps[int(k)]
        replicas, batch = next(requests[app])
        jobs.append(JobSpec(f"{app}-{i}", float(arrival), app, replicas, batch))
    return jobs


def _arrivals(spec: NewTraceSpec, rng: np.random.Generator) -> np.ndarray:
    """Sorted arrival times (s): hourly rates ``Gamma(k, 1/k)`` with ``1 + (jobs/hours)/k`` the
    dispersion (a partial last hour weighted by its length), each job in an hour drawn by rate."""
    bins = math.ceil(spec.hours)
    width = np.minimum(1.0, spec.hours - np.arange(bins))  # hours in each bin
    excess = spec.hourly_dispersion - 1.0
    if excess > 0:
        shape = (spec.jobs / spec.hours) / excess
        rate = rng.gamma(shape, 1.0 / shape, size=bins)
    else:
        rate = np.ones(bins)
    weight = rate * width
    hour = rng.choice(bins, size=spec.jobs, p=weight / weight.sum())
    seconds = (hour + rng.uniform(0.0, 1.0, size=spec.jobs) * width[hour]) * 3600.0
    return np.sort(np.minimum(np.floor(seconds), math.ceil(spec.hours * 3600.0) - 1))


def newtrace_seed(name: str) -> int | None:
    """The seed of a bundled-family name ``newtrace/seed-<s>``; None for any other name."""
    if not isinstance(name, str) or not name.startswith(PREFIX):
        return None
    digits = name[len(PREFIX):]
    if not (digits.isascii() and digits.isdigit()) or len(digits) > 4000:  # int() refuses 4300 digits and more
        return None
    return int(digits) if digits == str(int(digits)) else None
