"""Where each rank of a plan sits: stage, pipeline replica, tensor-parallel index, layers, samples.

Ranks are numbered stage by stage, replica by replica, and within a replica by tensor-parallel
index: stage ``s`` starts at ``sum_{e<s} dp * tp_e`` and its replica ``d``, TP index ``t`` is rank
``start_s + d * tp_s + t`` (the ``tp_s`` ranks of one replica are neighbours, so they share a node).
With ``tp = 1`` everywhere this is ``r = stage * dp + replica``. Replica ``d`` runs ``M_d``
microbatches of ``mbs`` samples and takes samples ``[mbs * sum(M_<d), mbs * sum(M_<=d))`` of every
global batch.

Every replica of a stage must have the same TP degree (the plan format allows different ones;
the runtime refuses them: the data-parallel all-reduce sums gradients shard by shard). Stages
may differ: at a boundary each TP rank of the receiving stage takes the full activation from the
sending stage's TP rank ``t mod tp_sender`` (with equal degrees: its peer ``t``), and every TP
rank of the sending stage takes the gradient from the receiving stage's rank ``t mod tp_receiver``
(see :func:`neighbours`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from heteroplan.errors import InputError
from heteroplan.planner.plan import Plan

__all__ = ["RankInfo", "rank_layout", "check_runnable", "stage_tp", "stage_start", "world_size", "neighbours", "load_plan"]


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


def stage_tp(plan: Plan) -> list[int]:
    """Tensor-parallel degree of every stage (raises :class:`InputError` when replicas of a stage differ)."""
    out = []
    for i, stage in enumerate(plan.stages):
        degrees = sorted({g.tp for g in stage.replicas})
        if len(degrees) != 1:
            raise InputError(
                f"plan.stages[{i}].replicas.tp", degrees,
                "the runtime needs one tensor-parallel degree for all replicas of a stage",
            )
        out.append(degrees[0])
    return out


def stage_start(plan: Plan) -> list[int]:
    """First global rank of every stage, plus the world size at the end."""
    starts = [0]
    for tp in stage_tp(plan):
        starts.append(starts[-1] + plan.dp * tp)
    return starts


def world_size(plan: Plan) -> int:
    """Processes the plan needs: one per planned GPU (``plan.num_gpus``)."""
    return stage_start(plan)[-1]


def check_runnable(plan: Plan, num_layers: int | None = None) -> None:
    """Raise :class:`InputError` when the runtime cannot execute ``plan`` as given."""
    if not isinstance(plan, Plan):
        raise InputError("plan", type(plan).__name__, "must be a heteroplan.planner.Plan")
    stage_tp(plan)
    if num_layers is not None and plan.num_layers != num_layers:
        raise InputError("plan.stages", plan.num_layers, f"the model has {num_layers} layers; the plan must cover them")


def rank_layout(plan: Plan) -> list[RankInfo]:
    """One :class:`RankInfo` per rank, in rank order."""
    check_runnable(plan)
    micro = plan.microbatches()
    offsets = [sum(micro[:d]) * plan.microbatch_size for d in range(plan.dp)]
    starts, tps = stage_start(plan), stage_tp(plan)
    out = []
    for s, stage in enumerate(plan.stages):
        for d, rep in enumerate(stage.replica_list()):
            for t in range(tps[s]):
                out.append(RankInfo(
                    starts[s] + d * tps[s] + t, s, d, stage.first_layer, stage.last_layer, micro[d], offsets[d],
                    rep.gpu_type, rep.zone, t, tps[s],
                ))
    return out


def neighbours(plan: Plan, me: RankInfo, direction: int, role: str) -> list[int]:
    """Ranks of the neighbouring stage (``direction`` +1: next, -1: previous) this rank talks to.

    ``role="source"``: the one rank it receives from (TP index ``t mod tp_neighbour``);
    ``role="destination"``: the ranks it sends to (TP indices ``u`` with ``u mod tp_me == t``).
    Activations go from the previous stage's sources to its destinations, gradients back the same
    way, so every TP rank receives exactly one full tensor and the full tensor reaches every rank.
    """
    s = me.stage + direction
    if not 0 <= s < plan.pp:
        return []
    starts, tps = stage_start(plan), stage_tp(plan)
    base = starts[s] + me.replica * tps[s]
    if role == "source":
        return [base + me.tp_index % tps[s]]
    return [base + u for u in range(tps[s]) if u % me.tp == me.tp_index]


def load_plan(path: str | Path) -> Plan:
    """Read a plan file: what ``heteroplan plan --out`` or :meth:`Plan.to_json` writes, what
    ``heteroplan plan --json`` prints (the plan under ``"plan"``), or a Sailor ``plan_config_*.json``
    (:meth:`Plan.from_json`; errors name the file, ``--plan``, the field and the value)."""
    return Plan.from_json(path, "--plan", model=Path(path).stem)
