"""Iteration time, peak memory and cost of a training plan (Sailor-style simulator).

Model (units: seconds, bytes, GB, $):

- Compute: stage ``s`` of pipeline replica ``d`` takes ``f + b`` seconds per microbatch, the sum
  of its layers' profiled forward/backward times on that replica's GPU type and TP degree.
- Activations: between stages ``s`` and ``s+1`` the TP group hands one microbatch's output
  (``4 * act_out * mbs`` bytes) to its peer group, and the gradient comes back the same way:
  ``c_s`` each (:mod:`heteroplan.planner.model.comm`: one flow of the whole activation, or ``tp``
  replicated flows sharing the node's NIC, plus ``transfer_latency_s``).
- 1F1B pipeline with blocking point-to-point: a stage's steady-state step is
  ``sigma_s = f_s + b_s + 2 (c_{s-1} + c_s)``; with ``M`` microbatches
  ``T_pipe = (M - 1) max_s sigma_s + sum_s (f_s + b_s) + 2 sum_s c_s``, where ``f + b`` is
  ``compute_scale * profiled + microbatch_overhead_s`` (calibrated on real runs).
  The slowest pipeline replica sets the pace. With ``straggler_cv > 0`` each rank's compute
  varies by that fraction per iteration and the maximum over replicas is the expected maximum
  of normals (:mod:`heteroplan.planner.model.straggler`; 0 unless calibrated).
- Gradient sync: ring all-reduce per stage over its replicas, ``2 (D-1) (alpha + G / (D bw))``
  per bucket, ``G`` the fp32 gradient bytes of one GPU, ``bw`` the slowest link of the ring
  shared by the ``tp`` rings, ``alpha`` = ``allreduce_latency_s`` per ring step
  (:mod:`heteroplan.planner.model.comm`); then the optimizer update.
  ``T = max_d T_pipe(d) + max_s (AR_s + U_s)``.
- Constants per platform: each replica's compute and memory use its GPU type's
  :class:`SimConfig` (:class:`PlatformConfigs`); a transfer uses its sender's, an all-reduce the
  largest latency of its ring. A type without its own constants uses the uncalibrated default,
  and :attr:`PlanEstimate.uncalibrated` names it.
- Memory per GPU: ``overhead + bytes_per_param * params + act_bytes * act_mem * mbs * inflight``,
  ``inflight = min(S - s, M)`` microbatches held by stage ``s`` under 1F1B.
- Cost per iteration: GPUs x $/h x T / 3600 + egress ($/GB) on bytes that cross zones.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np

from heteroplan.cluster import SAILOR_GPU_TYPES, GPUType
from heteroplan.errors import InputError
from heteroplan.perf.sailor_network import NetworkModel, load_network
from heteroplan.perf.sailor_profiles import ModelProfile, load_model_profile
from heteroplan.planner.model import sync
from heteroplan.planner.model.comm import pipeline_send_buffered, pipeline_send_s
from heteroplan.planner.model.flops import (
    Utilization,
    plan_peak_tflops,
    recomputed_flops_per_sample,
    utilization,
)
from heteroplan.planner.model.pipeline_replay import one_f_one_b_time
from heteroplan.planner.model.sim_config import (
    DEFAULT_CONFIG,
    PROFILED_CONFIG,
    SHIPPED_PLATFORMS,
    PlatformConfigs,
    SimConfig,
    as_platforms,
    load_platforms,
)
from heteroplan.planner.model.straggler import clark_max, pipeline_times
from heteroplan.planner.model.terms import (
    activation_bytes,
    activations_gb,
    allreduce_buffer_bytes,
    compute_prefix_s,
    compute_s,
    fp32_weight_bytes,
    measured_layer_bytes,
    measured_peak_bytes,
    measured_state_bytes,
    memory_gb,
    one_f_one_b_s,
    parameter_state_gb,
    pipeline_step_s,
    rental_usd_per_s,
    sharded_update_s,
    working_gb,
    zero1_share,
)
from heteroplan.planner.plan import OptimizerSharding, Plan, Precision, Recomputation, Stage

__all__ = [
    "SimConfig", "PlatformConfigs", "PlanEstimate", "simulate_plan", "model_inputs", "ModelInputs",
    "check_model_inputs", "DEFAULT_CONFIG",
    "PROFILED_CONFIG", "SHIPPED_PLATFORMS", "gpu_catalog", "replica_pipeline_times", "MemoryFit", "TimeTerms",
    "CostTerms", "MemoryTerms", "StageMemory", "StageTimes", "memory_terms", "PrecisionWarning",
]


class PrecisionWarning(UserWarning):
    """A plan priced from a profile that does not record its precision (the shipped Sailor data,
    or a profile without memory measurements), in a precision other than fp32, which the search
    assumes for such profiles: its times are those measured, not of the plan's arithmetic."""


