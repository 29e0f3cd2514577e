"""Model FLOPs per iteration, achieved TFLOP/s and MFU: the one formula the planner's estimates
and the runtime's results both report.

Model FLOPs of an iteration are ``3 x forward FLOPs per sample x samples`` (the backward costs
twice the forward: the gradients of the activations and of the weights), the forward FLOPs
counted by the profiler (``torch.utils.flop_counter``, matmuls and attention, 2 FLOPs a
multiply-add). Recomputation is not model FLOPs: an iteration that recomputes its forwards does
more arithmetic for the same model FLOPs, so its MFU is lower; its hardware FLOPs add the
recomputed forwards (HFU, reported beside MFU where they differ). MFU is the achieved model FLOP/s
over the summed dense peak of the plan's GPUs in the plan's precision
(:class:`heteroplan.cluster.GPUType`'s ``peak_tflops_*``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from heteroplan.cluster import GPUType
from heteroplan.errors import InputError
from heteroplan.planner.plan import Plan, Precision, Recomputation

__all__ = ["Utilization", "peak_tflops", "model_flops_per_iteration", "utilization", "plan_peak_tflops",
           "recomputed_flops_per_sample"]

BACKWARD_OVER_FORWARD = 2.0
"""FLOPs of a backward over those of its forward (input and weight gradients: one matmul each)."""


def model_flops_per_iteration(forward_flops_per_sample: float, samples: int) -> float:
    """Model FLOPs of one iteration: ``(1 + 2) x forward FLOPs per sample x samples``."""
    return (1.0 + BACKWARD_OVER_FORWARD) * float(forward_flops_per_sample) * samples


def peak_tflops(gpu: GPUType, precision: Precision) -> float:
    """Dense peak TFLOP/s of ``gpu`` in ``precision`` (0: unknown, or the GPU has no such unit)."""
    if precision is Precision.BF16:
        return gpu.peak_tflops_bf16
    if precision is Precision.TF32:
        return gpu.peak_tflops_tf32
    return gpu.peak_tflops_fp32


def plan_peak_tflops(gpus: Iterable[tuple[GPUType, int]], precision: Precision) -> tuple[float, str]:
    """Summed dense peak TFLOP/s of ``(GPU type, count)`` pairs in ``precision``, and what it is
    (the types and their sources); ``(0, reason)`` when a type has no peak for ``precision``."""
    total, names = 0.0, []
    for gpu, count in gpus:
        peak = peak_tflops(gpu, precision)
        if peak <= 0:
            return 0.0, f"no {precision.value} peak for GPU type {gpu.name}"
        total += peak * count
        names.append(f"{count} x {gpu.name} {peak:g}")
    return total, f"{precision.value} dense peak: " + " + ".join(names)


@dataclass(frozen=True)
class Utilization:
    """Model FLOPs of an iteration against its time and the hardware's peak.

    Attributes:
        model_flops: model FLOPs per iteration (:func:`model_flops_per_iteration`).
        seconds: seconds per iteration.
        peak_tflops: summed dense peak of the GPUs in the plan's precision (TFLOP/s); 0: unknown.
        peak_note: what the peak is (GPU types, source), or why there is none.
        recomputed_flops: forward FLOPs recomputed in the backwards per iteration (recomputing
            stages' layers, every sample): hardware FLOPs beyond the model FLOPs.
    """

    model_flops: float
    seconds: float
    peak_tflops: float = 0.0
    peak_note: str = ""
    recomputed_flops: float = 0.0

    @property
    def hardware_flops(self) -> float:
        """FLOPs the hardware does per iteration: model FLOPs plus the recomputed forwards."""
        return self.model_flops + self.recomputed_flops

    @property
    def hfu(self) -> float | None:
        """Hardware FLOPs utilization (:attr:`hardware_flops` per second over the peak); ``None``
        without a peak."""
        return self.hardware_flops / self.seconds / 1e12 / self.peak_tflops if self.peak_tflops > 0 else None

    @property
    def achieved_tflops(self) -> float:
        """Model TFLOP/s achieved."""
        return self.model_flops / self.seconds / 1e12

    @property
    def mfu(self) -> float | None:
        """Model FLOPs utilization (fraction of :attr:`peak_tflops`); ``None`` without a peak."""
        return self.achieved_tflops / self.peak_tflops if self.peak_tflops > 0 else None

    def describe(self) -> str:
        """``"3.1e+13 model FLOPs in 0.128 s = 245.3 TFLOP/s, MFU: 24.8% (of ...)"``, or ``MFU: n/a (reason)``."""
        mfu, hfu = self.mfu, self.hfu
        recomputing = f", HFU {100 * hfu:.1f}% with the recomputed forwards" if hfu is not None and self.recomputed_flops else ""
        tail = f"MFU: {100 * mfu:.1f}%{recomputing} (of {self.peak_tflops:g} TFLOP/s, {self.peak_note})" \
            if mfu is not None else f"MFU: n/a ({self.peak_note})"
        return (f"{self.model_flops:.6g} model FLOPs in {self.seconds:.6g} s = {self.achieved_tflops:.6g} TFLOP/s, "
                f"{tail}")

    def to_dict(self) -> dict[str, float | str | None]:
        return {"model_flops_per_iteration": self.model_flops, "achieved_tflops": self.achieved_tflops,
                "peak_tflops": self.peak_tflops or None, "mfu": self.mfu, "peak_note": self.peak_note,
                "hardware_flops_per_iteration": self.hardware_flops, "hfu": self.hfu}


def utilization(forward_flops_per_sample: float, samples: int, seconds: float, peak: float = 0.0,
                peak_note: str = "", recomputed_flops_per_sample: float = 0.0) -> Utilization:
    """:class:`Utilization` of an iteration of ``samples`` samples taking ``seconds``
    (``recomputed_flops_per_sample``: forward FLOPs of the recomputing stages' layers)."""
    if not seconds > 0:
        raise InputError("seconds", seconds, "an iteration's time must be > 0")
    return Utilization(model_flops_per_iteration(forward_flops_per_sample, samples), float(seconds), float(peak),
                       peak_note, float(recomputed_flops_per_sample) * samples)


def recomputed_flops_per_sample(forward_flops: Sequence[float], plan: Plan) -> float:
    """Forward FLOPs per sample (``forward_flops`` per layer) of the layers of ``plan``'s
    recomputing stages, which their backwards run again."""
    return float(sum(sum(forward_flops[s.first_layer:s.last_layer]) for s in plan.stages
                     if s.recompute is Recomputation.FULL))
