"""Pollux as the Sia artifact runs it (``pollux-sia``): identical 4-GPU virtual nodes, majority-type fix-up.

:class:`PolluxArtifactPolicy` is :class:`~heteroplan.policies.pollux.PolluxPolicy` with the
artifact's defaults (fitness against a fair share, lam = 250, a job without GPUs pays its
restart factor, restarts priced at 30 s, restoring jobs not pinned, merged profiles; see the
module doc of :mod:`heteroplan.policies.pollux`) and its placement:

- the cluster is pooled into identical 4-GPU virtual nodes (:func:`virtual_nodes`; 8-GPU nodes
  split in two) and a job gets at most 16 replicas;
- :func:`place_virtual`: a job keeping its GPU count keeps its virtual nodes; the others, largest
  first, are packed onto the fewest virtual nodes (:func:`fewest_virtual_nodes`) taken in a
  seeded random order (:class:`VnodeOrder`); an allocation spanning GPU types keeps only the
  GPUs of its majority type (ties: the faster type, as the artifact's ``prio_order``), the
  dropped GPUs stay idle, and what is kept is the job's virtual nodes from then on.

Units: GPUs, seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import ClassVar

import numpy as np

from heteroplan.cluster import Cluster
from heteroplan.errors import InputError
from heteroplan.inputs import enum_choice
from heteroplan.policies.base import Allocation, JobState
from heteroplan.policies.pollux import PolluxPolicy, PolluxState, SpeedupBase
from heteroplan.policies.state import GeneratorState, PolicyState, expect_state

__all__ = ["ARTIFACT_MAX_REPLICAS", "ARTIFACT_RESTART_PRICE_S", "VIRTUAL_NODE_GPUS", "PolluxArtifactPolicy",
           "VirtualNode", "VnodeOrder", "fewest_virtual_nodes", "place_virtual", "virtual_nodes"]

VIRTUAL_NODE_GPUS = 4  # the Sia artifact's Pollux sees 4-GPU nodes only
ARTIFACT_MAX_REPLICAS = 16
ARTIFACT_RESTART_PRICE_S = 30.0  # the artifact GA's restart penalty prices every restart at 30 s
ARTIFACT_KEEP_ORDER = ("dgx-ext", "azure", "quad", "rtx", "aws")  # ties keep the earlier type

Held = tuple[tuple[int, int], ...]  # (virtual node index, GPUs) pairs


class VnodeOrder(StrEnum):
    """The order in which new placements take the virtual nodes."""

    NODE = "node"  # the cluster's order
    SHUFFLED = "shuffled"  # a seeded random order per job (the artifact's GA is type-blind)


@dataclass(frozen=True)
class VirtualNode:
    """A slice of at most 4 GPUs of one node (``gpus``: its size)."""

    node: str
    gpu_type: str
    gpus: int


def virtual_nodes(cluster: Cluster) -> tuple[VirtualNode, ...]:
    """The cluster's nodes cut into 4-GPU virtual nodes, in the cluster's order."""
    return tuple(VirtualNode(n.name, n.gpu_type, min(VIRTUAL_NODE_GPUS, n.num_gpus - start))
                 for n in cluster.nodes for start in range(0, n.num_gpus, VIRTUAL_NODE_GPUS))


def place_virtual(cluster: Cluster, jobs: Sequence[JobState], counts: Mapping[str, int], held: Mapping[str, Held],
                  order: Callable[[int], np.ndarray]) -> tuple[dict[str, Allocation], dict[str, Held]]:
    """Allocations of the chosen GPU ``counts`` on virtual nodes, and the virtual nodes each job
    holds afterwards (its kept GPUs).

    ``held``: the virtual nodes each job held (kept when its count is unchanged and they are
    free); ``order(n)``: the order in which a new placement takes the n virtual nodes.
    """
    vnodes = virtual_nodes(cluster)
    free = [v.gpus for v in vnodes]
    intended: dict[str, Held] = {}
    for jid, want in counts.items():  # a job keeping its GPU count keeps its virtual nodes
        prev = held.get(jid)
        if prev and sum(c for _, c in prev) == want and all(free[v] >= c for v, c in prev):
            for v, c in prev:
                free[v] -= c
            intended[jid] = prev
    for j in sorted(jobs, key=lambda j: -counts.get(j.job_id, 0)):  # largest first, fewest virtual nodes
        want = counts.get(j.job_id, 0)
        if want == 0 or j.job_id in intended:
            continue
        got = fewest_virtual_nodes(free, want, order(len(free)))
        if got is not None:
            intended[j.job_id] = got
    out: dict[str, Allocation] = {}
    kept: dict[str, Held] = {}
    for jid, parts in intended.items():
        per_type: dict[str, int] = {}
        for v, c in parts:
            per_type[vnodes[v].gpu_type] = per_type.get(vnodes[v].gpu_type, 0) + c
        keep = max(per_type, key=lambda t: (per_type[t], -_keep_rank(t, cluster)))
        per_node: dict[str, int] = {}
        for v, c in parts:
            if vnodes[v].gpu_type == keep:
                per_node[vnodes[v].node] = per_node.get(vnodes[v].node, 0) + c
        out[jid] = Allocation(keep, sum(per_node.values()), tuple(per_node.items()))
        kept[jid] = tuple((v, c) for v, c in parts if vnodes[v].gpu_type == keep)  # the artifact's base state
    return out, kept


def _keep_rank(gpu_type: str, cluster: Cluster) -> int:
    """Tie-break of the majority-type fix-up: the Sia artifact keeps the faster type (dgx-ext,
    azure, quad, rtx, aws); other types after those, in cluster order."""
    if gpu_type in ARTIFACT_KEEP_ORDER:
        return ARTIFACT_KEEP_ORDER.index(gpu_type)
    return len(ARTIFACT_KEEP_ORDER) + cluster.type_names.index(gpu_type)


def fewest_virtual_nodes(free: list[int], want: int, order: np.ndarray) -> Held | None:
    """Whole free virtual nodes in ``order``, then the remainder best-fit (Pollux's speed-up model
    favours few nodes; ties go to the earlier node in ``order``); debits ``free``; ``None`` (no
    change) when ``want`` GPUs are not free."""
    if sum(free) < want:
        return None
    size = VIRTUAL_NODE_GPUS
    rank = np.empty(len(free), dtype=int)
    rank[order] = np.arange(len(free))
    got: list[tuple[int, int]] = []
    for v in order:
        if want >= size and free[v] == size:
            got.append((int(v), size))
            free[v] = 0
            want -= size
    while want > 0:
        fits = [v for v in range(len(free)) if free[v] >= want]
        v = min(fits, key=lambda v: (free[v], rank[v])) if fits else max(range(len(free)), key=lambda v: (free[v], -rank[v]))
        c = min(want, free[v])
        got.append((v, c))
        free[v] -= c
        want -= c
    return tuple(got)


@dataclass
class PolluxArtifactPolicy(PolluxPolicy):
    """Pollux as the Sia artifact runs it (module doc): :class:`~heteroplan.policies.pollux.PolluxPolicy`
    with the artifact's defaults and virtual-node placement.

    ``vnode_order``: a :class:`VnodeOrder` (or its value); ``seed``: of the generator that shuffles
    the virtual nodes (an integer >= 0). The other options are :class:`PolluxPolicy`'s.
    """

    name: str = "pollux-sia"
    speedup_base: SpeedupBase | str = SpeedupBase.FAIR_SHARE
    merged_profile: bool = True
    restart_unallocated: bool = True
    restart_price_s: float | None = ARTIFACT_RESTART_PRICE_S
    pin_restoring: bool = False
    vnode_order: VnodeOrder | str = VnodeOrder.SHUFFLED
    seed: int = 0
    _held: dict[str, Held] = field(default_factory=dict, repr=False)
    _rng: np.random.Generator = field(init=False, repr=False)

    MECHANISM: ClassVar[str] = "sia-artifact"

    def __post_init__(self) -> None:
        super().__post_init__()
        self.vnode_order = enum_choice(VnodeOrder, "vnode_order", self.vnode_order)
        if isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)) or self.seed < 0:
            raise InputError("seed", self.seed, "must be an integer >= 0")
        self._rng = np.random.default_rng(self.seed)

    @property
    def virtual_nodes(self) -> Mapping[str, Held]:
        """Per job, the (virtual node index, GPUs) pairs it holds."""
        return self._held

    def state(self) -> PolluxState:
        """What the policy remembers between rounds: each job's virtual nodes and merged profile,
        and where its random generator stands; a copy."""
        return PolluxState(dict(self._held), {j: p.snapshot() for j, p in self._profiles.items()},
                           GeneratorState.of(self._rng))

    def restore_state(self, state: PolicyState) -> None:
        """Continue from ``state`` (a :meth:`state` of a policy like this one, same options)."""
        state = expect_state(state, PolluxState, self.name)
        super().restore_state(state)
        self._held = dict(state.virtual_nodes)
        self._rng = state.rng.generator() if state.rng is not None else np.random.default_rng(self.seed)

    def pool_shape(self, cluster: Cluster) -> tuple[int, int]:
        """At most 16 replicas (and the cluster's GPUs) on 4-GPU virtual nodes."""
        return min(cluster.num_gpus, ARTIFACT_MAX_REPLICAS), VIRTUAL_NODE_GPUS

    def place(self, cluster: Cluster, jobs: Sequence[JobState], counts: dict[str, int]) -> dict[str, Allocation]:
        """:func:`place_virtual` from the virtual nodes the jobs hold, in ``vnode_order``; what is
        kept is each job's virtual nodes next round."""
        if self.vnode_order is VnodeOrder.SHUFFLED:
            order: Callable[[int], np.ndarray] = self._rng.permutation
        else:
            order = np.arange
        held = {jid: p for jid, p in self._held.items() if jid in counts}
        out, self._held = place_virtual(cluster, jobs, counts, held, order)
        return out
