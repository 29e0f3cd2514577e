"""The communication a plan pays around its pipeline, assembled once for the simulator and the search.

After the pipeline (units: seconds, bytes, $):

- a stage's ring over its ``D`` data-parallel replicas runs its collectives
  (:func:`ring_sync_s`): the gradients' all-reduce and, under ZeRO-1, the all-gather of the
  updated fp32 weights (timed as an all-reduce of half their bytes,
  :func:`~heteroplan.planner.model.terms.allgather_as_allreduce_bytes`); then the optimizer
  step (:func:`~heteroplan.planner.model.terms.sharded_update_s` under ZeRO-1); a stage's sync
  is their sum (:func:`stage_sync_s`);
- the ring's cross-zone edges carry ``2 (D-1)/D`` of the bytes it all-reduces per rank
  (:func:`ring_bytes`, :func:`ring_egress`).

Between stages: a pipeline boundary sends each microbatch's activation forward and its gradient
back; where it crosses zones the bytes are billed (:func:`boundary_egress`); its seconds are
:func:`~heteroplan.planner.model.comm.pipeline_send_s`.

:func:`~heteroplan.planner.model.simulator.simulate_plan` calls these on one plan (scalars), the
search (:mod:`heteroplan.planner.search`) on its ``(L+1, L+1)`` tables of layer ranges; a new
collective or sync variant is added here and both see it (docs/sailor.md, "Adding a cost term").
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from heteroplan.perf.sailor_network import NetworkModel
from heteroplan.planner.model.comm import Endpoint, allreduce_s
from heteroplan.planner.model.sim_config import SimConfig
from heteroplan.planner.model.terms import (
    allgather_as_allreduce_bytes,
    allreduce_egress_bytes,
    pipeline_egress_bytes,
)

__all__ = ["ring_edges", "ring_sync_s", "stage_sync_s", "ring_bytes", "ring_egress", "boundary_egress"]

Number = float | np.ndarray
Edge = tuple[Endpoint, Endpoint]


def ring_edges(ends: Sequence[Endpoint]) -> list[Edge]:
    """The edges of the ring over replicas at ``ends`` (GPU type, zone) in order, the last back to
    the first; an edge appears as often as the ring walks it."""
    ends = list(ends)
    return list(zip(ends, ends[1:] + ends[:1], strict=True))


def ring_sync_s(network: NetworkModel, links: set[Edge], tp: int, replicas: int, grad_bytes: Number,
                config: SimConfig, gathered_weight_bytes: Number | None = None) -> np.ndarray:
    """Seconds of a stage's collectives after its backward over ``replicas`` whose ring edges are
    ``links``: the all-reduce of ``grad_bytes`` per GPU and, with ``gathered_weight_bytes`` (ZeRO-1:
    the fp32 weights, :func:`~heteroplan.planner.model.terms.fp32_weight_bytes`), their all-gather.
    Vectorised over the bytes; a non-finite ``grad_bytes`` (no such layer range) gives ``inf``;
    0 for one replica."""
    g = np.asarray(grad_bytes, dtype=float)
    finite = np.isfinite(g)
    t = allreduce_s(network, links, tp, replicas, np.where(finite, g, 1.0), config)
    if gathered_weight_bytes is not None and replicas > 1:
        gathered = allgather_as_allreduce_bytes(np.where(finite, gathered_weight_bytes, 1.0))
        t = t + allreduce_s(network, links, tp, replicas, gathered, config)
    return np.where(finite, t, np.inf)


def stage_sync_s(ring_s: Number, update_s: Number) -> Number:
    """Seconds a stage spends after the pipeline: its ring's collectives (:func:`ring_sync_s`) and
    then its optimizer step (the slowest replica's)."""
    return ring_s + update_s


def ring_bytes(grad_bytes: Number, gathered_weight_bytes: Number | None = None) -> Number:
    """Bytes per GPU a stage's ring all-reduces (what its egress is billed on): the gradients and,
    under ZeRO-1, the all-gather of ``gathered_weight_bytes`` as an all-reduce of its size."""
    if gathered_weight_bytes is None:
        return grad_bytes
    return grad_bytes + allgather_as_allreduce_bytes(gathered_weight_bytes)


def ring_egress(network: NetworkModel, edges: Sequence[Edge], replicas: int, tp: int,
                nbytes: Number) -> tuple[Number, Number]:
    """``(bytes, $)`` per iteration that a ring over ``replicas`` all-reducing ``nbytes`` per GPU
    (:func:`ring_bytes`) sends over its edges that cross zones, each edge as often as ``edges``
    lists it (:func:`~heteroplan.planner.model.terms.allreduce_egress_bytes`); vectorised over ``nbytes``."""
    sent_total: Number = 0.0
    usd: Number = 0.0
    if replicas <= 1:
        return sent_total, usd
    edges = list(edges)
    for a, b in set(edges):
        if a[1] != b[1]:
            sent = allreduce_egress_bytes(replicas, nbytes, tp, edges.count((a, b)))
            sent_total = sent_total + sent
            usd = usd + sent / 1e9 * network.egress_per_gb(a[1], b[1])
    return sent_total, usd


def boundary_egress(network: NetworkModel, src_zone: str, dst_zone: str, activation_bytes: Number, tp: int,
                    microbatches: Number, config: SimConfig) -> tuple[Number, Number]:
    """``(bytes, $)`` per iteration and pipeline replica that a stage boundary from ``src_zone`` to
    ``dst_zone`` bills: ``microbatches`` activations of ``activation_bytes`` forward and their
    gradients back (:func:`~heteroplan.planner.model.terms.pipeline_egress_bytes`); 0 within a zone."""
    if src_zone == dst_zone:
        return 0.0, 0.0
    sent = pipeline_egress_bytes(activation_bytes, tp, microbatches, config)
    return sent, sent / 1e9 * network.egress_per_gb(src_zone, dst_zone)
