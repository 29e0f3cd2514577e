"""Constants of the Sailor-style simulator, and their calibration file in a data directory.

:class:`SimConfig` holds the model's constants (bytes per parameter, memory overheads, the
compute scale, fixed per-microbatch and per-transfer seconds, and the ranks' speed noise). :data:`DEFAULT_CONFIG` is
calibrated on Sailor's real GH200 runs and used with the shipped profiles;
:data:`PROFILED_CONFIG` (no calibration) is used with a profile directory that holds no
``sim_config.json``. A directory's ``sim_config.json`` (``{constant: number}``, written by
:meth:`SimConfig.write`, e.g. after :func:`heteroplan.runtime.calibrate.calibrate`) overrides
:data:`PROFILED_CONFIG` constant by constant.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from heteroplan.atomic_json import write_json_atomic
from heteroplan.errors import InputError
from heteroplan.perf.sailor_profiles import resolve_data_dir

__all__ = ["SimConfig", "DEFAULT_CONFIG", "PROFILED_CONFIG", "SIM_CONFIG_FILE", "load_sim_config"]

SIM_CONFIG_FILE = "sim_config.json"


@dataclass(frozen=True)
class SimConfig:
    """Constants of the simulator (calibration: see docs/sailor.md).

    Attributes:
        bytes_per_param: weights + gradients + Adam state per parameter (mixed precision: 16).
        act_bytes_per_float: bytes kept per activation float of ``llm_info``.
        grad_bytes_per_param: bytes all-reduced per parameter.
        act_comm_bytes_per_float: bytes sent per activation float between stages.
        overhead_gb: framework memory (CUDA context, NCCL buffers, allocator) per GPU.
        working_layers: transient buffers during backward, in units of the stage's largest
            layer activation memory (x mbs).
        logits_factor: transient copies of the last layer's output (logits) on the last stage,
            in units of its output bytes (x mbs).
        microbatch_overhead_s: fixed framework time per microbatch and stage (scheduling,
            launches) added to the profiled compute.
        compute_scale: factor on profiled compute times (profiler vs training-loop speed).
        transfer_latency_s: fixed seconds per point-to-point transfer between pipeline stages
            (send call, waking the receiver), added to the bandwidth time of every activation
            and gradient transfer; 0 in Sailor's model, fitted by ``calibrate`` on real runs.
        allreduce_latency_s: fixed seconds per step of a ring all-reduce (the latency term of the
            alpha-beta model): a stage's gradient all-reduce over ``D`` replicas takes
            ``2 (D - 1)`` steps; 0 in Sailor's model, fitted by ``calibrate`` on real runs.
        straggler_cv: coefficient of variation of one rank's compute time over an iteration
            (a fraction: 0.2 = 20%), independent per rank; data-parallel replicas wait for the
            slowest at the all-reduce, so balanced replicas lose time and a replica with slack
            or a single one loses none (:mod:`heteroplan.planner.straggler`); 0 in Sailor's model.
    """

    bytes_per_param: float = 16.0
    act_bytes_per_float: float = 4.0
    grad_bytes_per_param: float = 4.0
    act_comm_bytes_per_float: float = 4.0
    overhead_gb: float = 0.0
    working_layers: float = 0.0
    logits_factor: float = 0.0
    microbatch_overhead_s: float = 0.0
    compute_scale: float = 1.0
    transfer_latency_s: float = 0.0
    allreduce_latency_s: float = 0.0
    straggler_cv: float = 0.0

    def __post_init__(self) -> None:
        for name in self.constant_names():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise InputError(f"SimConfig.{name}", value, "must be a finite number")
        if self.compute_scale <= 0:
            raise InputError("SimConfig.compute_scale", self.compute_scale, "must be > 0")
        for name in ("transfer_latency_s", "allreduce_latency_s"):
            if getattr(self, name) < 0:
                raise InputError(f"SimConfig.{name}", getattr(self, name), "must be >= 0 seconds")
        if self.straggler_cv < 0:
            raise InputError("SimConfig.straggler_cv", self.straggler_cv, "must be >= 0 (a fraction of compute time)")

    def ring_allreduce_s(self, replicas: int, send_s: float | np.ndarray) -> float | np.ndarray:
        """Seconds of a ring all-reduce over ``replicas`` (>= 1) whose whole buffer takes ``send_s``
        seconds over the ring's slowest link: ``2 (D - 1) (allreduce_latency_s + send_s / D)``
        (0 for one replica); works elementwise on arrays."""
        return 2 * (replicas - 1) * (self.allreduce_latency_s + send_s / replicas)

    def to_dict(self) -> dict[str, float]:
        """All constants by name (the format of ``sim_config.json``)."""
        return {name: float(getattr(self, name)) for name in self.constant_names()}

    @classmethod
    def constant_names(cls) -> tuple[str, ...]:
        """Names of the constants, in declaration order."""
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_dict(cls, values: Mapping[str, object], base: SimConfig | None = None) -> SimConfig:
        """``base`` (default: all defaults) with the constants in ``values``; unknown names are refused."""
        if not isinstance(values, Mapping):
            raise InputError("sim_config", type(values).__name__, "must be a JSON object {constant: number}")
        unknown = sorted(set(values) - set(cls.constant_names()))
        if unknown:
            raise InputError("sim_config", unknown, f"unknown constants; known: {list(cls.constant_names())}")
        return replace(base or cls(), **values)

    def write(self, data_dir: str | Path) -> Path:
        """Store these constants as ``data_dir/sim_config.json``; returns the file's path.

        ``simulate(..., data_dir=data_dir)`` and ``plan_job(..., data_dir=data_dir)`` then use them.
        """
        path = Path(data_dir).expanduser() / SIM_CONFIG_FILE
        write_json_atomic(path, self.to_dict())
        return path


# Calibrated on the 15 real OPT-350 runs on GH200 (benchmarks/sailor_sim_accuracy.py):
# least mean absolute relative error; leave-one-out errors are reported in docs/sailor.md.
# The small negative per-microbatch term removes the profiler's own synchronization cost per
# measured stage (the training loop overlaps it); compute times are clipped at 0.
DEFAULT_CONFIG = SimConfig(overhead_gb=4.5, working_layers=2.33, compute_scale=1.02, microbatch_overhead_s=-0.0008)

# Profiles written by heteroplan.runtime.profiler (a user data directory): the calibration
# above belongs to Sailor's GH200 profiler and training loop, so none is applied.
PROFILED_CONFIG = SimConfig()


def load_sim_config(data_dir: str | Path) -> SimConfig:
    """The simulator constants of ``data_dir``: its ``sim_config.json`` over :data:`PROFILED_CONFIG`.

    Cached per file; re-read when the file changes. Raises InputError naming the file and the
    constant when it is malformed.
    """
    path = resolve_data_dir(data_dir) / SIM_CONFIG_FILE
    try:
        st = path.stat()
    except OSError:
        return PROFILED_CONFIG
    return _load(str(path), st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=16)
def _load(path: str, mtime_ns: int, size: int) -> SimConfig:
    try:
        values = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(path, "unreadable", f"not a JSON object of simulator constants: {exc}") from None
    try:
        return SimConfig.from_dict(values, PROFILED_CONFIG)
    except InputError as exc:
        raise InputError(f"{path}: {exc.field}", exc.value, exc.reason) from None
