"""Independent pipelines in one plan (FlashFlex / HexiScale style; issue 50).

A :class:`PipelineSet` trains one model with several pipelines, each a :class:`~heteroplan.planner.plan.Plan`
of its own: its depth, layer split, data-parallel replicas (groups of GPU type, zone and TP),
microbatch size and microbatches per replica, over its share of the global batch (the pipeline's
``global_batch_size``; the shares add up to the set's). After every pipeline has run its
microbatches, the gradients are synchronised by one all-reduce per *layer range*: the ranges
between consecutive stage boundaries of any pipeline (:meth:`PipelineSet.segments`), each a ring
over every replica of every pipeline that holds it (all of them: every pipeline holds every layer).

Files (:meth:`PipelineSet.to_json`): ``{"format_version": 2, "pipelines": [plan, ...]}``, each entry
a plan in :meth:`Plan.to_dict`'s form. The runtime trains a set (``heteroplan.runtime.run_plan``,
``heteroplan run --plan``; docs/runtime.md, "Independent pipelines").
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from heteroplan.atomic_json import write_json_atomic
from heteroplan.errors import InputError
from heteroplan.inputs import read_json
from heteroplan.planner.plan import FORMAT_VERSION, OptimizerSharding, Plan
from heteroplan.schema import MAX_ITEMS, Later, Record, Seq, Versioned, decode, naming_file

__all__ = ["PipelineSet", "PIPELINE_SET_FILE"]

PIPELINE_SET_FILE = Versioned({FORMAT_VERSION: Record({"pipelines": Seq(Later(), 1, MAX_ITEMS)})},
                              default=FORMAT_VERSION)
"""The set file (:meth:`PipelineSet.to_dict`): its version and a non-empty list of plans (each then
decoded by :data:`~heteroplan.planner.plan.PLAN_FILE`)."""


@dataclass(frozen=True)
class PipelineSet:
    """Independent pipelines of one model, synchronised by one gradient all-reduce per layer range.

    Attributes:
        pipelines: the pipelines (at least one), each a :class:`Plan` over its share of the global
            batch; all of one model and precision, none sharding its optimizer state (ZeRO-1 shards
            over one pipeline's replicas, which a set's all-reduce does not know).
    """

    pipelines: tuple[Plan, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.pipelines, Iterable):
            raise InputError("pipeline_set.pipelines", self.pipelines, "need a sequence of at least one Plan")
        object.__setattr__(self, "pipelines", tuple(self.pipelines))
        if not self.pipelines or not all(isinstance(p, Plan) for p in self.pipelines):
            raise InputError("pipeline_set.pipelines", self.pipelines, "need at least one Plan")
        first = self.pipelines[0]
        for i, p in enumerate(self.pipelines):
            for name in ("model", "precision", "num_layers"):
                if getattr(p, name) != getattr(first, name):
                    raise InputError(f"pipeline_set.pipelines[{i}].{name}", getattr(p, name),
                                     f"every pipeline needs the first one's {name} ({getattr(first, name)})")
            if any(s.optimizer_sharding is not OptimizerSharding.NONE for s in p.stages):
                raise InputError(f"pipeline_set.pipelines[{i}].optimizer_sharding", "zero1",
                                 "a pipeline of a set cannot shard its optimizer state")

    @property
    def model(self) -> str:
        """The model every pipeline trains."""
        return self.pipelines[0].model

    @property
    def num_layers(self) -> int:
        """Layers of the model (every pipeline holds all of them)."""
        return self.pipelines[0].num_layers

    @property
    def global_batch_size(self) -> int:
        """Samples per iteration: the pipelines' shares added up."""
        return sum(p.global_batch_size for p in self.pipelines)

    @property
    def num_gpus(self) -> int:
        """GPUs of the set, all pipelines together."""
        return sum(p.num_gpus for p in self.pipelines)

    @property
    def replicas(self) -> int:
        """Data-parallel replicas of every layer: every pipeline's replicas."""
        return sum(p.dp for p in self.pipelines)

    def segments(self) -> tuple[tuple[int, int], ...]:
        """The layer ranges ``[first, last)`` between consecutive stage boundaries of any pipeline:
        the all-reduces of an iteration, one per range."""
        cuts = sorted({s.first_layer for p in self.pipelines for s in p.stages} | {self.num_layers})
        return tuple(zip(cuts[:-1], cuts[1:], strict=True))

    def gpus_by_type_zone(self) -> dict[tuple[str, str], int]:
        """GPUs used per (type, zone), all pipelines together."""
        out: dict[tuple[str, str], int] = {}
        for p in self.pipelines:
            for key, n in p.gpus_by_type_zone().items():
                out[key] = out.get(key, 0) + n
        return out

    def describe(self) -> str:
        """Multi-line summary: one block per pipeline."""
        lines = [f"{len(self.pipelines)} independent pipelines of {self.model}: GBS {self.global_batch_size}, "
                 f"{self.num_gpus} GPUs, {len(self.segments())} all-reduce layer ranges"]
        for i, p in enumerate(self.pipelines):
            lines.append(f" pipeline {i} ({p.global_batch_size} samples): " + p.describe())
        return "\n".join(lines)

    # -------------------------------------------------------------- serialize
    def to_dict(self) -> dict[str, Any]:
        """``{"format_version": 2, "pipelines": [plan dict, ...]}``."""
        return {"format_version": FORMAT_VERSION, "pipelines": [p.to_dict() for p in self.pipelines]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PipelineSet:
        """Build from :meth:`to_dict`'s form (:data:`PIPELINE_SET_FILE`; each pipeline read by
        :meth:`Plan.from_dict`)."""
        pipelines = decode(PIPELINE_SET_FILE, data, "pipeline_set")["pipelines"]
        return cls(tuple(_pipeline(i, p) for i, p in enumerate(pipelines)))

    def to_json(self, path: str | Path | None = None) -> str:
        """The set as JSON text; with ``path``, also written there atomically (missing directories created)."""
        if path is not None:
            write_json_atomic(Path(path), self.to_dict())
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_json(cls, path: str | Path) -> PipelineSet:
        """Read a set written by :meth:`to_json`; errors name the file, the field and the value."""
        with naming_file(path):
            return cls.from_dict(read_json(path, "pipeline set JSON"))


def _pipeline(i: int, data: Any) -> Plan:
    """Pipeline ``i`` of a set file, its errors named ``pipeline_set.pipelines[i]...`` instead of
    ``plan...`` (which pipeline of the file is wrong)."""
    try:
        return Plan.from_dict(data)  # a non-mapping is refused by name
    except InputError as exc:
        field = str(exc.field)
        where = f"pipeline_set.pipelines[{i}]" + (field[len("plan"):] if field.startswith("plan") else f": {field}")
        raise InputError(where, exc.value, exc.reason) from None
