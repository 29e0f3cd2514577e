"""Per-(GPU type, zone, TP, microbatch) tables of stage costs over all layer ranges.

For a model with ``L`` layers every quantity of a stage covering layers ``[a, b)`` is an
``(L+1, L+1)`` matrix indexed ``[a, b]`` (``inf`` where ``a >= b``), built once from prefix sums
and reused by every DP call of the search. The terms are :mod:`heteroplan.planner.model.terms`'s,
evaluated on every layer range at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from heteroplan.errors import InputError
from heteroplan.perf.sailor_network import NetworkModel
from heteroplan.perf.sailor_profiles import ModelProfile
from heteroplan.planner.model import terms
from heteroplan.planner.model.sim_config import SimConfig

__all__ = ["StageTable", "build_stage_table"]


@dataclass(frozen=True)
class StageTable:
    """Stage matrices for one (gpu_type, zone, tp, mbs).

    Attributes:
        fb: fwd+bwd seconds per microbatch (calibrated).
        forward_share: the forward's share of the profiled fwd+bwd (what the 1F1B replay splits ``fb`` by).
        update: optimizer-update seconds.
        grad_bytes: gradient bytes per GPU all-reduced.
        mem_static: GB per GPU not depending on in-flight microbatches.
        mem_per_inflight: GB per GPU per in-flight microbatch.
        out_bytes: ``(L+1,)`` bytes of one activation when a stage ends at layer ``b``
            (:func:`heteroplan.planner.model.comm.pipeline_bytes` says how many leave the node).
        mem_floor: GB per GPU at the optimizer step (a profile that measured memory; else 0): the
            stage's peak is the larger of this and the backward's.
        mem_sync_floor: GB per GPU during the gradients' all-reduce when the stage has several
            replicas (the flat copy of the gradients of a tensor-parallel stage; a profile that
            measured memory; else the state alone).
        mem_state: GB per GPU of optimizer state, included in every memory term above (what
            ZeRO-1 divides over the replicas; a profile that measured memory; else 0).
        mem_update_working: GB per GPU of the optimizer step's transient buffers, included in
            ``mem_floor`` (divided over the replicas under ZeRO-1 too; else 0).
        param_bytes: bytes per GPU of the fp32 weights (what ZeRO-1 all-gathers after its update).
    """

    gpu_type: str
    zone: str
    tp: int
    mbs: int
    fb: np.ndarray
    forward_share: np.ndarray
    update: np.ndarray
    grad_bytes: np.ndarray
    mem_static: np.ndarray
    mem_per_inflight: np.ndarray
    out_bytes: np.ndarray
    mem_floor: np.ndarray
    mem_sync_floor: np.ndarray
    mem_state: np.ndarray
    mem_update_working: np.ndarray
    param_bytes: np.ndarray

    def floor(self, replicas: int, share: float | np.ndarray = 1.0) -> np.ndarray:
        """GB per GPU after the backward (optimizer step; with ``replicas > 1`` also the all-reduce),
        the replica holding ``share`` of the optimizer state and the step's buffers (ZeRO-1: a
        number or an ``(L+1, L+1)`` matrix by layer range,
        :func:`~heteroplan.planner.model.terms.zero1_share_matrix`; 1: unsharded)."""
        step = self.mem_floor - self.mem_update_working * (1 - share)
        return step if replicas <= 1 else np.maximum(step, self.mem_sync_floor)

    def memory(self, inflight: int | np.ndarray, replicas: int = 1, share: float | np.ndarray = 1.0) -> np.ndarray:
        """GB per GPU of every layer range holding ``inflight`` microbatches, the stage having
        ``replicas`` data-parallel replicas, each holding ``share`` of its optimizer state
        (ZeRO-1, as :meth:`floor`; 1: unsharded)."""
        peak = np.maximum(self.mem_static + self.mem_per_inflight * inflight, self.floor(replicas, share))
        return peak - self.mem_state * (1 - share)


def _range(prefix: np.ndarray) -> np.ndarray:
    """``out[a, b] = prefix[b] - prefix[a]`` for a < b, ``inf`` elsewhere."""
    out = prefix[None, :] - prefix[:, None]
    n = prefix.shape[0]
    out[np.tril_indices(n)] = np.inf
    return out


def _range_max(values: np.ndarray) -> np.ndarray:
    """``out[a, b] = max(values[a:b])`` for a < b, 0 elsewhere."""
    n = values.shape[0]
    out = np.zeros((n + 1, n + 1))
    for a in range(n):
        out[a, a + 1 :] = np.maximum.accumulate(values[a:])
    return out


def build_stage_table(
    profile: ModelProfile, network: NetworkModel, gpu_type: str, zone: str, tp: int, mbs: int, config: SimConfig,
    memory_bandwidth_gbs: float = 0.0, recompute: bool = False,
) -> StageTable:
    """Build the matrices for one stage hardware choice (profile must exist); the GPU's memory
    bandwidth (GB/s, 0 if unknown) prices a memory-bound optimizer step (:meth:`SimConfig.update_s`);
    ``recompute``: every layer recomputed in its backward (a profile that measured memory)."""
    if recompute and profile.measured is None:
        raise InputError("recompute", profile.name, "recomputation needs a profile that measured memory")
    comp = terms.compute_prefix_s(profile, gpu_type, mbs, tp, recompute)
    sizes = profile.size_prefix(tp)
    L = profile.num_layers
    both = _range(comp[0] + comp[1])
    fb = terms.compute_s(both, config)
    with np.errstate(invalid="ignore", divide="ignore"):
        forward_share = np.where((both > 0) & np.isfinite(both), _range(comp[0]) / both, 0.5)
    params = _range(sizes[0])
    update = config.update_s(_range(comp[2]), params, memory_bandwidth_gbs)
    act = _range(sizes[1])
    working = config.working_layers * _range_max(profile.act_mem[tp])
    working[:, L] += config.logits_factor * profile.act_out[tp][L - 1]
    mem_static = terms.static_memory_gb(params, working, mbs, config)
    mem_per_inflight = terms.activations_gb(act, mbs, 1, config)
    mem_floor = mem_sync_floor = mem_state = mem_update_working = np.zeros_like(mem_static)
    if profile.measured is not None:
        mem_static, mem_per_inflight, mem_floor, mem_sync_floor, mem_state, mem_update_working = _measured_memory_gb(
            profile, tp, mbs, recompute, params)
    weights = terms.fp32_weight_bytes(params)  # what ZeRO-1 all-gathers
    out_bytes = np.zeros(L + 1)
    out_bytes[1:] = terms.activation_bytes(profile.act_out[tp], mbs, config)
    return StageTable(
        gpu_type, zone, tp, mbs, fb, forward_share, update, config.grad_bytes_per_param * params, mem_static, mem_per_inflight,
        out_bytes, mem_floor, mem_sync_floor, mem_state, mem_update_working, weights,
    )


def _measured_memory_gb(profile: ModelProfile, tp: int, mbs: int, recompute: bool,
                        params: np.ndarray) -> tuple[np.ndarray, ...]:
    """``(static, per in-flight microbatch, optimizer-step floor, all-reduce floor, optimizer
    state, optimizer-step buffers)`` GB of every layer range from the memory the profile measured:
    the peak of ``[a, b)`` holding ``k`` microbatches is ``max(static + k per, floor)``
    (:func:`~heteroplan.planner.model.terms.measured_peak_bytes` as ranges: the worst layer's
    ``max_l (cum_kept[l + 1] + transient_l) - cum_kept[a]``), unsharded; the last two are what
    ZeRO-1 divides (:meth:`StageTable.memory`)."""
    mem = profile.measured
    assert mem is not None
    kept, transient = terms.measured_layer_bytes(mem, tp, mbs, recompute)
    cum = np.concatenate([[0.0], np.cumsum(kept)])
    with np.errstate(invalid="ignore"):
        worst = _range_max(cum[1:] + transient) - cum[:, None]
        weights, grads, state = terms.measured_state_bytes(params, mem.optimizer_state_per_param)
        persist = weights + grads + state + mem.overhead
        per = _range(cum)
        static = persist + worst - per
        update_working = _range(np.concatenate([[0.0], np.cumsum(mem.update_working[tp])]))
        floor = persist + update_working
        sync_floor = persist + terms.allreduce_buffer_bytes(params, 2, tp)
    bad = ~np.isfinite(per)
    static[bad], floor[bad], sync_floor[bad], state[bad], update_working[bad] = np.inf, np.inf, np.inf, 0.0, 0.0
    return static / 1e9, per / 1e9, floor / 1e9, sync_floor / 1e9, state / 1e9, update_working / 1e9
