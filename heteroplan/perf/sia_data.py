"""Goodput models of the Sia applications from the shipped reference data.

``heteroplan/data/sia/goodput_reference.json`` holds, per application: the phi table, the
throughput parameters fitted on all measurements (placements and scalability files) of the
three Sia GPU types, and the 1-GPU profile rows per type. Regenerate it from the Sia traces::

    python -m heteroplan.perf.build_reference /path/to/sia/traces

* :func:`true_model` -- the simulator's ground truth (a :class:`GoodputModel`).
* :func:`bootstrap_model` -- what the Sia policy starts from (a :class:`BootstrappedModel`).
* :func:`grad_stats` -- per-epoch gradient statistics of every validation run
  (``heteroplan/data/sia/grad_stats.json``; the Sia simulator's statistical efficiency).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from enum import StrEnum
from functools import cache, lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from heteroplan.errors import InputError
from heteroplan.inputs import enum_choice
from heteroplan.perf.applications import APPLICATIONS, SIA_TYPE_NAMES, get_app
from heteroplan.perf.bootstrap import BootstrappedModel
from heteroplan.perf.efficiency import PhiTable
from heteroplan.perf.fit import fit_throughput_params
from heteroplan.perf.goodput import GoodputModel
from heteroplan.perf.gradstats import GradStats
from heteroplan.perf.measurements import (
    Measurements,
    load_placements,
    load_scalability,
    load_validation,
)
from heteroplan.perf.throughput import ThroughputParams

__all__ = [
    "build_reference",
    "load_reference",
    "true_model",
    "bootstrap_model",
    "Estimator",
    "ProfileSource",
    "load_app_measurements",
    "load_app_phi",
    "profile_of",
    "build_grad_stats",
    "grad_stats",
]

REFERENCE_FILE = "goodput_reference.json"
GRAD_STATS_FILE = "grad_stats.json"


def load_app_measurements(
    traces_dir: str | Path, app: str, gpu_type: str, scalability: bool = True
) -> Measurements:
    """All measured steps of ``app`` on ``gpu_type`` (placements, plus scalability if asked)."""
    base = Path(traces_dir) / app
    meas = load_placements(_find(base, f"placements-{gpu_type}"))
    if scalability:
        try:
            scal = _find(base, f"scalability-{gpu_type}")
        except InputError:
            return meas
        meas = meas.concat(load_scalability(scal))
    return meas


def _find(base: Path, stem: str) -> Path:
    """``base/stem.csv`` or, failing that, ``base/stem.csv.gz``."""
    for suffix in (".csv", ".csv.gz"):
        if (base / (stem + suffix)).is_file():
            return base / (stem + suffix)
    raise InputError("path", str(base / (stem + ".csv")), "no such file (nor .csv.gz)")


def load_app_phi(traces_dir: str | Path, app: str) -> PhiTable:
    """phi table of ``app`` from its ``validation-<bsz>.csv`` files."""
    files = sorted((Path(traces_dir) / app).glob("validation-*.csv*"))
    if not files:
        raise InputError("traces_dir", str(traces_dir), f"no validation files for {app}")
    runs = [load_validation(f) for f in files]
    return PhiTable.from_runs(runs, get_app(app).init_batch_size)


def build_grad_stats(traces_dir: str | Path) -> dict[str, Any]:
    """Per application, the :class:`GradStats` of its validation runs (as JSON-ready dicts)."""
    apps: dict[str, Any] = {}
    for app, spec in APPLICATIONS.items():
        files = sorted((Path(traces_dir) / app).glob("validation-*.csv*"))
        if not files:
            raise InputError("traces_dir", str(traces_dir), f"no validation files for {app}")
        runs = [load_validation(f) for f in files]
        apps[app] = GradStats.from_runs(runs, spec.init_batch_size, spec.epochs).to_dict()
    return {
        "source": "Sia artifact traces (siasosp23/artifacts, sia-simulator/traces), "
        "validation-<bsz>.csv: grad_sqr and grad_var of the first <epochs> rows",
        "apps": apps,
    }


def profile_of(meas: Measurements) -> Measurements:
    """The 1-GPU rows of ``meas`` (a Sia profiling run)."""
    return meas.select(meas.num_gpus == 1)


def build_reference(traces_dir: str | Path) -> dict[str, Any]:
    """The reference data (see module doc) computed from the Sia traces."""
    apps: dict[str, Any] = {}
    for app in APPLICATIONS:
        params: dict[str, Any] = {}
        profiles: dict[str, Any] = {}
        for gpu_type in SIA_TYPE_NAMES:
            meas = load_app_measurements(traces_dir, app, gpu_type)
            params[gpu_type] = fit_throughput_params(meas).to_dict()
            placements = _find(Path(traces_dir) / app, f"placements-{gpu_type}")
            prof = profile_of(load_placements(placements))
            profiles[gpu_type] = {
                "local_bsz": prof.local_bsz.tolist(),
                "step_time": [round(x, 6) for x in prof.step_time.tolist()],
                "sync_time": [round(x, 6) for x in prof.sync_time.tolist()],
            }
        apps[app] = {
            "phi": load_app_phi(traces_dir, app).to_dict(),
            "params": params,
            "profiles": profiles,
        }
    return {
        "source": "Sia artifact traces (siasosp23/artifacts, sia-simulator/traces); "
        "fitted by heteroplan.perf.fit",
        "gpu_types": list(SIA_TYPE_NAMES),
        "apps": apps,
    }


@lru_cache(maxsize=1)
def load_reference() -> dict[str, Any]:
    """The shipped reference data (parsed once)."""
    text = resources.files("heteroplan").joinpath("data", "sia", REFERENCE_FILE).read_text()
    return json.loads(text)


@lru_cache(maxsize=1)
def _load_grad_stats() -> dict[str, Any]:
    text = resources.files("heteroplan").joinpath("data", "sia", GRAD_STATS_FILE).read_text()
    return json.loads(text)


@cache
def grad_stats(app: str) -> GradStats:
    """Per-epoch gradient statistics of ``app``'s validation runs (shipped data)."""
    get_app(app)
    try:
        return GradStats.from_dict(_load_grad_stats()["apps"][app])
    except KeyError:
        raise InputError("application", app, "no gradient statistics in the shipped data") from None


