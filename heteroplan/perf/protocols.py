"""What a performance model can do beyond its goodput: one :class:`typing.Protocol` per optional
capability, declared once, checked with ``isinstance`` (no ``getattr``/``hasattr`` probing).

The base is :class:`GoodputRate` (every model a scheduling session takes has it); the one model
every policy reads is :class:`~heteroplan.policies.base.PerfModel` (a :class:`GoodputRate` that
also names its GPU types). The others are optional; the shipped models that have each:

- :class:`Versioned` (``version``, which changes when its goodputs do) and :class:`NoiseScaled`
  (``noise_scale(progress)``): GoodputModel, BootstrappedModel, RequestedBatchModel;
- :class:`ObservesSteps` (``observe``: one measured step) and :class:`RecordsObservations`
  (``observations(gpu_type)``): BootstrappedModel;
- :class:`TakesMeasuredNoise` (``set_measured_phi``), :class:`BatchThroughput` (``throughput``
  at a batch, ``max_local_bsz``), :class:`HasApplication` (``app``) and :class:`OptimizesBatch`
  (``optimize``: the best batch per configuration): GoodputModel (and so BootstrappedModel).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from heteroplan.perf.applications import AppSpec
from heteroplan.perf.measurements import Measurements

__all__ = ["GoodputRate", "Versioned", "NoiseScaled", "ObservesSteps", "RecordsObservations", "TakesMeasuredNoise",
           "BatchThroughput", "HasApplication", "OptimizesBatch"]


@runtime_checkable
class GoodputRate(Protocol):
    """A job's rate of useful work (work units per second) on ``num_gpus`` GPUs of ``gpu_type``
    over ``num_nodes`` nodes, at ``progress`` (fraction done); arguments broadcast."""

    def goodput(self, gpu_type: Any, num_nodes: Any, num_gpus: Any, progress: float = 0.0) -> Any: ...


@runtime_checkable
class Versioned(Protocol):
    """A model whose goodputs change only when ``version`` (an int) does: callers may reuse what
    they computed from it while it stays the same."""

    @property
    def version(self) -> int: ...


@runtime_checkable
class NoiseScaled(Protocol):
    """A model whose goodputs depend on the gradient noise scale at ``progress`` (samples)."""

    def noise_scale(self, progress: float = 0.0) -> float: ...


@runtime_checkable
class ObservesSteps(Protocol):
    """A model refit from measured steps (placement as digits or per-node GPU counts; seconds)."""

    def observe(self, gpu_type: str, placement: str | Sequence[int], local_bsz: float, step_time: float,
                sync_time: float) -> None: ...


@runtime_checkable
class RecordsObservations(Protocol):
    """A model that keeps the steps it observed, per GPU type."""

    def observations(self, gpu_type: str) -> Measurements: ...


@runtime_checkable
class TakesMeasuredNoise(Protocol):
    """A model that takes a measured gradient noise scale (samples; None forgets it)."""

    def set_measured_phi(self, phi: float | None) -> None: ...


@runtime_checkable
class BatchThroughput(Protocol):
    """A model with a per-batch throughput: samples/s at ``local_bsz`` per GPU and
    ``accum_steps`` accumulation steps, and the largest local batch (samples) per GPU type."""

    def throughput(self, gpu_type: str, num_nodes: Any, num_gpus: Any, local_bsz: Any,
                   accum_steps: Any = 0) -> Any: ...

    def max_local_bsz(self, gpu_type: str) -> int: ...


@runtime_checkable
class HasApplication(Protocol):
    """A model of one application (its batch limits: :class:`~heteroplan.perf.applications.AppSpec`)."""

    app: AppSpec


@runtime_checkable
class OptimizesBatch(Protocol):
    """A model that picks the best batch per configuration: ``(goodput, local_bsz, accum_steps)``."""

    def optimize(self, gpu_type: Any, num_nodes: Any, num_gpus: Any, progress: float = 0.0) -> tuple[Any, Any, Any]: ...
