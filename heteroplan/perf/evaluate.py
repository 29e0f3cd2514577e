"""Accuracy of fitted and projected throughput models against measured steps.

Used by ``tests/test_perf_fit.py`` and ``benchmarks/goodput_fit.py``.

* :func:`holdout_split` -- hold out whole (nodes, GPUs) configurations (every local batch of
  a held-out configuration is unseen), seeded; 1-GPU rows always stay in training, as in Sia
  where every job is profiled on one GPU.
* :func:`relative_errors` -- ``|predicted / measured - 1|`` of step times.
* :func:`projection_params` -- a type's parameters projected from another type's full fit
  and its own 1-GPU profile (the bootstrapping step).
* :func:`learning_curve` -- error of a :class:`BootstrappedModel` on one type as it observes
  that type's configurations one by one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from heteroplan.errors import InputError
from heteroplan.perf.applications import AppSpec
from heteroplan.perf.bootstrap import BootstrappedModel, project_params
from heteroplan.perf.fit import fit_compute
from heteroplan.perf.measurements import Measurements
from heteroplan.perf.throughput import ThroughputParams, step_time

__all__ = ["holdout_split", "relative_errors", "projection_params", "learning_curve"]


def holdout_split(meas: Measurements, test_fraction: float = 0.3,
                  seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Boolean masks ``(train, test)`` holding out ~``test_fraction`` of the configurations."""
    if not 0.0 < test_fraction < 1.0:
        raise InputError("test_fraction", test_fraction, "must be in (0, 1)")
    keys = meas.num_nodes * 1000 + meas.num_gpus
    configs = np.unique(keys[meas.num_gpus > 1])
    rng = np.random.default_rng(seed)
    n_test = max(1, int(round(test_fraction * len(configs))))
    test_configs = rng.choice(configs, size=min(n_test, len(configs)), replace=False)
    test = np.isin(keys, test_configs)
    return ~test, test


def relative_errors(params: ThroughputParams, meas: Measurements) -> np.ndarray:
    """``|predicted step time / measured - 1|`` per observation."""
    pred = step_time(params, meas.num_nodes, meas.num_gpus, meas.local_bsz)
    return np.abs(pred / meas.step_time - 1.0)


def projection_params(target: Measurements, reference: ThroughputParams,
                      scale_sync: bool = True) -> ThroughputParams:
    """Parameters of the target type from its 1-GPU rows and a reference type's fit."""
    one = target.num_gpus == 1
    if not one.any():
        raise InputError("target", len(target), "needs 1-GPU observations (a profile)")
    a, b = fit_compute(target.local_bsz[one], target.step_time[one])
    at = float(np.exp(np.mean(np.log(target.local_bsz[one]))))
    return project_params((a, b), reference, at, scale_sync=scale_sync)


def learning_curve(
    app: AppSpec,
    data: Mapping[str, Measurements],
    target: str,
    steps: Sequence[int] = (1, 2, 4, 8),
    seed: int = 0,
) -> list[float]:
    """Median step-time error on ``target``'s multi-GPU rows as Sia learns it.

    The model starts from the 1-GPU rows of every type plus all multi-GPU rows of the other
    types, then observes one random local batch of ``target`` configurations in a random
    order. Returns the error before any (the projection) and after each count in ``steps``.
    """
    one = {t: m.select(m.num_gpus == 1) for t, m in data.items()}
    model = BootstrappedModel(app, one, 1000.0)
    for gpu_type, meas in data.items():
        if gpu_type != target:
            model.observe_many(gpu_type, meas.select(meas.num_gpus > 1))
    multi = data[target].select(data[target].num_gpus > 1)
    keys = multi.num_nodes * 1000 + multi.num_gpus
    rng = np.random.default_rng(seed)
    order = rng.permutation(np.unique(keys))
    errors = [float(np.median(relative_errors(model.params[target], multi)))]
    seen = 0
    for count in steps:
        while seen < min(count, len(order)):
            row = rng.choice(np.flatnonzero(keys == order[seen]))
            model.observe_many(target, multi.select(np.array([row])))
            seen += 1
        errors.append(float(np.median(relative_errors(model.params[target], multi))))
    return errors
