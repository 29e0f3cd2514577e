"""Constants of the Sailor-style simulator, per platform, and their table in a data directory.

:class:`SimConfig` holds the constants of one platform (a GPU type with its software stack:
bytes per parameter, memory overheads, the compute scale, fixed per-microbatch and per-transfer
seconds, the ranks' speed noise, how a TP group sends activations and which sends the transport
buffers). :class:`PlatformConfigs`
maps GPU types to their :class:`SimConfig`, with an explicit *uncalibrated* default for a type
that has none (the simulator reports which types used it).

Shipped data: :data:`SHIPPED_PLATFORMS`, read from ``heteroplan/data/sailor/platforms.json``
(GH-96 fitted on Sailor's GH200 runs, the RTX types on its MIT runs;
``benchmarks/sailor_sim_accuracy.py`` refits them); :data:`DEFAULT_CONFIG` is its GH-96 row.
A user data directory: its ``sim_config.json`` in the same table format
(``{"platforms": {gpu_type: {constant: number}}}``, written by :func:`write_platform`, e.g. by
``heteroplan profile --calibrate``) over :data:`PROFILED_CONFIG`; an older flat file
``{constant: number}`` applies to every GPU type.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from heteroplan.atomic_json import write_json_atomic
from heteroplan.errors import InputError
from heteroplan.inputs import read_json
from heteroplan.perf.sailor_profiles import DATA_DIR, resolve_data_dir
from heteroplan.schema import Number, Record, Table, Text, decode, shown

__all__ = [
    "SimConfig", "PlatformConfigs", "DEFAULT_CONFIG", "PROFILED_CONFIG", "UNCALIBRATED_CONFIG", "SHIPPED_PLATFORMS",
    "SIM_CONFIG_FILE", "PLATFORMS_FILE", "load_sim_config", "load_platforms", "write_platform", "as_platforms",
]

SIM_CONFIG_FILE = "sim_config.json"
PLATFORMS_FILE = "platforms.json"


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
            or a single one loses none (:mod:`heteroplan.planner.model.straggler`); 0 in Sailor's model.
        replicated_tp_sends: how a TP group hands an activation (or its gradient) to the next
            stage: 0 = it crosses once, as one flow (Sailor's runtime, the measured runs), 1 =
            every TP rank sends the whole replicated activation to its peer (heteroplan's
            runtime: ``tp`` flows through the node's NIC at once); see :mod:`heteroplan.planner.model.comm`.
            Not fitted: a property of the training framework.
        allreduce_bucket_bytes: gradient bytes per all-reduce bucket (0: one all-reduce of the
            whole stage); each bucket is a ring of its own, paying the latency and the bandwidth
            of its message size.
        eager_send_bytes: largest message (bytes, per sending rank) that a pipeline send hands to
            the transport's pre-posted buffers without waiting for its receiver (NCCL's
            ``NCCL_BUFFSIZE``: 4 MiB by default); such a send hides behind the sender's compute
            and the receiver waits only for what has not arrived (:mod:`heteroplan.planner.model.pipeline_replay`).
            0: every pipeline transfer blocks both ends. Not fitted: a property of the
            communication library.
        update_bytes_per_param: bytes the optimizer step moves per parameter when it is one
            fused, memory-bound kernel (DeepSpeed's ``FusedAdam`` on fp32 weights: reads weight,
            gradient and both moments, writes weight and moments: 28); a stage's update then
            takes ``update_bytes_per_param * parameters / memory bandwidth`` of its GPU
            (:attr:`heteroplan.cluster.GPUType.memory_bandwidth_gbs`) instead of the profile's
            measured update. 0 (or a GPU type without a bandwidth): the profile's. Not fitted: a
            property of the training framework.
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
    replicated_tp_sends: float = 0.0
    allreduce_bucket_bytes: float = 0.0
    eager_send_bytes: float = 0.0
    update_bytes_per_param: float = 0.0

    def __post_init__(self) -> None:
        for name in self.constant_names():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise InputError(f"SimConfig.{name}", value, "must be a finite number")
        if self.compute_scale <= 0:
            raise InputError("SimConfig.compute_scale", self.compute_scale, "must be > 0")
        for name in ("bytes_per_param", "act_bytes_per_float", "grad_bytes_per_param", "act_comm_bytes_per_float",
                     "overhead_gb", "working_layers", "logits_factor"):
            if getattr(self, name) < 0:  # memory cannot be negative (it would plan into missing memory)
                raise InputError(f"SimConfig.{name}", getattr(self, name), "must be >= 0")
        for name in ("transfer_latency_s", "allreduce_latency_s"):
            if getattr(self, name) < 0:
                raise InputError(f"SimConfig.{name}", getattr(self, name), "must be >= 0 seconds")
        if self.straggler_cv < 0:
            raise InputError("SimConfig.straggler_cv", self.straggler_cv, "must be >= 0 (a fraction of compute time)")
        if self.replicated_tp_sends not in (0, 1):
            raise InputError("SimConfig.replicated_tp_sends", self.replicated_tp_sends, "must be 0 (send once) or 1")
        for name in ("allreduce_bucket_bytes", "eager_send_bytes", "update_bytes_per_param"):
            if getattr(self, name) < 0:
                raise InputError(f"SimConfig.{name}", getattr(self, name), "must be >= 0 bytes")

    def update_s(self, profiled_s: float | np.ndarray, params: float | np.ndarray,
                 memory_bandwidth_gbs: float) -> float | np.ndarray:
        """Seconds of a stage's optimizer step over ``params`` parameters per GPU: memory-bound,
        ``update_bytes_per_param * params / bandwidth``, when this platform's step is one fused
        kernel and the GPU's bandwidth is known; else the profile's ``profiled_s``
        (works elementwise on arrays)."""
        if self.update_bytes_per_param > 0 and memory_bandwidth_gbs > 0:
            return self.update_bytes_per_param * params / (memory_bandwidth_gbs * 1e9)
        return profiled_s

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
            raise InputError("sim_config", shown(unknown), f"unknown constants; known: {list(cls.constant_names())}")
        return replace(base or cls(), **decode(CONSTANTS, values, "sim_config"))

    def write(self, data_dir: str | Path, gpu_type: str | None = None) -> Path:
        """Store these constants in ``data_dir/sim_config.json``; returns the file's path.

        With ``gpu_type``, as that platform's row of the directory's table (other rows kept,
        :func:`write_platform`); without, as the flat file that applies to every GPU type.
        ``simulate(..., data_dir=data_dir)`` and ``plan_job(..., data_dir=data_dir)`` then use them.
        """
        if gpu_type is not None:
            return write_platform(data_dir, gpu_type, self)
        path = Path(data_dir).expanduser() / SIM_CONFIG_FILE
        write_json_atomic(path, self.to_dict())
        return path


_BYTES = Number(low=0, high=1e15, unit="bytes")
CONSTANTS = Record({}, {
    "bytes_per_param": Number(low=0, high=1024, unit="bytes"), "act_bytes_per_float": Number(low=0, high=64, unit="bytes"),
    "grad_bytes_per_param": Number(low=0, high=1024, unit="bytes"),
    "act_comm_bytes_per_float": Number(low=0, high=64, unit="bytes"), "overhead_gb": Number(low=0, high=1e4, unit="GB"),
    "working_layers": Number(low=0, high=1e4, unit="layers"), "logits_factor": Number(low=0, high=1e4),
    "microbatch_overhead_s": Number(low=-3600, high=3600, unit="s"), "compute_scale": Number(above=0, high=1e6),
    "transfer_latency_s": Number(low=0, high=3600, unit="s"), "allreduce_latency_s": Number(low=0, high=3600, unit="s"),
    "straggler_cv": Number(low=0, high=100), "replicated_tp_sends": Number(low=0, high=1),
    "allreduce_bucket_bytes": _BYTES, "eager_send_bytes": _BYTES,
    "update_bytes_per_param": Number(low=0, high=1024, unit="bytes")})
"""The simulator's constants in a ``sim_config.json`` (or one platform's row): finite, within physical bounds."""
_FITTED_ON = Table(Text(max_len=4096, min_len=0), Text(), 0, 10_000)


@dataclass(frozen=True)
class PlatformConfigs:
    """Simulator constants per GPU type, and the default for a type without its own.

    Attributes:
        platforms: ``{gpu_type: SimConfig}``.
        default: constants of a GPU type not in ``platforms``.
        default_is_calibrated: False when ``default`` is the uncalibrated fallback (results then
            name the GPU types that used it); True when one config was chosen for every type.
        fitted_on: ``{gpu_type: what its constants were fitted on}`` (documentation only).
    """

    platforms: Mapping[str, SimConfig]
    default: SimConfig
    default_is_calibrated: bool = False
    fitted_on: Mapping[str, str] = field(default_factory=dict, compare=False)

    def for_gpu(self, gpu_type: str) -> SimConfig:
        """The constants of ``gpu_type`` (the default when it has none)."""
        return self.platforms.get(gpu_type, self.default)

    def uncalibrated(self, gpu_types: Iterable[str]) -> tuple[str, ...]:
        """Those of ``gpu_types`` that fall back on the uncalibrated default, sorted."""
        if self.default_is_calibrated:
            return ()
        return tuple(sorted({t for t in gpu_types if t not in self.platforms}))

    def with_values(self, **values: float) -> PlatformConfigs:
        """This table with ``values`` set on every row and on the default (e.g.
        ``eager_send_bytes=0`` for every transfer blocking)."""
        return replace(self, platforms={t: replace(c, **values) for t, c in self.platforms.items()},
                       default=replace(self.default, **values))

    def to_dict(self) -> dict[str, object]:
        """The table format of ``platforms.json`` / ``sim_config.json``."""
        out: dict[str, object] = {"platforms": {t: c.to_dict() for t, c in sorted(self.platforms.items())}}
        if self.fitted_on:
            out["fitted_on"] = dict(sorted(self.fitted_on.items()))
        return out

    @classmethod
    def from_dict(cls, values: Mapping[str, object], default: SimConfig, where: str = "sim_config") -> PlatformConfigs:
        """Parse the table format (``{"platforms": {type: {constant: number}}, "fitted_on": {...}}``)
        or a flat ``{constant: number}`` (one config for every type) over ``default``."""
        if not isinstance(values, Mapping):
            raise InputError(where, type(values).__name__, "must be a JSON object")
        if "platforms" not in values:
            return cls({}, SimConfig.from_dict(values, default), True)
        rows = values["platforms"]
        if not isinstance(rows, Mapping):
            raise InputError(f"{where}.platforms", type(rows).__name__, "must be {gpu_type: {constant: number}}")
        platforms = {}
        decode(Table(Record(extra=True), Text(), 0, 10_000), rows, f"{where}.platforms")  # GPU types: bounded names
        for gpu_type, row in rows.items():
            try:
                platforms[str(gpu_type)] = SimConfig.from_dict(row, default)
            except InputError as exc:
                raise InputError(f"{where}.platforms.{gpu_type}: {exc.field}", exc.value, exc.reason) from None
        fitted_on = decode(_FITTED_ON, values.get("fitted_on", {}), f"{where}.fitted_on")
        unknown = sorted(set(values) - {"platforms", "fitted_on"})
        if unknown:
            raise InputError(f"{where}.{shown(unknown[0])}", values[unknown[0]], "unknown key; known: platforms, fitted_on")
        return cls(platforms, default, False, fitted_on)


def as_platforms(config: SimConfig | PlatformConfigs) -> PlatformConfigs:
    """``config`` as a table: a single :class:`SimConfig` applies to every GPU type."""
    if isinstance(config, PlatformConfigs):
        return config
    if not isinstance(config, SimConfig):
        raise InputError("config", type(config).__name__, "must be a SimConfig or PlatformConfigs")
    return PlatformConfigs({}, config, True)


# Profiles written by heteroplan.runtime.profiler (a user data directory): no calibration, and
# heteroplan's runtime sends the replicated activation from every TP rank.
PROFILED_CONFIG = SimConfig(replicated_tp_sends=1.0)

# A GPU type of the shipped data without its own row: profiled compute as measured (no time
# constant), and the framework memory of the one platform whose memory the model explains
# (GH200: 4.5 GB per GPU and 2.33 layers of backward buffers, rounded), so that a type without
# calibration is not planned into memory it lacks. Results name the types that used it.
UNCALIBRATED_CONFIG = SimConfig(overhead_gb=4.5, working_layers=2.33)


def _shipped_platforms() -> PlatformConfigs:
    path = DATA_DIR / PLATFORMS_FILE
    return PlatformConfigs.from_dict(json.loads(path.read_text()), UNCALIBRATED_CONFIG, str(path))


# Fitted by benchmarks/sailor_sim_accuracy.py (GH-96 on the GH200 runs, RTX types on the MIT runs).
SHIPPED_PLATFORMS = _shipped_platforms()
DEFAULT_CONFIG = SHIPPED_PLATFORMS.for_gpu("GH-96")


def write_platform(data_dir: str | Path, gpu_type: str, config: SimConfig, fitted_on: str = "") -> Path:
    """Store ``config`` as ``gpu_type``'s row of ``data_dir/sim_config.json`` (the table format;
    the other rows, and a flat file's constants as their base, are kept); returns the path."""
    path = Path(data_dir).expanduser() / SIM_CONFIG_FILE
    table = load_platforms(data_dir)
    rows = {t: c.to_dict() for t, c in table.platforms.items()}
    rows[str(gpu_type)] = config.to_dict()
    notes = dict(table.fitted_on)
    if fitted_on:
        notes[str(gpu_type)] = fitted_on
    write_json_atomic(path, {"platforms": rows, **({"fitted_on": notes} if notes else {})})
    return path