class Estimator(StrEnum):
    """A Sia application's performance model chosen by name (a session's ``perf_model``, the
    simulator's ``estimator``)."""

    BOOTSTRAP = "bootstrap"
    """Sia's: built from 1-GPU profiles, refit from reported step timings (:func:`bootstrap_model`)."""
    ORACLE = "oracle"
    """The application's fitted ground truth (:func:`true_model`)."""


class ProfileSource(StrEnum):
    """Where a new job's 1-GPU profiles (a bootstrapped model's first observations) come from."""

    TRACES = "traces"
    """The measured 1-GPU steps of the bundled traces."""
    TRUTH = "truth"
    """The ground truth's (:func:`true_model`) steps at the same local batches: a job is profiled
    at the speed it then runs at, as in a simulator whose ground truth is its traces."""


def _app_entry(app: str) -> dict[str, Any]:
    get_app(app)
    try:
        return load_reference()["apps"][app]
    except KeyError:
        raise InputError("application", app, "no reference goodput data") from None


def true_model(app: str) -> GoodputModel:
    """Ground-truth goodput model of ``app`` (fitted on all its measurements)."""
    entry = _app_entry(app)
    params = {t: ThroughputParams.from_dict(p) for t, p in entry["params"].items()}
    return GoodputModel(get_app(app), params, PhiTable.from_dict(entry["phi"]))


@cache
def _truth_steps(app: str, gpu_type: str) -> np.ndarray:
    """The ground truth's 1-GPU step times (s) at the local batches ``app``'s traces profiled on
    ``gpu_type`` (read-only: every job of ``app`` starts from the same ones)."""
    local = np.asarray(_app_entry(app)["profiles"][gpu_type]["local_bsz"])
    one = np.ones(len(local), dtype=int)
    step = np.asarray(true_model(app).step_time(gpu_type, one, one, local, 0 * one), dtype=float)
    step.flags.writeable = False
    return step


def bootstrap_model(
    app: str, profiled_types: Sequence[str] = SIA_TYPE_NAMES, scale_sync: bool = True,
    profiles_from: ProfileSource | str = ProfileSource.TRACES,
) -> BootstrappedModel:
    """Sia's starting model of a new ``app`` job: 1-GPU profiles on ``profiled_types``.

    ``profiles_from="traces"``: the measured 1-GPU step times; ``"truth"``: the ground truth's
    (:func:`true_model`) at the same local batches, so that what a job is profiled at is what it
    then runs at, as in the Sia artifact, whose ground truth is its traces. The two differ where
    the traces are noisy: yolov3 on one dgx-ext GPU measures 81 samples/s at local batch 32, the
    model fitted to all of its measurements gives 40.
    """
    source = enum_choice(ProfileSource, "profiles_from", profiles_from)
    entry = _app_entry(app)
    profiles: dict[str, Measurements] = {}
    for gpu_type in profiled_types:
        prof = entry["profiles"].get(gpu_type)
        if prof is None:
            raise InputError("profiled_types", gpu_type, f"no profile for {app}")
        n = len(prof["local_bsz"])
        local = np.asarray(prof["local_bsz"])
        if source is ProfileSource.TRACES:
            step, sync = np.asarray(prof["step_time"]), np.asarray(prof["sync_time"])
        else:
            step, sync = _truth_steps(app, gpu_type), np.zeros(n)
        profiles[gpu_type] = Measurements(np.ones(n), np.ones(n), local, step, sync)
    return BootstrappedModel(
        get_app(app), profiles, PhiTable.from_dict(entry["phi"]), scale_sync=scale_sync)
