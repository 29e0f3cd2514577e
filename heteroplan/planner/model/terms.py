"""The machine model's cost terms, each written once (units: seconds, bytes, GB, $).

Every function works elementwise on numpy arrays (a stage's layer ranges, the splits the search
scores) as on scalars. :func:`~heteroplan.planner.model.simulator.simulate_plan` evaluates them on
one plan and the search (:mod:`heteroplan.planner.search`) on its tables of layer ranges; neither
has a copy of its own. Transfer times (pipeline send/receive, all-reduce) live in
:mod:`heteroplan.planner.model.comm`, the optimizer step in :meth:`SimConfig.update_s`, the
straggler term in :mod:`heteroplan.planner.model.straggler`, the 1F1B schedule in
:mod:`heteroplan.planner.model.pipeline_replay`.

Time
    - compute: ``compute_scale * (f + b) + microbatch_overhead_s`` seconds per microbatch and stage
      (:func:`compute_s`), ``f + b`` the profiled forward + backward of the stage's layers.
    - 1F1B pipeline with blocking sends: a stage's step ``f + b + 2 (c_in + c_out)``
      (:func:`pipeline_step_s`), ``T = (M - 1) max_s step_s + sum_s (f_s + b_s + 2 c_s)``
      (:func:`one_f_one_b_s`, :func:`pipeline_fill_s`), bounded below by
      :func:`balanced_step_lower_bound_s`.
Memory (GB per GPU)
    - weights, gradients, optimizer state: ``bytes_per_param * params`` shared as mixed-precision
      Adam holds them (ZeRO, Rajbhandari et al. 2020: 2 + 2 + 12 bytes of 16;
      :data:`PARAMETER_STATE_SHARES`), :func:`parameter_state_gb`;
    - activations kept for backward: ``act_bytes_per_float * act * mbs * inflight``,
      :func:`activations_gb`;
    - working buffers (backward's transient buffers, the last stage's logits copies):
      ``act_bytes_per_float * working * mbs``, :func:`working_gb`;
    - runtime overhead (CUDA context, NCCL buffers, allocator): ``overhead_gb``.
Memory from a profile that measured it (:class:`~heteroplan.perf.sailor_profiles.MeasuredMemory`,
bytes per GPU; :func:`measured_state_bytes`, :func:`measured_peak_bytes`)
    - weights and gradients in fp32 (``4 P`` each, also under bf16 autocast), optimizer state
      ``s P`` (Adam 8), of which a replica holds its share under ZeRO-1 (:func:`zero1_share`);
    - a microbatch in flight keeps ``m A + C`` per layer (saved per sample and per microbatch: bf16
      weight casts) or, recomputing, ``m I`` (the layer's input);
    - the backward of the last microbatch peaks at some layer ``l``: the kept bytes of the earlier
      microbatches, this one's up to ``l``, and ``l``'s transient: its output's gradient ``m O``,
      its measured working set ``m W + W_0`` and, recomputing, its re-materialised ``m A + C``;
    - the optimizer step peaks at the state plus its measured transient buffers (the share under
      ZeRO-1; none for the runtime's fused step, 4P for a foreach Adam), and
      data-parallel replicas of a tensor-parallel stage all-reduce a flat fp32 copy of the
      gradients (:func:`allreduce_buffer_bytes`; other stages all-reduce their gradient buffer in
      place); the peak is the largest of these and the backward's,
      plus the device's measured overhead.
Time of the new dimensions
    - recomputation: each layer's forward runs again in its backward, ``b + f``
      (:func:`recomputed_compute_s`);
    - ZeRO-1: each replica updates its share of the state, whole tensors largest first to the
      least loaded replica as torch's ZeroRedundancyOptimizer splits them (:func:`zero1_share`;
      ``1/d`` without recorded tensor sizes; :func:`sharded_update_s`), and the
      updated shards are all-gathered, ``(d-1)/d`` of the parameters' bytes per rank, timed as
      an all-reduce of half their bytes (:func:`allgather_as_allreduce_bytes`).
Money
    - rental: the GPUs' $/h / 3600 per second (:func:`rental_usd_per_s`);
    - egress: bytes that cross zones x $/GB: a pipeline boundary sends each microbatch's activation
      forward and its gradient back (:func:`pipeline_egress_bytes`); a ring all-reduce moves
      ``2 (D-1)/D x G`` bytes per rank over each ring edge, ``tp`` rings at once
      (:func:`allreduce_egress_bytes`).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np

from heteroplan.perf.sailor_profiles import MeasuredMemory, ModelProfile
from heteroplan.planner.model.comm import pipeline_bytes
from heteroplan.planner.model.sim_config import SimConfig

__all__ = [
    "PARAMETER_STATE_SHARES", "compute_s", "parameter_state_gb", "activations_gb", "working_gb", "static_memory_gb", "memory_gb",
    "activation_bytes", "pipeline_egress_bytes", "allreduce_egress_bytes", "rental_usd_per_s", "pipeline_step_s", "pipeline_fill_s",
    "one_f_one_b_s", "balanced_step_lower_bound_s", "measured_state_bytes", "measured_peak_bytes",
    "recomputed_compute_s", "compute_prefix_s", "sharded_update_s", "zero1_largest_share", "zero1_share", "zero1_share_matrix", "allgather_as_allreduce_bytes", "fp32_weight_bytes", "measured_layer_bytes",
    "allreduce_buffer_bytes",
]

Number = float | np.ndarray

# shares of ``bytes_per_param`` held as weights, gradients and optimizer state (fp16 weights and
# gradients, fp32 master weights + Adam's two moments: 2 + 2 + 12 of 16 bytes)
PARAMETER_STATE_SHARES = {"weights": 2 / 16, "gradients": 2 / 16, "optimizer_state": 12 / 16}


def compute_s(profiled_fb_s: Number, config: SimConfig) -> Number:
    """Seconds of one microbatch's forward + backward on a stage: the profiled ``f + b`` seconds
    scaled to the training loop's speed plus the framework's fixed time per microbatch, never
    below 0."""
    return np.maximum(config.compute_scale * profiled_fb_s + config.microbatch_overhead_s, 0.0)


def pipeline_step_s(compute: Number, send_in_s: Number, send_out_s: Number) -> Number:
    """Seconds of a stage's steady-state 1F1B step with blocking sends: its forward + backward and
    the activation and gradient transfers on both sides, ``f + b + 2 (c_in + c_out)``."""
    return compute + 2 * (send_in_s + send_out_s)


def pipeline_fill_s(compute: Number, send_out_s: Number) -> Number:
    """A stage's share of the pipeline's fill and drain: its forward + backward and the transfers
    to the next stage, ``f + b + 2 c_out`` (summed over the stages)."""
    return compute + 2 * send_out_s


def one_f_one_b_s(microbatches: Number, step_max_s: Number, fill_drain_s: Number) -> Number:
    """Seconds of a 1F1B pipeline replica (closed form): ``(M - 1)`` steps of its slowest stage,
    then the fill and drain."""
    return (microbatches - 1) * step_max_s + fill_drain_s


def balanced_step_lower_bound_s(stages: list[int], whole_model_s: list[float]) -> float:
    """Least possible slowest-stage seconds of a layout of blocks with ``stages[k]`` stages on
    hardware that runs the whole model in ``whole_model_s[k]``: a stage covers a fraction ``x`` of
    the model's compute, ``x F_k <= step``, the fractions add up to 1, so
    ``step >= 1 / sum_k (n_k / F_k)``."""
    return 1.0 / sum(n / max(f, 1e-12) for n, f in zip(stages, whole_model_s, strict=True))


def parameter_state_gb(params: Number, config: SimConfig) -> dict[str, Number]:
    """GB per GPU of weights, gradients and optimizer state of ``params`` parameters (per GPU)."""
    total = config.bytes_per_param * params / 1e9
    return {name: share * total for name, share in PARAMETER_STATE_SHARES.items()}


def activations_gb(act_floats: Number, mbs: int, inflight: Number, config: SimConfig) -> Number:
    """GB per GPU of the activations kept for backward: ``act_floats`` per sample of the stage's
    layers (per GPU), ``mbs`` samples per microbatch, ``inflight`` microbatches held under 1F1B."""
    return config.act_bytes_per_float * act_floats * mbs / 1e9 * inflight


def working_gb(working_floats: Number, mbs: int, config: SimConfig) -> Number:
    """GB per GPU of transient buffers of ``working_floats`` per sample (backward's working set
    and the last stage's logits copies), ``mbs`` samples per microbatch."""
    return config.act_bytes_per_float * working_floats * mbs / 1e9


def static_memory_gb(params: Number, working_floats: Number, mbs: int, config: SimConfig) -> Number:
    """GB per GPU that do not depend on the microbatches in flight: runtime overhead, weights,
    gradients, optimizer state and working buffers."""
    return config.overhead_gb + (config.bytes_per_param * params + config.act_bytes_per_float * working_floats * mbs) / 1e9


def memory_gb(params: Number, act_floats: Number, working_floats: Number, mbs: int, inflight: Number,
              config: SimConfig) -> Number:
    """Peak GB per GPU of a stage: the sum of the memory terms
    (:func:`static_memory_gb` + :func:`activations_gb`)."""
    return static_memory_gb(params, working_floats, mbs, config) + activations_gb(act_floats, mbs, inflight, config)


def activation_bytes(act_out_floats: Number, mbs: int, config: SimConfig) -> Number:
    """Bytes of one microbatch's activation that a stage ending at a layer with ``act_out_floats``
    output floats per sample (per GPU) hands to the next stage (and of its gradient coming back)."""
    return config.act_comm_bytes_per_float * act_out_floats * mbs


def pipeline_egress_bytes(activation_bytes: Number, tp: int, microbatches: Number, config: SimConfig) -> Number:
    """Bytes per iteration a pipeline boundary sends from a TP group to the next stage's:
    each of ``microbatches`` sends its activation of ``activation_bytes`` forward and its
    gradient back (:func:`~heteroplan.planner.model.comm.pipeline_bytes` leave the node each way)."""
    return 2 * pipeline_bytes(activation_bytes, tp, config) * microbatches


def allreduce_egress_bytes(replicas: int, grad_bytes: Number, tp: int, edges: Number = 1) -> Number:
    """Bytes per iteration a ring all-reduce over ``replicas`` sends over ``edges`` of its ring
    edges: each rank sends ``2 (D-1)/D`` of its ``grad_bytes`` per edge, and ``tp`` rings (one per
    TP rank) cross each edge at once."""
    return 2 * (replicas - 1) / replicas * grad_bytes * tp * edges


def rental_usd_per_s(usd_per_hour: Number) -> Number:
    """$ per second of GPUs whose rental prices add up to ``usd_per_hour`` ($/h)."""
    return usd_per_hour / 3600.0


def recomputed_compute_s(forward_s: Number, backward_s: Number) -> Number:
    """Seconds of forward + backward per microbatch when every layer is recomputed in its
    backward: ``f + (b + f)``."""
    return 2 * forward_s + backward_s


def compute_prefix_s(profile: ModelProfile, gpu: str, mbs: int, tp: int, recompute: bool) -> np.ndarray:
    """Prefix sums ``(3, L+1)`` of forward, backward and update seconds per microbatch of the
    profile's layers; recomputing, as the profiler timed them checkpointed where it did, else with
    each backward priced ``b + f`` (:func:`recomputed_compute_s`)."""
    if recompute and profile.has_recomputed(gpu, mbs, tp):
        return profile.compute_prefix(gpu, mbs, tp, recomputed=True)
    prefix = profile.compute_prefix(gpu, mbs, tp)
    if not recompute:
        return prefix
    f, b, u = prefix
    return np.stack([f, recomputed_compute_s(f, b) - f, u])


def sharded_update_s(update_s: Number, share: Number) -> Number:
    """Seconds of the optimizer step when the busiest replica updates ``share`` of the state
    (ZeRO-1: :func:`zero1_share`; ``1 / d`` for an even split)."""
    return update_s * share


def zero1_largest_share(numels: Sequence[int], replicas: int) -> float:
    """Fraction of a stage's parameters that the replica owning the most of them holds under
    ZeRO-1, as ``torch.distributed.optim.ZeroRedundancyOptimizer`` partitions them: each tensor
    (``numels``: elements of each) whole, largest first, to the replica owning the fewest
    elements so far. ``1 / replicas`` when they split evenly; more when a few large tensors do
    not (4 MLP matrices of 4M and 8 of 1M over 8 replicas: 4M of an average 3M)."""
    total = sum(numels)
    if replicas <= 1 or total <= 0:
        return 1.0
    loads = [(0, rank) for rank in range(replicas)]  # (elements, rank): the fewest, then the lowest rank
    for n in sorted(numels, reverse=True):
        load, rank = heapq.heappop(loads)
        heapq.heappush(loads, (load + n, rank))
    return max(load for load, _ in loads) / total


def _recorded_tensors(mem: MeasuredMemory | None, tp: int) -> Sequence[Sequence[int]] | None:
    """Per layer, the sizes (elements) of the parameter tensors the profile recorded at TP degree
    ``tp``; ``None`` for a profile without them (ZeRO-1 shares are then ``1 / replicas``)."""
    tensors = mem.param_tensors.get(tp) if mem is not None else None
    return tensors or None


def zero1_share(mem: MeasuredMemory | None, tp: int, first: int, last: int, replicas: int) -> float:
    """The busiest replica's share of the optimizer state (and of the step's buffers and time)
    of layers ``[first, last)`` sharded over ``replicas`` (ZeRO-1): from the parameter tensors the
    profile recorded per layer (:func:`zero1_largest_share`), else ``1 / replicas``."""
    if replicas <= 1:
        return 1.0
    tensors = _recorded_tensors(mem, tp)
    if tensors is None:
        return 1.0 / replicas
    return zero1_largest_share([n for layer in tensors[first:last] for n in layer], replicas)


def zero1_share_matrix(mem: MeasuredMemory | None, tp: int, replicas: int, num_layers: int) -> np.ndarray:
    """``(L+1, L+1)``: :func:`zero1_share` of every layer range ``[a, b)`` (1 elsewhere). Ranges
    with the same multiset of tensors (a transformer's blocks) are partitioned once."""
    out = np.ones((num_layers + 1, num_layers + 1))
    if replicas <= 1:
        return out
    tensors = _recorded_tensors(mem, tp)
    if tensors is None:
        out[np.triu_indices(num_layers + 1, 1)] = 1.0 / replicas
        return out
    seen: dict[tuple[int, ...], float] = {}
    for a in range(num_layers):
        numels: list[int] = []
        for b in range(a + 1, num_layers + 1):
            numels.extend(tensors[b - 1])
            key = tuple(sorted(numels))
            if key not in seen:
                seen[key] = zero1_largest_share(key, replicas)
            out[a, b] = seen[key]
    return out


def allgather_as_allreduce_bytes(param_bytes: Number) -> Number:
    """The ring all-reduce size that moves what a ring all-gather of ``param_bytes`` does (ZeRO-1's
    updated shards): the all-gather sends ``(d-1)/d`` of them per rank, an all-reduce
    ``2 (d-1)/d`` of its size, so half the bytes."""
    return param_bytes / 2


def fp32_weight_bytes(params: Number) -> Number:
    """Bytes of ``params`` fp32 weights (the master weights, also under bf16 autocast; what
    ZeRO-1 all-gathers after its update)."""
    return 4.0 * params


def measured_state_bytes(params: float, state_per_param: float, share: float = 1.0) -> tuple[float, float, float]:
    """Bytes per GPU of fp32 weights, fp32 gradients (as many bytes as the weights) and optimizer
    state (``state_per_param`` per parameter, of which a replica holds ``share`` under ZeRO-1,
    :func:`zero1_share`) of ``params`` parameters."""
    weights = fp32_weight_bytes(params)
    return weights, weights, state_per_param * params * share


def measured_peak_bytes(
    kept_per_layer: np.ndarray, transient_per_layer: np.ndarray, inflight: int, after_backward: float,
) -> tuple[float, float]:
    """``(activations, working)`` bytes per GPU at a stage's peak beyond its weights, gradients
    and state: the backward of its last microbatch in flight at its worst layer (``inflight - 1``
    earlier microbatches' ``kept_per_layer``, this one's up to that layer, and the layer's
    ``transient_per_layer``), or ``after_backward`` (the optimizer step's buffers, the all-reduce's
    flat copy of the gradients), whichever is larger."""
    upto = np.cumsum(kept_per_layer)
    worst = int(np.argmax(upto + transient_per_layer))
    activations = (inflight - 1) * float(upto[-1]) + float(upto[worst])
    working = float(transient_per_layer[worst])
    if after_backward > activations + working:
        return 0.0, after_backward
    return activations, working


def measured_layer_bytes(mem: MeasuredMemory, tp: int, mbs: int, recompute: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(kept, transient)`` bytes per layer ``(L,)`` of one microbatch of ``mbs`` samples: what a
    microbatch in flight keeps of each layer (``m A + C``, or recomputing ``m I`` and what the loss
    saves of the model's output), and what the layer's backward adds while it runs (its output's
    gradient ``m O``, none for the model's last layer whose loss is in its working set; its working
    set ``m W + W_0``; recomputing, its re-materialised ``m A + C``)."""
    saved = mbs * mem.act_saved[tp] + mem.act_saved_fixed[tp]
    out_grad = mbs * mem.act_output[tp]
    out_grad[-1] = 0.0
    transient = out_grad + mbs * mem.bwd_working[tp] + mem.bwd_working_fixed[tp]
    if recompute:
        return mbs * (mem.act_input[tp] + mem.loss_saved[tp]), transient + saved
    return saved, transient


def allreduce_buffer_bytes(params: float, replicas: int, tp: int) -> float:
    """Bytes of the flat fp32 copy of the gradients the runtime all-reduces over ``replicas``
    data-parallel replicas (one bucket, ``4 P``), alive after the backward: only in a
    tensor-parallel stage (DTensor gradients); elsewhere the gradients live in one flat buffer
    that is all-reduced in place (:func:`heteroplan.runtime.worker.flat_gradients`), and with one
    replica nothing is all-reduced: 0."""
    return 4.0 * params if replicas > 1 and tp > 1 else 0.0
