"""The Sia artifact's Pollux model of a job: one throughput profile merged across GPU types.

The artifact's heterogeneity-unaware Pollux keeps one profile per job, keyed by (nodes,
replicas, local batch), whatever GPU type each entry was measured on; an entry is never
replaced (the first observation of a shape wins), and one set of throughput parameters is
fitted to all entries. So a job measured on slow GPUs is planned with the slow step times on
fast GPUs, and the other way round. Before its first observation a job's speed-up is linear in
its GPUs (the artifact's ``lambda n, r: r``).

:class:`MergedProfile` rebuilds that profile from what the simulator feeds the job's own
estimator (:class:`~heteroplan.perf.bootstrap.BootstrappedModel` observations, per GPU type,
in the order they came); the estimator itself, and the simulator's progress, are untouched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from heteroplan.perf.fit import fit_throughput_params
from heteroplan.perf.goodput import GoodputModel
from heteroplan.perf.measurements import Measurements
from heteroplan.perf.throughput import ThroughputParams

__all__ = ["LinearSpeedup", "MergedProfile", "ProfileState"]


class LinearSpeedup:
    """A job's model before any observation: goodput proportional to its GPUs (1 per GPU)."""

    gpu_types: tuple[str, ...] = ()

    def goodput(self, gpu_type: Any, num_nodes: Any, num_gpus: Any, progress: float = 0.0) -> np.ndarray:
        shape = np.broadcast(np.asarray(gpu_type), np.asarray(num_nodes), np.asarray(num_gpus)).shape
        return np.broadcast_to(np.asarray(num_gpus, dtype=float), shape).copy()


@dataclass(frozen=True)
class ProfileState:
    """A :class:`MergedProfile` as plain data: ``baseline`` and ``read`` (observations per GPU
    type), the merged ``rows`` (nodes, GPUs, local batch, step time s, sync time s) and the
    throughput fit (``None``: none yet; kept because each refit starts from the previous one)."""

    baseline: Mapping[str, int]
    read: Mapping[str, int]
    rows: tuple[tuple[float, float, float, float, float], ...]
    params: ThroughputParams | None

    def to_json(self) -> dict[str, Any]:
        return {"baseline": dict(self.baseline), "read": dict(self.read), "rows": [list(r) for r in self.rows],
                "params": None if self.params is None else self.params.to_dict()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ProfileState:
        rows = tuple(tuple(float(x) for x in r) for r in data["rows"])
        if any(len(r) != 5 for r in rows):
            raise ValueError("a merged-profile row has 5 numbers (nodes, GPUs, local batch, step s, sync s)")
        params = data["params"]
        return cls({str(t): int(n) for t, n in data["baseline"].items()},
                   {str(t): int(n) for t, n in data["read"].items()},
                   rows, None if params is None else ThroughputParams.from_dict(params))  # type: ignore[arg-type]


@dataclass
class MergedProfile:
    """One job's merged profile (first observation of a (nodes, GPUs, local batch) shape wins).

    ``baseline``: per GPU type, how many observations the estimator held when the job was
    first seen (its bootstrap profiles, which the artifact's Pollux does not have); ``read``:
    how many of each type's observations have been merged so far.
    """

    baseline: dict[str, int]
    read: dict[str, int] = field(default_factory=dict)
    rows: list[tuple[float, float, float, float, float]] = field(default_factory=list)
    _keys: set[tuple[float, float, float]] = field(default_factory=set, repr=False)
    _params: ThroughputParams | None = field(default=None, repr=False)
    _model: GoodputModel | None = field(default=None, repr=False)

    @classmethod
    def start(cls, estimator: Any, gpu_types: Sequence[str]) -> MergedProfile:
        counts = {t: len(estimator.observations(t)) for t in gpu_types}
        return cls(baseline=counts, read=dict(counts))

    def snapshot(self) -> ProfileState:
        """This profile as plain data (a copy)."""
        return ProfileState(dict(self.baseline), dict(self.read), tuple(self.rows), self._params)

    @classmethod
    def restore(cls, state: ProfileState) -> MergedProfile:
        """The profile ``state`` was taken from (it merges and fits on as the original would)."""
        rows = list(state.rows)
        return cls(dict(state.baseline), dict(state.read), rows, {r[:3] for r in rows}, state.params)

    def update(self, estimator: Any, gpu_types: Sequence[str]) -> None:
        """Merge the estimator's observations made since the last update (in type order: a job
        runs on one type per round, so at most one type has new ones)."""
        added = False
        for t in gpu_types:
            meas: Measurements = estimator.observations(t)
            start = self.read.get(t, self.baseline.setdefault(t, 0))
            for i in range(start, len(meas)):
                key = (float(meas.num_nodes[i]), float(meas.num_gpus[i]), float(meas.local_bsz[i]))
                if key not in self._keys:
                    self._keys.add(key)
                    self.rows.append(key + (float(meas.step_time[i]), float(meas.sync_time[i])))
                    added = True
            self.read[t] = len(meas)
        if added:
            self._params = fit_throughput_params(Measurements(*np.array(self.rows).T), init=self._params)
            self._model = None

    def model(self, estimator: Any, gpu_types: Sequence[str]) -> GoodputModel | LinearSpeedup:
        """The job's model as the policy sees it: the merged fit on every type (the estimator's
        noise scale), or :class:`LinearSpeedup` before any observation."""
        if self._params is None:
            return LinearSpeedup()
        if self._model is None:
            self._model = GoodputModel(estimator.app, {t: self._params for t in gpu_types}, estimator.phi)
        self._model.set_measured_phi(estimator.measured_phi)
        return self._model