def gpu_catalog(gpu_types: tuple[GPUType, ...] = SAILOR_GPU_TYPES) -> dict[str, GPUType]:
    return {t.name: t for t in gpu_types}


@dataclass(frozen=True)
class MemoryFit:
    """Whether a plan fits its GPUs' memory, told by its tightest GPU.

    Attributes:
        fits: every GPU of every stage needs at most its type's memory.
        stage: the stage of the tightest GPU (largest need minus capacity).
        gpu_type: that GPU's type.
        need_gb: peak GB that GPU needs.
        capacity_gb: GB of memory of that GPU type.
    """

    fits: bool
    stage: int
    gpu_type: str
    need_gb: float
    capacity_gb: float

    @property
    def over_gb(self) -> float:
        """GB by which the tightest GPU overflows its memory (0 when the plan fits)."""
        return max(self.need_gb - self.capacity_gb, 0.0)

    @property
    def headroom_gb(self) -> float:
        """GB left on the tightest GPU (negative when the plan does not fit)."""
        return self.capacity_gb - self.need_gb

    def describe(self) -> str:
        where = f"stage {self.stage} ({self.gpu_type}): {self.need_gb:.3g} GB needed of {self.capacity_gb:.3g} GB"
        if self.fits:
            return f"fits memory: tightest GPU {where}"
        return f"DOES NOT FIT memory by {self.over_gb:.3g} GB: {where}"


def memory_fit(memory: np.ndarray, capacity: np.ndarray, gpu_types: list[list[str]]) -> MemoryFit:
    """The :class:`MemoryFit` of a plan from its ``(S, D)`` GB per GPU, the ``(S, D)`` GB of each
    replica's GPU type and the ``[s][d]`` type names (a GPU fits when it needs at most its memory)."""
    excess = memory - capacity
    s, d = np.unravel_index(int(np.argmax(excess)), excess.shape)
    return MemoryFit(bool((excess <= 0).all()), int(s), gpu_types[s][d], float(memory[s, d]), float(capacity[s, d]))


@dataclass(frozen=True)
class TimeTerms:
    """Seconds of one iteration by term along its critical path; they add up to the iteration time.

    Attributes:
        compute: forward + backward of the slowest pipeline replica: its bottleneck stage's
            ``(M - 1) (f + b)`` in the steady state plus every stage's once (fill and drain).
        pipeline_send: that replica's activation and gradient transfers, counted the same way
            (``2 (c_in + c_out)`` per steady step of the bottleneck, ``2 c`` per stage once).
        schedule: the 1F1B replay's correction of the closed form (<= 0 where buffered sends
            overlap compute; 0 where every send blocks).
        straggler: the expected maximum over pipeline replicas with noisy ranks minus the slowest
            replica's own time (0 without ``straggler_cv``).
        allreduce: the slowest stage's gradient ring all-reduce.
        optimizer_update: that stage's optimizer step.
    """

    compute: float
    pipeline_send: float
    schedule: float
    straggler: float
    allreduce: float
    optimizer_update: float

    NAMES = ("compute", "pipeline_send", "schedule", "straggler", "allreduce", "optimizer_update")

    @property
    def total(self) -> float:
        return sum(getattr(self, n) for n in self.NAMES)

    def as_dict(self) -> dict[str, float]:
        return {n: getattr(self, n) for n in self.NAMES}


@dataclass(frozen=True)
class CostTerms:
    """$ per iteration by term.

    Attributes:
        rental: GPUs x $/h x iteration seconds / 3600.
        pipeline_egress: activations and their gradients that cross zones between stages.
        allreduce_egress: gradient all-reduce ring edges that cross zones (with ZeRO-1's
            all-gather of the updated weights over the same ring).
    """

    rental: float
    pipeline_egress: float
    allreduce_egress: float

    NAMES = ("rental", "pipeline_egress", "allreduce_egress")

    @property
    def total(self) -> float:
        return self.rental + (self.pipeline_egress + self.allreduce_egress)

    def as_dict(self) -> dict[str, float]:
        return {n: getattr(self, n) for n in self.NAMES}


@dataclass(frozen=True)
class MemoryTerms:
    """GB per GPU of one stage replica by term (:mod:`heteroplan.planner.model.terms`); ``total``
    is their sum (the peak)."""

    weights: float
    gradients: float
    optimizer_state: float
    activations: float
    working_buffers: float
    runtime_overhead: float
    total: float

    NAMES = ("weights", "gradients", "optimizer_state", "activations", "working_buffers", "runtime_overhead", "total")


