"""Accuracy of fitted and projected throughput models against measured steps.

Used by ``tests/test_perf_fit.py`` and ``benchmarks/goodput_fit.py``.

* :func:`holdout_split` -- hold out whole (nodes, GPUs) configurations (every local batch of
  a held-out configuration is unseen), seeded; 1-GPU rows always stay in training, as in Sia
  where every job is profiled on one GPU.
* :func:`relative_errors` -- ``|predicted / measured - 1|`` of step times.
* :func:`projection_params` -- a type's parameters projected from another type's full fit
  and its own 1-GPU profile (the bootstrapping step).
"""

from __future__ import annotations

import numpy as np

from heteroplan.errors import InputError
from heteroplan.perf.bootstrap import project_params
from heteroplan.perf.fit import fit_compute
from heteroplan.perf.measurements import Measurements
from heteroplan.perf.throughput import ThroughputParams, step_time

__all__ = ["holdout_split", "relative_errors", "projection_params"]


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
