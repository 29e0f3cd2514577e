"""Where each rank of a plan sits: stage, pipeline replica, tensor-parallel index, layers, samples.

Ranks are numbered stage by stage, replica by replica, and within a replica by tensor-parallel
index: replica ``d`` of stage ``s`` starts at the GPUs of the stages before ``s`` plus the TP
degrees of the replicas before ``d`` (the ``tp`` ranks of one replica are neighbours, so they
share a node), and its TP index ``t`` is that start ``+ t``. With one degree ``tp_s`` per stage this
is ``start_s + d * tp_s + t``, and with ``tp = 1`` everywhere ``r = stage * dp + replica``. Replica
``d`` runs ``M_d`` microbatches of ``mbs`` samples and takes samples ``[mbs * sum(M_<d), mbs *
sum(M_<=d))`` of every global batch.

Replicas of one stage may differ in TP degree (a mixed stage): their gradients are then
synchronised by :mod:`heteroplan.runtime.segment_sync` (whole gradients, not shard by shard). At a
stage boundary each TP rank of the receiving replica takes the full activation from the sending
replica's TP rank ``t mod tp_sender`` (with equal degrees: its peer ``t``), and every TP rank of
the sending replica takes the gradient from the receiving replica's rank ``t mod tp_receiver``
(see :func:`neighbours`).

A run is a :class:`Plan` or a :class:`~heteroplan.planner.pipeline_set.PipelineSet`: its
pipelines (:func:`run_pipelines`) take consecutive blocks of ranks and of the global batch's
samples, in the set's order (:class:`PipelineSlot`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from heteroplan.errors import InputError
from heteroplan.inputs import read_json
from heteroplan.planner.pipeline_set import PipelineSet
from heteroplan.planner.plan import Plan, is_pipeline_set_data
from heteroplan.schema import naming_file

__all__ = ["RankInfo", "PipelineSlot", "rank_layout", "check_runnable", "replica_tp", "stage_tp", "uniform_stage_tp",
           "tp_degrees", "stage_start", "replica_start", "world_size", "neighbours", "run_pipelines", "run_world_size", "run_from_dict",
           "load_plan", "load_run"]


@dataclass(frozen=True)
class RankInfo:
    """One process of a run.

    Attributes:
        rank: global rank.
        stage: pipeline stage index.
        replica: pipeline (data-parallel) replica index.
        tp_index, tp: this rank's index in its replica's tensor-parallel group, and the group's size.
        first_layer, last_layer: layers ``[first, last)`` this rank holds.
        num_microbatches: microbatches this rank's replica runs per iteration.
        sample_offset: first sample of the global batch that this replica trains on.
        gpu_type, zone: where the plan puts it (informational on a single machine).
    """

    rank: int
    stage: int
    replica: int
    first_layer: int
    last_layer: int
    num_microbatches: int
    sample_offset: int
    gpu_type: str
    zone: str
    tp_index: int = 0
    tp: int = 1


def replica_tp(plan: Plan) -> list[list[int]]:
    """Tensor-parallel degree of every replica of every stage (``[stage][replica]``)."""
    return [[g.tp for g in stage.replica_list()] for stage in plan.stages]


def uniform_stage_tp(plan: Plan) -> list[int] | None:
    """Tensor-parallel degree of every stage, or ``None`` when the replicas of some stage differ."""
    degrees = [sorted({g.tp for g in stage.replicas}) for stage in plan.stages]
    return None if any(len(d) != 1 for d in degrees) else [d[0] for d in degrees]


def stage_tp(plan: Plan) -> list[int]:
    """Tensor-parallel degree of every stage (raises :class:`InputError` when replicas of a stage
    differ: what needs one degree per stage, torch's pipelining, asks through this)."""
    out = uniform_stage_tp(plan)
    if out is None:
        i, stage = next((i, st) for i, st in enumerate(plan.stages) if len({g.tp for g in st.replicas}) > 1)
        raise InputError(f"plan.stages[{i}].replicas.tp", sorted({g.tp for g in stage.replicas}),
                         "needs one tensor-parallel degree for all replicas of a stage")
    return out


def tp_degrees(run: Plan | PipelineSet) -> list[int]:
    """Every tensor-parallel degree a run's replicas use, ascending (a model's heads must be a multiple of each)."""
    plans = run.pipelines if isinstance(run, PipelineSet) else (run,)
    return sorted({g.tp for p in plans for stage in p.stages for g in stage.replicas})


def replica_start(plan: Plan) -> list[list[int]]:
    """First rank of every replica of every stage (``[stage][replica]``), ranks of ``plan`` from 0."""
    out, rank = [], 0
    for degrees in replica_tp(plan):
        starts = []
        for tp in degrees:
            starts.append(rank)
            rank += tp
        out.append(starts)
    return out


def stage_start(plan: Plan) -> list[int]:
    """First rank of every stage, plus the plan's world size at the end."""
    starts = [0]
    for degrees in replica_tp(plan):
        starts.append(starts[-1] + sum(degrees))
    return starts


def world_size(plan: Plan) -> int:
    """Processes the plan needs: one per planned GPU (``plan.num_gpus``)."""
    return stage_start(plan)[-1]


def check_runnable(plan: Plan, num_layers: int | None = None) -> None:
    """Raise :class:`InputError` when the runtime cannot execute ``plan`` as given."""
    if not isinstance(plan, Plan):
        raise InputError("plan", type(plan).__name__, "must be a heteroplan.planner.Plan")
    if num_layers is not None and plan.num_layers != num_layers:
        raise InputError("plan.stages", plan.num_layers, f"the model has {num_layers} layers; the plan must cover them")


def rank_layout(plan: Plan, rank_offset: int = 0, sample_offset: int = 0) -> list[RankInfo]:
    """One :class:`RankInfo` per rank, in rank order; ``rank_offset`` and ``sample_offset``: the
    plan's first global rank and first sample of the global batch (a pipeline of a set, :class:`PipelineSlot`)."""
    check_runnable(plan)
    micro = plan.microbatches()
    offsets = [sample_offset + sum(micro[:d]) * plan.microbatch_size for d in range(plan.dp)]
    starts = replica_start(plan)
    out = []
    for s, stage in enumerate(plan.stages):
        for d, rep in enumerate(stage.replica_list()):
            for t in range(rep.tp):
                out.append(RankInfo(
                    rank_offset + starts[s][d] + t, s, d, stage.first_layer, stage.last_layer, micro[d], offsets[d],
                    rep.gpu_type, rep.zone, t, rep.tp,
                ))
    return out


def neighbours(plan: Plan, me: RankInfo, direction: int, role: str, rank_offset: int = 0) -> list[int]:
    """Ranks of the neighbouring stage (``direction`` +1: next, -1: previous) this rank talks to
    (global ranks: the plan's start at ``rank_offset``).

    ``role="source"``: the one rank it receives from (TP index ``t mod tp_neighbour``);
    ``role="destination"``: the ranks it sends to (TP indices ``u`` with ``u mod tp_me == t``).
    Activations go from the previous stage's sources to its destinations, gradients back the same
    way, so every TP rank receives exactly one full tensor and the full tensor reaches every rank.
    """
    s = me.stage + direction
    if not 0 <= s < plan.pp:
        return []
    base = rank_offset + replica_start(plan)[s][me.replica]
    tp = replica_tp(plan)[s][me.replica]
    if role == "source":
        return [base + me.tp_index % tp]
    return [base + u for u in range(tp) if u % me.tp == me.tp_index]


@dataclass(frozen=True)
class PipelineSlot:
    """One pipeline of a run and where it sits in it.

    Attributes:
        plan: the pipeline.
        index: its position in the run (0 for a plain plan).
        rank_offset: its first global rank (ranks ``[rank_offset, rank_offset + world_size(plan))``).
        sample_offset: its first sample of the global batch (samples ``[offset, offset + plan's batch)``).
        batch_size: samples per iteration of the whole run (each microbatch's loss is scaled by
            ``mbs / batch_size``, so the summed gradients are the global batch's).
        world: ranks of the whole run.
    """

    plan: Plan
    index: int
    rank_offset: int
    sample_offset: int
    batch_size: int
    world: int

    @classmethod
    def alone(cls, plan: Plan) -> PipelineSlot:
        """A plan run on its own: ranks and samples from 0."""
        return cls(plan, 0, 0, 0, plan.global_batch_size, world_size(plan))

    def holds(self, rank: int) -> bool:
        """Whether global rank ``rank`` is one of this pipeline's."""
        return self.rank_offset <= rank < self.rank_offset + world_size(self.plan)


def run_pipelines(run: Plan | PipelineSet) -> tuple[PipelineSlot, ...]:
    """The pipelines of ``run`` in rank order: a plan is one, a set's follow each other in ranks and samples."""
    if isinstance(run, Plan):
        return (PipelineSlot.alone(run),)
    if not isinstance(run, PipelineSet):
        raise InputError("plan", type(run).__name__, "must be a heteroplan Plan or PipelineSet")
    world = sum(world_size(p) for p in run.pipelines)
    out, ranks, samples = [], 0, 0
    for i, p in enumerate(run.pipelines):
        out.append(PipelineSlot(p, i, ranks, samples, run.global_batch_size, world))
        ranks += world_size(p)
        samples += p.global_batch_size
    return tuple(out)


def run_world_size(run: Plan | PipelineSet) -> int:
    """Processes a run needs: one per planned GPU of every pipeline."""
    return run_pipelines(run)[0].world


def load_plan(path: str | Path) -> Plan:
    """Read a plan file: what ``heteroplan plan --out`` or :meth:`Plan.to_json` writes, what
    ``heteroplan plan --json`` prints (the plan under ``"plan"``), or a Sailor ``plan_config_*.json``
    (:meth:`Plan.from_json`; errors name the file, ``--plan``, the field and the value)."""
    return Plan.from_json(path, "--plan", model=Path(path).stem)


def run_from_dict(data: dict) -> Plan | PipelineSet:
    """A run from its dict: :meth:`PipelineSet.to_dict`'s (``"pipelines"``) or :meth:`Plan.to_dict`'s
    (anything else, a non-mapping too, is refused by :meth:`Plan.from_dict`)."""
    return PipelineSet.from_dict(data) if isinstance(data, Mapping) and "pipelines" in data else Plan.from_dict(data)


def load_run(path: str | Path) -> Plan | PipelineSet:
    """Read a run file: a :class:`PipelineSet` file (``{"pipelines": [...]}``,
    :meth:`PipelineSet.to_json`) or any plan file :func:`load_plan` reads."""
    with naming_file(path, "--plan"):
        data = read_json(path, "plan JSON")  # read once, whichever format it is
        if is_pipeline_set_data(data):
            return PipelineSet.from_dict(data)
        return Plan.from_data(data, model=Path(path).stem)
