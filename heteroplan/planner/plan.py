"""Training plans: pipeline stages, data-parallel replicas, tensor parallelism.

A :class:`Plan` is what the Sailor planner returns and what the runtime executes.
Every stage has the same data-parallel degree ``dp``; pipeline replica ``d`` runs on
the ``d``-th replica of every stage (replica groups expanded in order). Replicas may
differ in GPU type and zone; ``microbatches_per_replica`` lets faster replicas take
more microbatches so all finish together (heterogeneous data parallelism).

Plan files (:meth:`Plan.to_json`) are format version 2: each stage's ``"layers": [first, last]``
includes both ends, as :meth:`Plan.describe` prints them. Version-1 files (no
``format_version``; ``first_layer`` and an exclusive ``last_layer``) still read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from enum import StrEnum
from pathlib import Path
from typing import Any

from heteroplan._html import table, title
from heteroplan.atomic_json import write_text_atomic
from heteroplan.errors import InputError
from heteroplan.inputs import enum_choice, read_json, strict_int
from heteroplan.schema import (
    MAX_ITEMS,
    Nullable,
    Number,
    Pair,
    Record,
    Seq,
    Text,
    Versioned,
    check,
    decode,
    naming_file,
    shown,
)

__all__ = ["ReplicaGroup", "Stage", "Plan", "PipelineBlock", "Precision", "Recomputation", "OptimizerSharding",
           "is_pipeline_set_data"]


class Precision(StrEnum):
    """Arithmetic of a plan's training step (a plan-wide choice: every stage computes alike).

    ``FP32``: float32 everywhere (matmuls in full fp32). ``TF32``: float32 tensors, matmuls and
    convolutions in TensorFloat-32 on GPUs that have it (``torch.backends.cuda.matmul.allow_tf32``;
    a no-op on CPU). ``BF16``: bfloat16 mixed precision with ``torch.autocast`` — weights, gradients
    and optimizer state stay float32 (the master copy), eligible ops (matmuls) compute in bfloat16.
    """

    FP32 = "fp32"
    TF32 = "tf32"
    BF16 = "bf16"


class Recomputation(StrEnum):
    """Activation recomputation of a stage: ``NONE`` keeps every activation the backward needs;
    ``FULL`` keeps only each layer's input and recomputes the layer's forward in the backward
    (``torch.utils.checkpoint``, one checkpointed region per plan layer)."""

    NONE = "none"
    FULL = "full"


class OptimizerSharding(StrEnum):
    """Optimizer state of a stage across its data-parallel replicas: ``NONE`` (every replica holds
    all of it) or ``ZERO1`` (each replica holds and updates the state of its share of the parameters,
    ``torch.distributed.optim.ZeroRedundancyOptimizer``; parameters are broadcast after the update)."""

    NONE = "none"
    ZERO1 = "zero1"


@dataclass(frozen=True)
class PipelineBlock:
    """Consecutive pipeline stages of one replica on one pool: ``stages`` stages of ``tp`` GPUs
    each, all of ``pool = (gpu_type, zone)``. The unit the planner's search lays out and evaluates."""

    pool: tuple[str, str]
    tp: int
    stages: int


_FORMAT_KEYS = {"format", "format_version"}  # reserved for a plan-file format version


def _known_keys(where: str, data: Mapping[str, Any], known: set[str]) -> None:
    """A typo'd key (``microbatches_per_replicas``) is an error naming it, not silently ignored."""
    unknown = sorted(set(data) - known)
    if unknown:
        raise InputError(f"{where}.{unknown[0]}", data[unknown[0]], f"unknown plan key; known: {sorted(known - _FORMAT_KEYS)}")


