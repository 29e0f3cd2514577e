"""A job's goodput model limited to the batch its workload requested, as the Sia artifact plans.

The Sia artifact's policy scores a job's configurations with a speed-up function built with the
job's *requested* total batch (its workload row's ``batch_size``) as the largest batch
(``Job.get_speedup_fn``: ``max_batch_size = target_batch_size``), while the job itself then
runs at the best batch up to its application's limit (``Job.update_local_bsz``). A yolov3 job
requesting 64 samples is planned as if 64 were its largest batch (its application allows 512),
so more than a few GPUs look useless to the policy. :class:`RequestedBatchModel` is that view of
a job's estimator.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from heteroplan.perf.goodput import GoodputModel

__all__ = ["RequestedBatchModel"]


class RequestedBatchModel:
    """``model``'s goodput with total batches of at most ``max_batch`` samples (clipped to the
    application's ``[init_batch_size, max_batch_size]``).

    Follows ``model``: its throughput parameters (rebuilt when its ``version`` changes) and its
    measured noise scale (at every call). Goodput in samples/s, as ``model``'s.
    """

    def __init__(self, model: GoodputModel, max_batch: int) -> None:
        self.model = model
        self.max_batch = self.clip(model, max_batch)
        self._capped: GoodputModel | None = None
        self._capped_version = -1

    @staticmethod
    def clip(model: GoodputModel, batch: int) -> int:
        """``batch`` (samples) within ``model``'s application's ``[init_batch_size, max_batch_size]``."""
        app = model.app
        return int(min(max(batch, app.init_batch_size), app.max_batch_size))

    @property
    def gpu_types(self) -> tuple[str, ...]:
        """GPU types the underlying model can evaluate."""
        return self.model.gpu_types

    @property
    def version(self) -> int:
        """The underlying model's :attr:`~heteroplan.perf.goodput.GoodputModel.version`."""
        return self.model.version

    def noise_scale(self, progress: float = 0.0) -> float:
        """The underlying model's noise scale (samples) at ``progress``."""
        return self.model.noise_scale(progress)

    def _current(self) -> GoodputModel:
        if self._capped is None or self._capped_version != self.model.version:
            app = dataclasses.replace(self.model.app, max_batch_size=self.max_batch)
            self._capped = GoodputModel(app, self.model.params, self.model.phi, batch_grid=self.model.batch_grid)
            self._capped_version = self.model.version
        self._capped.set_measured_phi(self.model.measured_phi)
        return self._capped

    def goodput(self, gpu_type: str | Any, num_nodes: Any, num_gpus: Any, progress: float = 0.0) -> np.ndarray:
        """Best goodput (samples/s) per configuration with total batch <= :attr:`max_batch`."""
        return self._current().goodput(gpu_type, num_nodes, num_gpus, progress)