def load_platforms(data_dir: str | Path | None = None) -> PlatformConfigs:
    """The constants table of ``data_dir`` (None: :data:`SHIPPED_PLATFORMS`): its
    ``sim_config.json`` over :data:`PROFILED_CONFIG` (every type uses that when there is no file).

    Cached per file; re-read when the file changes. Raises InputError naming the file, the GPU
    type and the constant when it is malformed.
    """
    if data_dir is None:
        return SHIPPED_PLATFORMS
    path = resolve_data_dir(data_dir) / SIM_CONFIG_FILE
    try:
        st = path.stat()
    except OSError:
        return PlatformConfigs({}, PROFILED_CONFIG)
    return _load(str(path), st.st_mtime_ns, st.st_size)


def load_sim_config(data_dir: str | Path, gpu_type: str | None = None) -> SimConfig:
    """The constants of ``gpu_type`` in ``data_dir``'s table (:func:`load_platforms`); without
    ``gpu_type``, the directory's default (its flat file, or :data:`PROFILED_CONFIG`)."""
    table = load_platforms(data_dir)
    return table.default if gpu_type is None else table.for_gpu(gpu_type)


@lru_cache(maxsize=16)
def _load(path: str, mtime_ns: int, size: int) -> PlatformConfigs:
    values = read_json(path, "sim_config")  # InputError: unreadable, not UTF-8, invalid, nested too deep
    try:
        return PlatformConfigs.from_dict(values, PROFILED_CONFIG, "sim_config")
    except InputError as exc:
        raise InputError(f"{path}: {exc.field}", exc.value, exc.reason) from None