@dataclass(frozen=True, eq=False)
class StageMemory:
    """:class:`MemoryTerms` of every (stage, pipeline replica): ``(S, D)`` GB arrays, and
    ``capacity``: ``(S, D)`` GB of each replica's GPU type."""

    weights: np.ndarray
    gradients: np.ndarray
    optimizer_state: np.ndarray
    activations: np.ndarray
    working_buffers: np.ndarray
    runtime_overhead: np.ndarray
    total: np.ndarray
    capacity: np.ndarray

    def at(self, stage: int, replica: int) -> MemoryTerms:
        return MemoryTerms(*(float(getattr(self, n)[stage, replica]) for n in MemoryTerms.NAMES))


@dataclass(frozen=True, eq=False)
class StageTimes:
    """Seconds of every term per stage and pipeline replica.

    Attributes:
        compute: ``(S, D)`` forward + backward per microbatch.
        pipeline_send: ``(S + 1, D)`` one activation (or gradient) transfer, ``[s]`` into stage ``s``.
        allreduce: ``(S,)`` the stage's gradient ring all-reduce.
        optimizer_update: ``(S, D)`` the optimizer step.
        pipeline: ``(D,)`` each replica's 1F1B time (no stragglers).
        sync: ``(S,)`` the stage's sync after the pipeline: all-reduce + the slowest replica's update.
        forward_share: ``(S, D)`` the forward's profiled fraction of ``compute`` (no unit).
        buffered: ``(S - 1, D)`` booleans: whether the send from stage ``s`` to ``s + 1`` is
            buffered (a replica with one is priced by the 1F1B replay).
    """

    compute: np.ndarray
    pipeline_send: np.ndarray
    allreduce: np.ndarray
    optimizer_update: np.ndarray
    pipeline: np.ndarray
    sync: np.ndarray
    forward_share: np.ndarray
    buffered: np.ndarray


@dataclass(frozen=True)
class PlanEstimate:
    """What the machine model predicts for one plan, in total and by term.

    Units are in the names, as in :class:`~heteroplan.planner.api.PlanResult`.

    Attributes:
        iteration_time_s: seconds per iteration.
        memory_per_stage_gb: peak GB per GPU, worst replica of each stage.
        cost_per_iteration_usd: $ per iteration (GPU rental + egress).
        egress_gb: GB per iteration that cross zones.
        pipeline_time_s: seconds of the slowest pipeline replica.
        sync_time_s: seconds of all-reduce + optimizer update (slowest stage).
        stage_times: the arrays behind the times, ``S`` stages x ``D`` pipeline replicas
            (:class:`StageTimes`: seconds of every term per stage and replica, each replica's
            pipeline, each stage's sync, the forward's share, which sends are buffered).
        stage_memory: the arrays behind the memory (:class:`StageMemory`: GB per GPU of every term
            per stage and replica, ``total`` the peak, ``capacity`` the GPU type's).
        uncalibrated: GPU types of the plan that had no constants of their own and used the
            uncalibrated default (empty when every type is calibrated).
        memory_fit: whether every GPU fits its memory; if not, by how much and on which stage
            (:class:`MemoryFit`; a plan that does not fit is still priced, as if it did).
        time_terms: the iteration's seconds by term (:class:`TimeTerms`, they add up to it).
        cost_terms: the iteration's $ by term (:class:`CostTerms`).
        utilization: model FLOPs, achieved TFLOP/s and MFU of the predicted iteration against
            the plan's GPUs' peak in its precision (:class:`~heteroplan.planner.model.flops.Utilization`);
            ``None`` when the profile has no FLOP counts (Sailor's shipped data).
    """

    iteration_time_s: float
    memory_per_stage_gb: tuple[float, ...]
    cost_per_iteration_usd: float
    egress_gb: float
    pipeline_time_s: float
    sync_time_s: float
    stage_times: StageTimes = field(compare=False, repr=False)
    stage_memory: StageMemory = field(compare=False, repr=False)
    uncalibrated: tuple[str, ...] = ()
    memory_fit: MemoryFit | None = None
    time_terms: TimeTerms | None = field(default=None, compare=False)
    cost_terms: CostTerms | None = field(default=None, compare=False)
    utilization: Utilization | None = field(default=None, compare=False)

    @property
    def fits(self) -> bool:
        """Whether every GPU of the plan fits its memory."""
        return self.memory_fit is None or self.memory_fit.fits

    @property
    def throughput_iter_s(self) -> float:
        """Iterations per second."""
        return 1.0 / self.iteration_time_s

    @property
    def peak_memory_gb(self) -> float:
        """The largest of :attr:`memory_per_stage_gb` (GB per GPU)."""
        return max(self.memory_per_stage_gb)

    def describe(self) -> str:
        """Multi-line summary: time, cost, memory per stage and whether it fits."""
        lines = [
            f"predicted: {self.iteration_time_s:.4g} s/iteration = {self.throughput_iter_s:.4g} iter/s, "
            f"${self.cost_per_iteration_usd:.4g}/iteration, peak memory {self.peak_memory_gb:.3g} GB/GPU "
            f"(per stage: {', '.join(f'{m:.3g}' for m in self.memory_per_stage_gb)})"
        ]
        if self.memory_fit is not None:
            lines.append(self.memory_fit.describe())
        if self.uncalibrated:
            lines.append("no simulator calibration for " + ", ".join(self.uncalibrated)
                         + ": predicted with the uncalibrated default constants")
        if self.utilization is not None:
            lines.append("predicted " + self.utilization.describe())
        return "\n".join(lines)


