"""Catalogue of the Sia/Pollux training applications.

Numbers come from the Sia artifact's traces (see ``docs/goodput.md``): the initial batch
size M0 is the smallest batch size with a validation run, the maximum batch size the
largest; epochs are the validation runs' rows (one per epoch); the dataset size is the final
statistical progress (in M0-sized steps) times M0 over the epochs; the per-GPU-type maximum
local batch is the largest local batch measured on that type (the memory limit of the trace).
Checkpoint-restore delays are the Sia paper's (ncf has none published; 10 s is assumed).

GPU type names are Sia's cluster names: ``aws`` (T4, 4/node), ``rtx`` (RTX, 8/node) and
``dgx-ext`` (A100, 8/node).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from heteroplan.errors import InputError

__all__ = ["AppSpec", "APPLICATIONS", "SIA_TYPE_NAMES", "SIA_SLOWDOWNS", "get_app"]

SIA_TYPE_NAMES: tuple[str, ...] = ("aws", "rtx", "dgx-ext")

# Sia artifact, sia-simulator/simulator_config.py (SLOWDOWNS): real-world / simulated step time
# (used by heteroplan.sim.fidelity and by the artifact-faithful Gavel's throughputs).
SIA_SLOWDOWNS: Mapping[str, float] = MappingProxyType({
    "cifar10": 1.8, "imagenet": 1.2, "yolov3": 1.2, "bert": 1.2, "deepspeech2": 1.2, "ncf": 1.5,
})


@dataclass(frozen=True)
class AppSpec:
    """One training application.

    Attributes:
        name: application name (``cifar10``, ``imagenet``, ...).
        max_batch_size: largest total batch size (samples) the job may use.
        init_batch_size: M0, the batch size the user submitted; efficiency is 1 there.
        epochs: passes over the dataset until the job finishes.
        dataset_size: samples in one epoch.
        restart_delay: checkpoint-restore delay paid on every re-allocation (s).
        max_local_bsz: per GPU type, the largest batch one GPU holds (samples).
    """

    name: str
    max_batch_size: int
    init_batch_size: int
    epochs: int
    dataset_size: int
    restart_delay: float
    max_local_bsz: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for attr in ("max_batch_size", "init_batch_size", "epochs", "dataset_size"):
            value = getattr(self, attr)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"app[{self.name}].{attr}", value, "must be an integer >= 1")
        if self.init_batch_size > self.max_batch_size:
            raise InputError(
                f"app[{self.name}].init_batch_size",
                self.init_batch_size,
                f"must be <= max_batch_size={self.max_batch_size}",
            )
        if not self.restart_delay >= 0:
            raise InputError(f"app[{self.name}].restart_delay", self.restart_delay, "must be >= 0")
        for gpu_type, bsz in self.max_local_bsz.items():
            if isinstance(bsz, bool) or not isinstance(bsz, int) or bsz < 1:
                raise InputError(f"app[{self.name}].max_local_bsz[{gpu_type}]", bsz, "must be >= 1")
        object.__setattr__(self, "max_local_bsz", MappingProxyType(dict(self.max_local_bsz)))

    @property
    def total_work(self) -> float:
        """Samples to process at M0-equivalent statistical efficiency (epochs x dataset)."""
        return float(self.epochs * self.dataset_size)

    @property
    def total_steps(self) -> float:
        """Total work in M0-sized steps (the unit of the traces' ``progress`` column)."""
        return self.total_work / self.init_batch_size


def _app(name: str, max_bsz: int, m0: int, epochs: int, dataset: int, delay: float,
         local: tuple[int, int, int]) -> AppSpec:
    return AppSpec(name, max_bsz, m0, epochs, dataset, delay, dict(zip(SIA_TYPE_NAMES, local, strict=True)))


APPLICATIONS: Mapping[str, AppSpec] = MappingProxyType({
    # name            max bsz  M0  epochs dataset  delay  max local (aws, rtx, dgx-ext)
    "bert": _app("bert", 384, 12, 2, 88_644, 120.0, (12, 12, 48)),
    "cifar10": _app("cifar10", 4096, 128, 100, 50_000, 50.0, (1024, 1024, 4096)),
    "deepspeech2": _app("deepspeech2", 640, 20, 80, 7_134, 25.0, (80, 80, 320)),
    "imagenet": _app("imagenet", 12800, 200, 90, 1_281_167, 250.0, (200, 200, 800)),
    "ncf": _app("ncf", 32768, 256, 10, 4_970_854, 10.0, (32768, 32768, 32768)),
    "yolov3": _app("yolov3", 512, 8, 50, 16_551, 80.0, (16, 8, 32)),
})


def get_app(name: str) -> AppSpec:
    """The catalogue entry for ``name``; :class:`InputError` for an unknown application."""
    try:
        return APPLICATIONS[name]
    except (KeyError, TypeError):
        raise InputError(
            "application", name, f"unknown; known: {', '.join(sorted(APPLICATIONS))}"
        ) from None
