"""Seconds of the simulator's transfers: who sends how many bytes over which link, how many at once.

Links are the fitted curves of :class:`~heteroplan.perf.sailor_network.NetworkModel`: the curve
of ``k`` GPUs of a node sending at once is the node's aggregate bandwidth (GB/s) at a message
size; ``k`` concurrent flows share it. A replica group of ``tp`` GPUs sits in one node, so its
``tp`` ranks are the ``k = tp`` concurrent senders of every transfer it makes.

- Pipeline transfer of ``n`` bytes (one microbatch's activation, or its gradient) from a TP group
  of stage ``s`` to its peer group of stage ``s+1``:

  * ``replicated_tp_sends = 1`` (heteroplan's runtime, Megatron-style TP without scatter/gather:
    after the row-parallel all-reduce every TP rank holds the whole activation and sends it to
    its peer rank): ``tp`` flows of ``n`` bytes leave the node at once and share the curve
    ``bw_tp``: ``c = tp * n / bw_tp(n)``. Where each GPU has its own NIC (GH200: ``bw_4 = 4 bw_1``)
    this is ``n / bw_1(n)``; where a node's GPUs share one NIC (the MIT cluster) it is ``tp``
    times that.
  * ``replicated_tp_sends = 0`` (Sailor's runtime, the measured runs): the activation crosses
    once, as one flow: ``c = n / bw_1(n)``. The measured runs decide it: on the MIT cluster
    (one NIC per 8 GPUs) TP 8 pipelines are 5-8x faster than 8 copies through the NIC would
    allow, and on GH200 (one NIC per GPU) they are no faster than one GPU's NIC allows (a
    scatter of ``n / tp`` over ``tp`` NICs would predict the pipelined runs 10% too fast).

  Plus ``transfer_latency_s`` per transfer. Whether a transfer blocks its sender depends on the
  message each sending rank hands over (:func:`pipeline_rank_message_bytes`: ``n / tp`` when the
  runtime partitions the activation over the TP ranks, as Sailor's DeepSpeed engine does, ``n``
  when every rank sends the whole replicated activation): up to ``eager_send_bytes`` the
  transport buffers it and the sender goes on (:func:`pipeline_send_buffered`).
- Gradient all-reduce of a stage over ``D`` replicas: TP rank ``i`` of every replica holds the
  same shard of ``G`` bytes; the ``tp`` shards are ``tp`` rings over ``D`` replicas running at once,
  each ring edge the slowest link between consecutive replicas, so each ring gets ``bw_tp / tp``.
  A ring all-reduce moves ``2 (D-1)/D * G`` bytes per rank in ``2 (D-1)`` steps; bucketed into
  ``B = ceil(G / bucket)`` buckets, each bucket is such a ring at its own message size and pays
  the step latency ``allreduce_latency_s`` itself.
- Cross-zone transfers are the same, over the zone pair's curve; their bytes are billed as egress.

Units: bytes, seconds, GB/s.
"""

from __future__ import annotations

import numpy as np

from heteroplan.perf.sailor_network import NetworkModel
from heteroplan.planner.model.sim_config import SimConfig

__all__ = [
    "pipeline_bytes", "pipeline_flows", "pipeline_send_s", "pipeline_rank_message_bytes", "pipeline_send_buffered",
    "allreduce_s",
]

Endpoint = tuple[str, str]  # (GPU type, zone)


def pipeline_bytes(nbytes: np.ndarray | float, tp: int, config: SimConfig) -> np.ndarray | float:
    """Bytes that leave a TP group's node for one activation of ``nbytes``: once, or ``tp`` copies."""
    return nbytes * (tp if config.replicated_tp_sends else 1)


def pipeline_flows(tp: int, config: SimConfig) -> int:
    """Concurrent flows (GPUs of the node sending) of one pipeline transfer: ``tp`` or 1."""
    return tp if config.replicated_tp_sends else 1


def pipeline_rank_message_bytes(nbytes: np.ndarray | float, tp: int, config: SimConfig) -> np.ndarray | float:
    """Bytes one TP rank sends for an activation of ``nbytes``: the whole replicated activation, or
    its ``1/tp`` partition (the receiver all-gathers the partitions inside its node)."""
    return nbytes if config.replicated_tp_sends else nbytes / tp


def pipeline_send_buffered(nbytes: np.ndarray | float, tp: int, config: SimConfig) -> np.ndarray | bool:
    """Whether a pipeline transfer of ``nbytes`` is buffered by the transport (the sender does not
    wait for its receiver): each rank's message is at most ``config.eager_send_bytes``
    (vectorized over ``nbytes``; a plain bool for a scalar)."""
    out = np.asarray(pipeline_rank_message_bytes(nbytes, tp, config)) <= config.eager_send_bytes
    return bool(out) if out.ndim == 0 else out


def pipeline_send_s(
    network: NetworkModel, src: Endpoint, dst: Endpoint, tp: int, nbytes: np.ndarray | float, config: SimConfig,
) -> np.ndarray:
    """Seconds to hand ``nbytes`` (one activation or gradient, per microbatch) from a TP group on
    ``src`` to its peer group on ``dst``, latency included (vectorized over ``nbytes``)."""
    n = np.asarray(nbytes, dtype=float)
    k = pipeline_flows(tp, config)
    return config.transfer_latency_s + k * n / 1e9 / network.curve(src, dst, k).bandwidth(n)


def allreduce_s(
    network: NetworkModel, links: set[tuple[Endpoint, Endpoint]], tp: int, replicas: int,
    grad_bytes: np.ndarray | float, config: SimConfig,
) -> np.ndarray:
    """Seconds of a stage's ring all-reduce over ``replicas`` whose ring edges are ``links``;
    ``grad_bytes`` per GPU (vectorized); 0 for one replica."""
    g = np.asarray(grad_bytes, dtype=float)
    if replicas <= 1:
        return np.zeros_like(g)
    bucket = config.allreduce_bucket_bytes
    buckets = np.maximum(np.ceil(g / bucket), 1.0) if bucket > 0 else np.ones_like(g)
    message = g / buckets
    bw = np.min([network.curve(a, b, tp).bandwidth(message) for a, b in sorted(links)], axis=0) / tp
    return buckets * config.ring_allreduce_s(replicas, message / 1e9 / bw)
