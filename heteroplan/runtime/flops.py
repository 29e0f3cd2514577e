"""Counting a model's forward FLOPs with torch's FLOP counter, and the peak a run is measured against.

:func:`forward_flops` counts with :class:`torch.utils.flop_counter.FlopCounterMode` (matmuls,
convolutions, attention; 2 FLOPs per multiply-add), adding the formula torch lacks for the CPU's
fused attention kernel (``_scaled_dot_product_flash_attention_for_cpu``: counted like the CUDA
kernels, the full ``s x s`` score matrix, causal or not). :func:`task_forward_flops_per_sample`
counts a task's whole model on the ``meta`` device (no memory, no arithmetic: shapes only).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count

from heteroplan.cluster import SAILOR_GPU_TYPES, GPUType
from heteroplan.errors import InputError
from heteroplan.planner.model.flops import plan_peak_tflops
from heteroplan.planner.plan import Plan

log = logging.getLogger(__name__)

__all__ = ["forward_flops", "task_forward_flops_per_layer", "task_forward_flops_per_sample", "run_peak_tflops"]


def _cpu_flash_attention_flops(query_shape: Any, key_shape: Any, value_shape: Any, *args: Any, **kwargs: Any) -> int:
    return sdpa_flop_count(query_shape, key_shape, value_shape)


def _extra_formulas() -> dict[Any, Callable[..., int]]:
    op = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    return {op: _cpu_flash_attention_flops} if op is not None else {}  # keyed by overload packet, as torch's


def forward_flops(fn: Callable[[], Any]) -> int:
    """FLOPs of the operations ``fn()`` runs (call it with the forward you want counted)."""
    if not callable(fn):  # a module's output or a tensor was a TypeError from inside the counter
        raise InputError("fn", type(fn).__name__, "must be a callable running the forward to count (lambda: model(x))")
    with FlopCounterMode(display=False, custom_mapping=_extra_formulas()) as counter:
        fn()
    return int(counter.get_total_flops())


def task_forward_flops_per_layer(task: Any) -> tuple[float, ...] | None:
    """Forward FLOPs of one sample of ``task``'s model, per plan layer, counted on the ``meta``
    device (its model built there, iteration 0's first sample as input); ``None`` (logged) when
    the model cannot run on ``meta`` (a layer that reads its tensors' values)."""
    try:
        with torch.device("meta"):
            model = task.build_model()
        x = task.batch(0, 0, 1)[0].to("meta")
        counts = []
        with torch.no_grad():
            for layer in model:
                out = []
                counts.append(float(forward_flops(lambda layer=layer, x=x, out=out: out.append(layer(x)))))
                x = out[0]
        return tuple(counts)
    except Exception as exc:  # noqa: BLE001 - any model: no count is a report ("n/a"), not a failed run
        log.info("model FLOPs not counted (the model does not run on the meta device: %s)", exc)
        return None


def task_forward_flops_per_sample(task: Any) -> float | None:
    """The sum of :func:`task_forward_flops_per_layer` (``None`` where it is)."""
    per_layer = task_forward_flops_per_layer(task)
    return None if per_layer is None else float(sum(per_layer))


def _type_for(name: str, device_name: str) -> GPUType | None:
    for gpu in SAILOR_GPU_TYPES:
        if gpu.name == name or (device_name and gpu.model and gpu.model in device_name):
            return gpu
    return None


def run_peak_tflops(plan: Plan, device: str, declared_tflops: float | None, world: int) -> tuple[float, str]:
    """The summed peak TFLOP/s a run of ``plan`` is measured against, and what it is: ``world`` x
    ``declared_tflops`` when declared (``RunConfig.peak_tflops``); on CUDA each planned GPU type's
    peak in the plan's precision from the GPU type table (by name, else by the device's name,
    e.g. ``NVIDIA H100 80GB HBM3``); ``(0, reason)`` otherwise (``"no peak for device cpu"``)."""
    if declared_tflops is not None:
        return declared_tflops * world, f"declared {declared_tflops:g} TFLOP/s per process"
    if device != "cuda":
        return 0.0, f"no peak for device {device}; declare one with RunConfig.peak_tflops (--peak-tflops)"
    device_name = torch.cuda.get_device_name() if torch.cuda.is_available() else ""
    counts = plan.gpus_by_type_zone()
    pairs = []
    for (name, _), count in counts.items():
        gpu = _type_for(name, device_name)
        if gpu is None:
            return 0.0, f"no GPU type {name!r} ({device_name or 'no CUDA device'}) in the GPU type table"
        pairs.append((gpu, count))
    if not pairs:
        raise InputError("plan", plan.model, "has no GPUs")
    return plan_peak_tflops(pairs, plan.precision)