def replica_pipeline_times(
    fb: np.ndarray, forward_share: np.ndarray, comm: np.ndarray, buffered: np.ndarray, microbatches: np.ndarray, cv: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Mean and spread (seconds, ``(D,)`` each) of each pipeline replica's 1F1B time.

    ``fb``, ``forward_share``: ``(S, D)``; ``comm``: ``(S + 1, D)`` transfer seconds, ``comm[s + 1]``
    between stage ``s`` and ``s + 1`` (ends 0); ``buffered``: ``(S - 1, D)``. The closed form
    (:func:`~heteroplan.planner.model.straggler.pipeline_times`), except that a replica with a buffered
    send is replayed (:func:`~heteroplan.planner.model.pipeline_replay.one_f_one_b_time`, a stage's flows
    sharing its NIC); the spread is the closed form's either way."""
    sigma = pipeline_step_s(fb, comm[:-1], comm[1:])
    mean, sd = pipeline_times(fb, sigma, fb.sum(axis=0) + 2 * comm.sum(axis=0), microbatches, cv)
    for d in np.flatnonzero(buffered.any(axis=0)):
        mean[d] = one_f_one_b_time(fb[:, d] * forward_share[:, d], fb[:, d] * (1 - forward_share[:, d]),
                                   comm[1:-1, d], int(microbatches[d]), buffered[:, d], shared_nic=True)
    return mean, sd


def stage_memory_gb(
    profile: ModelProfile, tp: int, first: int, last: int, mbs: int, inflight: int, config: SimConfig
) -> float:
    """Peak GB per GPU of a stage holding ``inflight`` microbatches' activations."""
    return float(memory_terms(profile, tp, first, last, mbs, inflight, config).total)


def _stage_floats(profile: ModelProfile, tp: int, first: int, last: int, config: SimConfig) -> tuple[float, float, float]:
    """Parameters, kept activation floats per sample and working-buffer floats per sample (per GPU)
    of the layers ``[first, last)`` at TP ``tp``."""
    params, act = profile.stage_sizes(tp, first, last)
    working = config.working_layers * float(profile.act_mem[tp][first:last].max())
    if last == profile.num_layers:
        working += config.logits_factor * float(profile.act_out[tp][last - 1])
    return params, act, working


def memory_terms(
    profile: ModelProfile, tp: int, first: int, last: int, mbs: int, inflight: int, config: SimConfig
) -> MemoryTerms:
    """GB per GPU of a stage by term (:mod:`heteroplan.planner.model.terms`)."""
    params, act, working = _stage_floats(profile, tp, first, last, config)
    state = parameter_state_gb(params, config)
    return MemoryTerms(state["weights"], state["gradients"], state["optimizer_state"],
                       activations_gb(act, mbs, inflight, config), working_gb(working, mbs, config), config.overhead_gb,
                       total=memory_gb(params, act, working, mbs, inflight, config))


def measured_memory_terms(profile: ModelProfile, stage: Stage, tp: int, mbs: int, inflight: int, share: float,
                          replicas: int = 1) -> MemoryTerms:
    """GB per GPU of a stage by term, from the memory its profile measured
    (:func:`~heteroplan.planner.model.terms.measured_peak_bytes`): the replica holds ``share`` of
    the optimizer state and the step's buffers (ZeRO-1, :func:`~heteroplan.planner.model.terms.zero1_share`;
    1 unsharded); with ``replicas > 1`` and ``tp > 1`` the gradients'
    all-reduce holds a flat copy of them (:func:`~heteroplan.planner.model.terms.allreduce_buffer_bytes`)."""
    mem = profile.measured
    assert mem is not None
    a, b = stage.first_layer, stage.last_layer
    params = float(profile.params[tp][a:b].sum())
    weights, grads, state = measured_state_bytes(params, mem.optimizer_state_per_param, share)
    kept, transient = (x[a:b] for x in measured_layer_bytes(mem, tp, mbs, stage.recompute is Recomputation.FULL))
    after_backward = max(float(mem.update_working[tp][a:b].sum()) * share, allreduce_buffer_bytes(params, replicas, tp))
    acts, work = measured_peak_bytes(kept, transient, inflight, after_backward)
    gb = [x / 1e9 for x in (weights, grads, state, acts, work, mem.overhead)]
    return MemoryTerms(*gb, total=sum(gb))


def _zero1_shares(profile: ModelProfile, plan: Plan, reps: list) -> np.ndarray:
    """``(S, D)``: the share of its stage's optimizer state each replica's GPU holds, the busiest
    replica's under ZeRO-1 (:func:`~heteroplan.planner.model.terms.zero1_share`, once per stage
    and TP degree), 1 unsharded."""
    out = np.ones((plan.pp, plan.dp))
    for s, stage in enumerate(plan.stages):
        if stage.optimizer_sharding is OptimizerSharding.ZERO1:
            by_tp: dict[int, float] = {}
            for d, r in enumerate(reps[s]):
                if r.tp not in by_tp:
                    by_tp[r.tp] = zero1_share(profile.measured, r.tp, stage.first_layer, stage.last_layer, plan.dp)
                out[s, d] = by_tp[r.tp]
    return out


def _stage_memory(profile: ModelProfile, plan: Plan, reps: list, cfg: list[list[SimConfig]], micro: np.ndarray,
                  shares: np.ndarray, capacity: np.ndarray) -> StageMemory:
    """The memory terms of every (stage, replica), ``inflight = min(S - s, M_d)`` microbatches held
    by stage ``s`` under 1F1B, holding ``shares[s, d]`` of the optimizer state
    (:func:`_zero1_shares`); evaluated on arrays, one platform's constants at a time.
    ``capacity``: ``(S, D)`` GB of each replica's GPU type."""
    S, D, mbs = plan.pp, plan.dp, plan.microbatch_size
    if profile.measured is not None:
        terms = {name: np.zeros((S, D)) for name in MemoryTerms.NAMES}
        for s, stage in enumerate(plan.stages):
            for d, r in enumerate(reps[s]):
                one = measured_memory_terms(profile, stage, r.tp, mbs, int(min(S - s, micro[d])), float(shares[s, d]), D)
                for name in MemoryTerms.NAMES:
                    terms[name][s, d] = getattr(one, name)
        return StageMemory(**terms, capacity=capacity)
    if any(st.recompute is not Recomputation.NONE or st.optimizer_sharding is not OptimizerSharding.NONE
           for st in plan.stages):
        raise InputError("plan.stages", plan.model, "recomputation and optimizer sharding need a profile that "
                         "measured memory (heteroplan profile, or profile_layers); this one has only sizes")
    floats = np.zeros((3, S, D))  # parameters, kept activation floats, working floats (per GPU)
    inflight = np.zeros((S, D))
    for s, stage in enumerate(plan.stages):
        for d, r in enumerate(reps[s]):
            floats[:, s, d] = _stage_floats(profile, r.tp, stage.first_layer, stage.last_layer, cfg[s][d])
            inflight[s, d] = int(min(S - s, micro[d]))
    terms = {name: np.zeros((S, D)) for name in MemoryTerms.NAMES}
    for c in {id(c): c for row in cfg for c in row}.values():
        on = np.array([[x is c for x in row] for row in cfg]).reshape(S, D)
        params, act, working, held = floats[0][on], floats[1][on], floats[2][on], inflight[on]
        for name, value in parameter_state_gb(params, c).items():
            terms[name][on] = value
        terms["activations"][on] = activations_gb(act, mbs, held, c)
        terms["working_buffers"][on] = working_gb(working, mbs, c)
        terms["runtime_overhead"][on] = c.overhead_gb
        terms["total"][on] = memory_gb(params, act, working, mbs, held, c)
    return StageMemory(**terms, capacity=capacity)


def simulate_plan(
    plan: Plan,
    *,
    profile: ModelProfile | None = None,
    network: NetworkModel | None = None,
    gpu_types: dict[str, GPUType] | None = None,
    config: SimConfig | PlatformConfigs | None = None,
    data_dir: str | Path | None = None,
) -> PlanEstimate:
    """Predict iteration time (s), peak memory per GPU (GB) and $/iteration of ``plan``, itemised
    by term (:class:`PlanEstimate`), and whether it fits its GPUs' memory.

    ``profile`` and ``network`` default to those of ``data_dir`` (a directory written by
    :mod:`heteroplan.runtime.profiler`; default: the shipped Sailor data). ``config``: one
    :class:`SimConfig` for every GPU type, or a table per type; default: the shipped table
    (:data:`SHIPPED_PLATFORMS`) for shipped data and, for a ``data_dir``, its ``sim_config.json``
    (written by ``heteroplan profile --calibrate``) over :data:`PROFILED_CONFIG`.

    Steps: check the plan against its profile (:func:`_check_plan`), price every stage replica's
    compute and update (:func:`_stage_compute`), its sends (:func:`_pipeline_sends`) and every
    stage's ring (:func:`_ring_sync`), then add them up (:func:`_estimate`).
    """
    if not isinstance(plan, Plan):
        raise InputError("plan", type(plan).__name__, "must be a heteroplan Plan (independent pipelines, a "
                         "PipelineSet: simulate_pipeline_set)")
    profile, network, gpu_types, table = model_inputs(plan.model, profile, network, gpu_types, config, data_dir)
    _check_plan(plan, profile, gpu_types)
    reps = [s.replica_list() for s in plan.stages]  # reps[s][d]
    cfg = [[table.for_gpu(r.gpu_type) for r in s] for s in reps]  # cfg[s][d]
    micro = np.asarray(plan.microbatches(), dtype=float)
    shares = _zero1_shares(profile, plan, reps)
    compute = _stage_compute(profile, plan, reps, cfg, gpu_types, shares)
    sends = _pipeline_sends(profile, network, plan, reps, cfg, micro)
    ring = _ring_sync(profile, network, plan, reps, cfg)
    uncalibrated = table.uncalibrated(r.gpu_type for row in reps for r in row)
    return _estimate(plan, profile, gpu_types, reps, cfg, micro, shares, compute, sends, ring, uncalibrated)


class ModelInputs(NamedTuple):
    """What a plan is priced with: the model's layer profile, the network, the GPU catalog by
    name ($/h, memory GB) and the simulator constants per GPU type."""

    profile: ModelProfile
    network: NetworkModel
    gpu_types: dict[str, GPUType]
    table: PlatformConfigs


def model_inputs(model: str, profile: ModelProfile | None, network: NetworkModel | None,
                 gpu_types: dict[str, GPUType] | None, config: SimConfig | PlatformConfigs | None,
                 data_dir: str | Path | None) -> ModelInputs:
    """The inputs :func:`simulate_plan` and ``simulate_pipeline_set`` price ``model``'s plans with,
    each given one checked and each missing one loaded (defaults: :func:`simulate_plan`)."""
    check_model_inputs(profile, network)
    if gpu_types is not None and (not isinstance(gpu_types, Mapping)
                                  or not all(isinstance(t, GPUType) for t in gpu_types.values())):
        raise InputError("gpu_types", gpu_types, "must map GPU type names to GPUType (gpu_catalog()) or be None")
    return ModelInputs(profile or load_model_profile(model, data_dir), network or load_network(data_dir),
                       gpu_types or gpu_catalog(), load_platforms(data_dir) if config is None else as_platforms(config))


def check_model_inputs(profile: object, network: object) -> None:
    """Raise :class:`InputError` unless ``profile`` is a :class:`ModelProfile` and ``network`` a
    :class:`NetworkModel` (or ``None``: the data directory's), before anything reads them."""
    if profile is not None and not isinstance(profile, ModelProfile):
        raise InputError("profile", type(profile).__name__, "must be a ModelProfile (load_model_profile) or None")
    if network is not None and not isinstance(network, NetworkModel):
        raise InputError("network", type(network).__name__, "must be a NetworkModel (load_network) or None")


def _check_plan(plan: Plan, profile: ModelProfile, gpu_types: dict[str, GPUType]) -> None:
    """Raise :class:`InputError` where ``plan`` does not match ``profile`` (layers, precision, a GPU
    type, microbatch and TP it did not profile); warn where a profile without a precision prices
    a plan in another than fp32 (:class:`PrecisionWarning`)."""
    if plan.num_layers != profile.num_layers:
        raise InputError("plan.stages", plan.num_layers, f"{profile.name} has {profile.num_layers} layers")
    if profile.measured is not None and profile.measured.precision != plan.precision.value:
        raise InputError("plan.precision", plan.precision.value,
                         f"{profile.name} was profiled in {profile.measured.precision}: profile it in "
                         f"{plan.precision.value} (heteroplan profile --precision {plan.precision.value}) under another name")
    if profile.measured is None and plan.precision is not Precision.FP32:
        warnings.warn(PrecisionWarning(
            f"plan.precision={plan.precision.value!r}: the profile of {profile.name} does not record its precision "
            f"(taken as fp32, as the search does): the plan is priced with the profile's times, not {plan.precision.value}'s; "
            f"profile it with heteroplan profile --precision {plan.precision.value} for a prediction in it"), stacklevel=3)
    for stage in plan.stages:
        for r in stage.replica_list():
            if r.gpu_type not in gpu_types:
                raise InputError("replica.gpu_type", r.gpu_type, f"unknown GPU type; known: {sorted(gpu_types)}")
            if not profile.has(r.gpu_type, plan.microbatch_size, r.tp):
                raise InputError(
                    "plan", (r.gpu_type, plan.microbatch_size, r.tp), f"no {profile.name} profile for this GPU type, microbatch and TP"
                )


def _stage_compute(profile: ModelProfile, plan: Plan, reps: list, cfg: list[list[SimConfig]],
                   gpu_types: dict[str, GPUType], shares: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(S, D)`` seconds of every stage replica's forward + backward per microbatch, the forward's
    share of it (for the replay and plots) and its optimizer step (over ``shares[s, d]`` of the
    state under ZeRO-1)."""
    S, D, mbs = plan.pp, plan.dp, plan.microbatch_size
    fb, fwd_share, upd = np.zeros((S, D)), np.zeros((S, D)), np.zeros((S, D))
    for s, stage in enumerate(plan.stages):
        for d, r in enumerate(reps[s]):
            c = cfg[s][d]
            prefix = compute_prefix_s(profile, r.gpu_type, mbs, r.tp, stage.recompute is Recomputation.FULL)
            f, b, u = (float(x) for x in prefix[:, stage.last_layer] - prefix[:, stage.first_layer])
            fb[s, d] = compute_s(f + b, c)
            fwd_share[s, d] = f / (f + b) if f + b > 0 else 0.5
            params = profile.stage_sizes(r.tp, stage.first_layer, stage.last_layer)[0]
            upd[s, d] = c.update_s(u, params, gpu_types[r.gpu_type].memory_bandwidth_gbs)
            if stage.optimizer_sharding is OptimizerSharding.ZERO1:
                upd[s, d] = sharded_update_s(upd[s, d], shares[s, d])
    return fb, fwd_share, upd


@dataclass(frozen=True, eq=False)
class _Sends:
    """Every pipeline boundary of a plan: ``comm`` ``(S + 1, D)`` seconds of one send (``comm[s]``
    into stage ``s``, ends 0), ``buffered`` ``(S - 1, D)`` whether the transport buffers it, and
    the bytes and $ per iteration billed where boundaries cross zones."""

    comm: np.ndarray
    buffered: np.ndarray
    egress_bytes: float
    egress_usd: float


def _pipeline_sends(profile: ModelProfile, network: NetworkModel, plan: Plan, reps: list,
                    cfg: list[list[SimConfig]], micro: np.ndarray) -> _Sends:
    """Each replica's activation (and gradient) transfer from stage ``s`` to ``s + 1``
    (:func:`~heteroplan.planner.model.comm.pipeline_send_s`, :func:`~heteroplan.planner.model.sync.boundary_egress`)."""
    S, D, mbs = plan.pp, plan.dp, plan.microbatch_size
    comm = np.zeros((S + 1, D))  # comm[s+1] is the link between stage s and s+1
    buffered = np.zeros((max(S - 1, 0), D), dtype=bool)  # sends the transport buffers (sender goes on)
    egress_bytes = egress_usd = 0.0
    for s, stage in enumerate(plan.stages[:-1]):
        for d, r in enumerate(reps[s]):
            c, nxt = cfg[s][d], reps[s + 1][d]
            nbytes = activation_bytes(profile.act_out[r.tp][stage.last_layer - 1], mbs, c)
            comm[s + 1, d] = float(pipeline_send_s(network, (r.gpu_type, r.zone), (nxt.gpu_type, nxt.zone), r.tp, nbytes, c))
            buffered[s, d] = pipeline_send_buffered(nbytes, r.tp, c)
            if r.zone != nxt.zone:
                sent, usd = sync.boundary_egress(network, r.zone, nxt.zone, nbytes, r.tp, micro[d], c)
                egress_bytes += sent
                egress_usd += usd
    return _Sends(comm, buffered, egress_bytes, egress_usd)


def _ring_sync(profile: ModelProfile, network: NetworkModel, plan: Plan, reps: list,
               cfg: list[list[SimConfig]]) -> tuple[np.ndarray, float, float]:
    """``(S,)`` seconds of every stage's ring collectives over its replicas in plan order
    (:func:`~heteroplan.planner.model.sync.ring_sync_s`: gradients, and ZeRO-1's all-gather), and
    the bytes and $ per iteration its edges across zones bill (:func:`~heteroplan.planner.model.sync.ring_egress`).
    A ring runs at its slowest TP degree, on the constants of its largest step latency."""
    S, D = plan.pp, plan.dp
    ar_s = np.zeros(S)
    egress_bytes = egress_usd = 0.0
    for s, stage in enumerate(plan.stages):
        if D <= 1:
            continue
        tp = min(r.tp for r in reps[s])
        ring_cfg = max(cfg[s], key=lambda c: c.allreduce_latency_s)
        params = profile.stage_sizes(tp, stage.first_layer, stage.last_layer)[0]
        grad_bytes = ring_cfg.grad_bytes_per_param * params
        weights = fp32_weight_bytes(params) if stage.optimizer_sharding is OptimizerSharding.ZERO1 else None
        edges = sync.ring_edges([(r.gpu_type, r.zone) for r in reps[s]])
        ar_s[s] = float(sync.ring_sync_s(network, set(edges), tp, D, grad_bytes, ring_cfg, weights))
        sent, usd = sync.ring_egress(network, edges, D, tp, sync.ring_bytes(grad_bytes, weights))
        egress_bytes += float(sent)
        egress_usd += float(usd)
    return ar_s, egress_bytes, egress_usd


def _estimate(plan: Plan, profile: ModelProfile, gpu_types: dict[str, GPUType], reps: list, cfg: list[list[SimConfig]],
              micro: np.ndarray, shares: np.ndarray, compute: tuple[np.ndarray, np.ndarray, np.ndarray],
              sends: _Sends, ring: tuple[np.ndarray, float, float], uncalibrated: tuple[str, ...]) -> PlanEstimate:
    """Add the priced terms up: ``T = max_d T_pipe(d) + max_s sync_s`` (the replicas' pipelines,
    with stragglers, :func:`replica_pipeline_times`; a stage's sync,
    :func:`~heteroplan.planner.model.sync.stage_sync_s`), memory per GPU and its fit, and $."""
    S, D = plan.pp, plan.dp
    fb, fwd_share, upd = compute
    ar_s, ring_bytes_sent, ring_usd = ring
    cv = max(c.straggler_cv for row in cfg for c in row)
    t_pipe, t_pipe_sd = replica_pipeline_times(fb, fwd_share, sends.comm, sends.buffered, micro, cv)
    update_s = upd.max(axis=1)
    sync_s = sync.stage_sync_s(ar_s, update_s)
    pipe_time = float(clark_max(t_pipe, t_pipe_sd)[0])  # the slowest replica (expected, with stragglers)
    t_iter = pipe_time + float(sync_s.max())

    capacity = np.array([[gpu_types[r.gpu_type].memory_gb for r in row] for row in reps], dtype=float).reshape(S, D)
    stage_memory = _stage_memory(profile, plan, reps, cfg, micro, shares, capacity)
    mem_rep = stage_memory.total  # GB per GPU of each (stage, pipeline replica)
    fit = memory_fit(mem_rep, capacity, [[r.gpu_type for r in row] for row in reps])
    price_per_s = rental_usd_per_s(sum(n * gpu_types[t].price_per_hour for (t, _), n in plan.gpus_by_type_zone().items()))
    rental = price_per_s * t_iter
    cost = rental + (sends.egress_usd + ring_usd)
    return PlanEstimate(
        t_iter,
        tuple(float(m) for m in mem_rep.max(axis=1)),
        cost,
        (sends.egress_bytes + ring_bytes_sent) / 1e9,
        pipe_time,
        float(sync_s.max()),
        StageTimes(fb, sends.comm, ar_s, upd, t_pipe, sync_s, fwd_share, sends.buffered),
        stage_memory,
        uncalibrated,
        fit,
        _critical_path(fb, sends.comm, micro, t_pipe, pipe_time, ar_s, update_s),
        CostTerms(rental, sends.egress_usd, ring_usd),
        _utilization(profile, plan, gpu_types, t_iter),
    )


def _utilization(profile: ModelProfile, plan: Plan, gpu_types: dict[str, GPUType], seconds: float) -> Utilization | None:
    """The plan's predicted model FLOPs and MFU (``None`` without FLOP counts in the profile)."""
    if profile.forward_flops is None:
        return None
    peak, note = plan_peak_tflops(((gpu_types[t], n) for (t, _), n in plan.gpus_by_type_zone().items()), plan.precision)
    return utilization(sum(profile.forward_flops), plan.global_batch_size, seconds, peak, note,
                       recomputed_flops_per_sample(profile.forward_flops, plan))


def _critical_path(fb: np.ndarray, comm: np.ndarray, micro: np.ndarray, t_pipe: np.ndarray, pipe_time: float,
                   allreduce: np.ndarray, update: np.ndarray) -> TimeTerms:
    """The iteration's seconds by term along its critical path: the slowest pipeline replica's
    1F1B closed form split into compute and transfers (its bottleneck stage's share of the steady
    state plus the fill and drain), the replay's correction where sends are buffered, the straggler
    term, then the slowest stage's all-reduce and update."""
    d = int(np.argmax(t_pipe))
    sigma = pipeline_step_s(fb, comm[:-1], comm[1:])
    closed = one_f_one_b_s(micro, sigma.max(axis=0), fb.sum(axis=0) + 2 * comm.sum(axis=0))  # as replica_pipeline_times
    s = int(np.argmax(sigma[:, d]))
    compute = float((micro[d] - 1) * fb[s, d] + fb[:, d].sum())
    k = int(np.argmax(allreduce + update))
    return TimeTerms(compute, float(closed[d]) - compute, float(t_pipe[d] - closed[d]), pipe_time - float(t_pipe[d]),
                     float(allreduce[k]), float(update[k]))