@dataclass(frozen=True)
class ReplicaGroup:
    """``count`` identical data-parallel replicas of a stage, each on ``tp`` GPUs of one type in one zone."""

    gpu_type: str
    zone: str
    tp: int = 1
    count: int = 1

    def __post_init__(self) -> None:
        for name in ("gpu_type", "zone"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise InputError(f"replica.{name}", getattr(self, name), "must be a non-empty string")
        object.__setattr__(self, "tp", strict_int("replica.tp", self.tp, 1))
        object.__setattr__(self, "count", strict_int("replica.count", self.count, 1))

    @property
    def num_gpus(self) -> int:
        """GPUs of the group: ``tp`` per replica times ``count`` replicas."""
        return self.tp * self.count


@dataclass(frozen=True)
class Stage:
    """Layers ``[first_layer, last_layer)`` (``last_layer`` excluded, as in ``range``) run on the
    replica groups ``replicas``, with the stage's activation ``recompute`` policy and
    ``optimizer_sharding`` over its replicas (defaults: none); plan files (version 2) write the
    layers as ``layers: [first, last]``, both included, the way :meth:`Plan.describe` prints them."""

    first_layer: int
    last_layer: int
    replicas: tuple[ReplicaGroup, ...]
    recompute: Recomputation = Recomputation.NONE
    optimizer_sharding: OptimizerSharding = OptimizerSharding.NONE

    def __post_init__(self) -> None:
        object.__setattr__(self, "replicas", tuple(self.replicas))
        object.__setattr__(self, "recompute", enum_choice(Recomputation, "stage.recompute", self.recompute))
        object.__setattr__(self, "optimizer_sharding",
                           enum_choice(OptimizerSharding, "stage.optimizer_sharding", self.optimizer_sharding))
        object.__setattr__(self, "first_layer", strict_int("stage.first_layer", self.first_layer, 0))
        object.__setattr__(self, "last_layer", strict_int("stage.last_layer", self.last_layer, 1))
        if not all(isinstance(g, ReplicaGroup) for g in self.replicas):
            raise InputError("stage.replicas", self.replicas, "each entry must be a ReplicaGroup")
        if not (0 <= self.first_layer < self.last_layer):
            raise InputError("stage.layers", (self.first_layer, self.last_layer), "need 0 <= first < last")
        if not self.replicas:
            raise InputError("stage.replicas", self.replicas, "a stage needs at least one replica")

    @property
    def num_layers(self) -> int:
        """Layers the stage holds (``last_layer - first_layer``)."""
        return self.last_layer - self.first_layer

    @property
    def dp(self) -> int:
        """Data-parallel degree of the stage."""
        return sum(g.count for g in self.replicas)

    @property
    def num_gpus(self) -> int:
        """GPUs of the stage, all its replicas together."""
        return sum(g.num_gpus for g in self.replicas)

    def replica_list(self) -> list[ReplicaGroup]:
        """One entry per replica (groups expanded, ``count`` = 1)."""
        return [ReplicaGroup(g.gpu_type, g.zone, g.tp, 1) for g in self.replicas for _ in range(g.count)]


@dataclass(frozen=True)
class Plan:
    """A training plan for one job.

    Attributes:
        model: model name (e.g. ``"OPT-350"``).
        global_batch_size: samples per iteration.
        microbatch_size: samples per microbatch.
        stages: pipeline stages covering the layers contiguously from 0.
        microbatches_per_replica: microbatches each pipeline replica runs per iteration;
            ``None`` means an even split of ``global_batch_size / microbatch_size``.
        precision: arithmetic of every stage (:class:`Precision`; default fp32).

    Files: :meth:`to_dict` writes ``precision``, a stage's ``recompute`` and
    ``optimizer_sharding`` only when they differ from the defaults, so plans without them read and
    write as before (and Sailor's ``plan_config`` files, which have none, load with the defaults).
    """

    model: str
    global_batch_size: int
    microbatch_size: int
    stages: tuple[Stage, ...]
    microbatches_per_replica: tuple[int, ...] | None = None
    precision: Precision = Precision.FP32

    def __post_init__(self) -> None:
        object.__setattr__(self, "stages", tuple(self.stages))
        object.__setattr__(self, "precision", enum_choice(Precision, "plan.precision", self.precision))
        if not self.stages:
            raise InputError("plan.stages", self.stages, "a plan needs at least one stage")
        if not isinstance(self.model, str) or not self.model:
            raise InputError("plan.model", self.model, "must be a non-empty string")
        if not all(isinstance(st, Stage) for st in self.stages):
            raise InputError("plan.stages", self.stages, "each entry must be a Stage")
        for name in ("global_batch_size", "microbatch_size"):  # numpy's integers too, as a stage's layers
            object.__setattr__(self, name, strict_int(f"plan.{name}", getattr(self, name), 1))
        dps = {s.dp for s in self.stages}
        if len(dps) != 1:
            raise InputError("plan.stages.dp", sorted(dps), "all stages need the same data-parallel degree")
        for prev, nxt in zip(self.stages, self.stages[1:], strict=False):
            if prev.last_layer != nxt.first_layer:
                raise InputError("plan.stages.layers", (prev.last_layer, nxt.first_layer), "stages must be contiguous")
        if self.stages[0].first_layer != 0:
            raise InputError("plan.stages[0].first_layer", self.stages[0].first_layer, "must be 0")
        if self.microbatches_per_replica is not None:
            mb = tuple(strict_int("plan.microbatches_per_replica", m, 1) for m in self.microbatches_per_replica)
            object.__setattr__(self, "microbatches_per_replica", mb)
            if len(mb) != self.dp or min(mb) < 1:
                raise InputError("plan.microbatches_per_replica", mb, f"need {self.dp} entries >= 1")
            if sum(mb) * self.microbatch_size != self.global_batch_size:
                raise InputError(
                    "plan.microbatches_per_replica",
                    mb,
                    f"sum x microbatch_size must equal global_batch_size={self.global_batch_size}",
                )
        elif self.global_batch_size % (self.microbatch_size * self.dp):
            raise InputError(
                "plan.global_batch_size",
                self.global_batch_size,
                f"not divisible by microbatch_size x dp = {self.microbatch_size * self.dp}",
            )

    @property
    def pp(self) -> int:
        """Pipeline-parallel degree (number of stages)."""
        return len(self.stages)

    @property
    def dp(self) -> int:
        """Data-parallel degree."""
        return self.stages[0].dp

    @property
    def num_layers(self) -> int:
        """Layers of the model (the last stage's ``last_layer``)."""
        return self.stages[-1].last_layer

    @property
    def num_gpus(self) -> int:
        """GPUs of the plan, all stages together."""
        return sum(s.num_gpus for s in self.stages)

    def microbatches(self) -> tuple[int, ...]:
        """Microbatches per pipeline replica per iteration."""
        if self.microbatches_per_replica is not None:
            return self.microbatches_per_replica
        per = self.global_batch_size // (self.microbatch_size * self.dp)
        return (per,) * self.dp

    def gpus_by_type_zone(self) -> dict[tuple[str, str], int]:
        """GPUs used per (type, zone)."""
        out: dict[tuple[str, str], int] = {}
        for s in self.stages:
            for g in s.replicas:
                out[(g.gpu_type, g.zone)] = out.get((g.gpu_type, g.zone), 0) + g.num_gpus
        return out

    # -------------------------------------------------------------- serialize
    def to_dict(self) -> dict[str, Any]:
        """The plan-file form, format version 2: each stage's ``layers`` is ``[first, last]``,
        both included, as :meth:`describe` prints them ("layers 0-33"); the optional dimensions
        (precision, recompute, optimizer_sharding) appear only when they differ from the defaults."""
        data = asdict(self)
        if self.precision is Precision.FP32:
            del data["precision"]
        else:
            data["precision"] = self.precision.value
        for stage, entry in zip(self.stages, data["stages"], strict=True):
            for name, default in (("recompute", Recomputation.NONE), ("optimizer_sharding", OptimizerSharding.NONE)):
                value = getattr(stage, name)
                if value is default:
                    del entry[name]
                else:
                    entry[name] = value.value
        data["stages"] = [_stage_v2(st) for st in data["stages"]]
        return {"format_version": FORMAT_VERSION, **data}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Plan:
        """Build from :meth:`to_dict`'s form. Numbers are taken as written: ``8.9`` samples,
        ``4.5`` layers or ``tp: true`` are errors, not truncated (``8.0`` is read as 8).

        Version 2 (``"format_version": 2``) stages give ``"layers": [first, last]``, both
        included; files without ``format_version`` are version 1, whose stages give
        ``first_layer`` and an exclusive ``last_layer`` (read as before)."""
        if not isinstance(data, Mapping):
            raise InputError("plan", type(data).__name__, "must be a JSON object")
        data = decode_plan_file(data)
        _known_keys("plan", data, {f.name for f in fields(cls)} | _FORMAT_KEYS)
        v1 = _as_v1(data)
        for i, s in enumerate(v1.get("stages") or ()):
            if isinstance(s, Mapping):
                _known_keys(f"plan.stages[{i}]", s, {f.name for f in fields(Stage)})
        return cls._from_v1(v1)

    @classmethod
    def _from_v1(cls, data: Mapping[str, Any]) -> Plan:
        """Build from the version-1 form (stages with ``first_layer``, exclusive ``last_layer``)."""
        try:
            stages = tuple(
                Stage(s["first_layer"], s["last_layer"], tuple(ReplicaGroup(**g) for g in s["replicas"]),
                      s.get("recompute", Recomputation.NONE), s.get("optimizer_sharding", OptimizerSharding.NONE))
                for s in data["stages"]
            )
            mb = data.get("microbatches_per_replica")
            return cls(
                data["model"],
                strict_int("plan.global_batch_size", data["global_batch_size"], 1),
                strict_int("plan.microbatch_size", data["microbatch_size"], 1),
                stages,
                tuple(mb) if mb is not None else None,
                data.get("precision", Precision.FP32),
            )
        except (KeyError, TypeError) as exc:
            raise InputError("plan", dict(data), f"malformed plan: {exc!r}") from None

    def to_json(self, path: str | Path | None = None) -> str:
        """The plan as JSON text; with ``path``, also written there (missing directories created)."""
        text = json.dumps(self.to_dict(), indent=2)
        if path is not None:
            try:
                write_text_atomic(path, text)
            except InputError as exc:
                raise InputError("path", str(path), f"cannot write the plan: {exc.reason}") from None
        return text

    @classmethod
    def from_json(cls, path: str | Path, what: str = "", model: str = "OPT-350") -> Plan:
        """Read a plan written by :meth:`to_json`, what ``heteroplan plan --json`` prints (the plan
        under ``"plan"``), or a Sailor ``plan_config_*.json`` file (its model named by the file's
        ``model`` key, else ``model``). Errors are :class:`InputError` naming the file, the
        field and the value; ``what`` (``"--plan"``) says where the file was given."""
        with naming_file(path, what):
            return cls.from_data(read_json(path, "plan JSON"), model)

    @classmethod
    def from_data(cls, data: object, model: str = "OPT-350") -> Plan:
        """A plan from a plan file's JSON data, in any format :meth:`from_json` reads."""
        if isinstance(data, Mapping) and isinstance(data.get("plan"), Mapping) and "stages" not in data:
            data = data["plan"]
        if isinstance(data, Mapping) and "pipeline_list" in data:
            return cls.from_sailor(data, model)
        if is_pipeline_set_data(data):  # not "unknown key"
            raise InputError("plan.pipelines", shown(data["pipelines"]), "a file of independent pipelines (a "
                             "PipelineSet), not one plan: run it with `heteroplan run --plan`, price it with "
                             "simulate_pipeline_set")
        return cls.from_dict(data)

    @classmethod
    def from_sailor(cls, data: Mapping[str, Any], model: str = "OPT-350") -> Plan:
        """Build a plan from Sailor's ``plan_config`` format.

        ``pipeline_list[0]`` holds ``layers_per_stage`` (layer indices per stage),
        ``tmp_per_stage`` (per stage, per replica ``[[[gpu_type, gpus, zone], ...], tp]``) and
        ``dp``; ``mbs`` and ``gbs`` are top-level. Only the first pipeline entry is read
        (Sailor writes one per distinct pipeline shape; the validation runs have one).
        """
        data = decode(SAILOR_PLAN_FILE, data, "plan")
        try:
            pipe = data["pipeline_list"][0]
            stages = []
            for layers, replicas in zip(pipe["layers_per_stage"], pipe["tmp_per_stage"], strict=True):
                groups: list[ReplicaGroup] = []
                for devices, tp in replicas:
                    gpu_type, _, zone = devices[0]
                    if groups and (groups[-1].gpu_type, groups[-1].zone, groups[-1].tp) == (gpu_type, zone, int(tp)):
                        last = groups.pop()
                        groups.append(ReplicaGroup(gpu_type, zone, int(tp), last.count + 1))
                    else:
                        groups.append(ReplicaGroup(gpu_type, zone, int(tp), 1))
                stages.append(Stage(int(min(layers)), int(max(layers)) + 1, tuple(groups)))
            plan = cls(str(data.get("model", model)), int(data["gbs"]), int(data["mbs"]), tuple(stages))
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            if isinstance(exc, InputError):
                raise
            raise InputError("plan", "sailor plan_config", f"malformed Sailor plan: {exc!r}") from None
        _check_plan_size(plan.num_gpus, plan.dp)
        return plan

    def describe(self) -> str:
        """Multi-line human-readable summary."""
        lines = [
            f"Plan for {self.model}: GBS {self.global_batch_size}, microbatch {self.microbatch_size}, "
            f"PP {self.pp} x DP {self.dp}, {self.num_gpus} GPUs" + _precision_note(self.precision)
        ]
        for i, s in enumerate(self.stages):
            groups = ", ".join(f"{g.count}x {g.gpu_type}@{g.zone} TP{g.tp}" for g in s.replicas)
            lines.append(f"  stage {i}: layers {s.first_layer}-{s.last_layer - 1}: {groups}" + _stage_note(s))
        return "\n".join(lines)

    def html_table(self, memory_per_stage: tuple[float, ...] | None = None) -> str:
        """HTML table, one row per (stage, replica group); optional peak GB/GPU column per stage."""
        headers = ["stage", "layers", "replicas", "GPU type", "zone", "TP", "GPUs"]
        if memory_per_stage is not None:
            headers.append("memory (GB/GPU)")
        rows = []
        for i, s in enumerate(self.stages):
            for g in s.replicas:
                row: list[object] = [i, f"{s.first_layer}-{s.last_layer - 1}", g.count, g.gpu_type, g.zone, g.tp,
                                     g.num_gpus]
                if memory_per_stage is not None:
                    row.append(f"{memory_per_stage[i]:.3g}")
                rows.append(row)
        return table(headers, rows)

    def html_title(self) -> str:
        """One-line HTML summary: model, batch sizes, PP x DP, GPUs, microbatches per replica."""
        detail = (
            f"GBS {self.global_batch_size}, microbatch {self.microbatch_size}, PP {self.pp} x DP {self.dp}, "
            f"{self.num_gpus} GPUs; microbatches per replica: {_runs(self.microbatches())}"
        )
        return title(f"Plan for {self.model}", detail)

    def _repr_html_(self) -> str:
        return self.html_title() + self.html_table()


# Plan files: version 2 writes each stage's layers as an inclusive [first, last] pair; version 1
# (no "format_version" key) wrote first_layer and an exclusive last_layer.
FORMAT_VERSION = 2

MAX_PLAN_GPUS = 100_000
"""Most GPUs a plan file may use (the largest training runs; ``"count": 1e9`` is a typo that would
otherwise expand into a billion replicas)."""
MAX_TP = 1024  # GPUs of one tensor-parallel group
MAX_LAYERS = 100_000  # layers of a model
MAX_BATCH = 100_000_000  # samples of one iteration

_MISSING = "malformed plan: this key is missing"
_LAYER = Number(low=0, high=MAX_LAYERS, integer=True)
_REPLICA = Record({"gpu_type": Text(), "zone": Text()},
                  {"tp": Number(low=1, high=MAX_TP, integer=True, unit="GPUs"),
                   "count": Number(low=1, high=MAX_PLAN_GPUS, integer=True, unit="replicas")}, missing=_MISSING)
_REPLICAS = {"replicas": Seq(_REPLICA, 1, MAX_PLAN_GPUS)}
_STAGE_OPTIONS = {"recompute": Text(choices=tuple(m.value for m in Recomputation)),
                  "optimizer_sharding": Text(choices=tuple(m.value for m in OptimizerSharding))}
_PLAN_FIELDS = {"model": Text(), "global_batch_size": Number(low=1, high=MAX_BATCH, integer=True, unit="samples"),
                "microbatch_size": Number(low=1, high=MAX_BATCH, integer=True, unit="samples")}
_PLAN_OPTIONS = {"microbatches_per_replica": Nullable(Seq(Number(low=1, high=MAX_BATCH, integer=True), 1,
                                                          MAX_PLAN_GPUS)),
                 "precision": Text(choices=tuple(m.value for m in Precision))}
_STAGE_V1 = Record({"first_layer": _LAYER, "last_layer": _LAYER, **_REPLICAS}, _STAGE_OPTIONS, missing=_MISSING)
_STAGE_V2 = Record({"layers": Pair((_LAYER, _LAYER)), **_REPLICAS}, _STAGE_OPTIONS, missing=_MISSING)
PLAN_FILE = Versioned({
    1: Record({**_PLAN_FIELDS, "stages": Seq(_STAGE_V1, 1, MAX_LAYERS)}, _PLAN_OPTIONS, missing=_MISSING),
    2: Record({**_PLAN_FIELDS, "stages": Seq(_STAGE_V2, 1, MAX_LAYERS)}, _PLAN_OPTIONS, missing=_MISSING),
})
"""The plan file (:meth:`Plan.to_dict`), versions 1 and 2: every field's type and bound."""

_SAILOR_DEVICE = Pair((Text(), Number(low=1, high=MAX_TP, integer=True), Text()))
SAILOR_PLAN_FILE = Record({
    "pipeline_list": Seq(Record({
        "layers_per_stage": Seq(Seq(_LAYER, 1, MAX_LAYERS), 1, MAX_LAYERS),
        "tmp_per_stage": Seq(Seq(Pair((Seq(_SAILOR_DEVICE, 1, MAX_TP), Number(low=1, high=MAX_TP, integer=True))),
                                 1, MAX_PLAN_GPUS), 1, MAX_LAYERS),
    }, extra=True), 1, MAX_ITEMS),
    "gbs": Number(low=1, high=MAX_BATCH, integer=True, unit="samples"),
    "mbs": Number(low=1, high=MAX_BATCH, integer=True, unit="samples"),
}, {"model": Text()}, extra=True)
"""Sailor's ``plan_config`` file: the keys :meth:`Plan.from_sailor` reads (others pass unread)."""


def is_pipeline_set_data(data: object) -> bool:
    """Whether a run file's JSON data is a set of independent pipelines
    (:meth:`~heteroplan.planner.pipeline_set.PipelineSet.to_dict`: ``"pipelines"``, no ``"stages"``)."""
    return isinstance(data, Mapping) and "pipelines" in data and "stages" not in data


def decode_plan_file(data: object) -> dict[str, Any]:
    """A plan file's object checked by :data:`PLAN_FILE` (types, bounds; at most
    :data:`MAX_PLAN_GPUS` GPUs in all), as the same plain data."""
    out = decode(PLAN_FILE, data, "plan")
    gpus = sum(g.get("tp", 1) * g.get("count", 1) for st in out["stages"] for g in st["replicas"])
    replicas = max(sum(g.get("count", 1) for g in st["replicas"]) for st in out["stages"])
    _check_plan_size(gpus, replicas)
    return out


def _check_plan_size(gpus: int, replicas: int) -> None:
    check(gpus <= MAX_PLAN_GPUS, "plan.stages.replicas", f"{gpus:,} GPUs",
          f"a plan file may use at most {MAX_PLAN_GPUS:,} GPUs (check the counts)")
    check(replicas <= MAX_PLAN_GPUS, "plan.stages.replicas", f"{replicas:,} replicas",
          f"a plan file may have at most {MAX_PLAN_GPUS:,} data-parallel replicas")


def _stage_v2(stage: dict[str, Any]) -> dict[str, Any]:
    """A stage dict of ``asdict`` (``first_layer``, exclusive ``last_layer``) in the version-2 form."""
    rest = {k: v for k, v in stage.items() if k not in ("first_layer", "last_layer")}
    return {"layers": [stage["first_layer"], stage["last_layer"] - 1], **rest}


def _as_v1(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """A plan file's dict in the version-1 form the reader builds from (version 1 as it is)."""
    version = data.get("format_version", 1)
    if isinstance(version, bool) or version not in (1, 2):
        raise InputError("plan.format_version", version, f"unknown plan-file version; this heteroplan reads 1 and "
                         f"{FORMAT_VERSION} (a newer heteroplan wrote it?)")
    rest = {k: v for k, v in data.items() if k != "format_version"}
    if version == 1:
        return rest
    stages = rest.get("stages")
    if not isinstance(stages, list):
        raise InputError("plan.stages", stages, "must be a list of stages")
    out = []
    for i, stage in enumerate(stages):
        if not isinstance(stage, Mapping):
            raise InputError(f"plan.stages[{i}]", stage, "must be an object")
        if "first_layer" in stage or "last_layer" in stage:
            raise InputError(f"plan.stages[{i}]", sorted(stage), "a version-2 plan gives layers: [first, last] "
                             "(both included), not first_layer/last_layer")
        layers = stage.get("layers")
        if not isinstance(layers, list | tuple) or len(layers) != 2:
            raise InputError(f"plan.stages[{i}].layers", layers, "must be [first, last], both included")
        first = strict_int(f"plan.stages[{i}].layers[0]", layers[0], 0)
        last = strict_int(f"plan.stages[{i}].layers[1]", layers[1], 0)
        if last < first:
            raise InputError(f"plan.stages[{i}].layers", list(layers), "need first <= last (both included)")
        out.append({"first_layer": first, "last_layer": last + 1, **{k: v for k, v in stage.items() if k != "layers"}})
    return {**rest, "stages": out}


def _precision_note(precision: Precision) -> str:
    """``", bf16"`` for a non-default precision, ``""`` for fp32."""
    return "" if precision is Precision.FP32 else f", {precision.value}"


def _stage_note(stage: Stage) -> str:
    """``"; recompute full, optimizer state zero1"`` for a stage's non-default dimensions, else ``""``."""
    notes = []
    if stage.recompute is not Recomputation.NONE:
        notes.append(f"recompute {stage.recompute.value}")
    if stage.optimizer_sharding is not OptimizerSharding.NONE:
        notes.append(f"optimizer state {stage.optimizer_sharding.value}")
    return "; " + ", ".join(notes) if notes else ""


def _runs(values: tuple[int, ...]) -> str:
    """Run-length text of a sequence: ``(8, 8, 8, 6) -> "8 (x3), 6"``."""
    parts: list[str] = []
    i = 0
    while i < len(values):
        j = i
        while j < len(values) and values[j] == values[i]:
            j += 1
        parts.append(f"{values[i]} (x{j - i})" if j - i > 1 else str(values[i]))
        i = j
    return ", ".join(parts)
