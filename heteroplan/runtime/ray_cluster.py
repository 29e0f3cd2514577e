"""The cluster a running Ray cluster has: GPU types, GPUs and CPUs per node, read from Ray.

Ray declares a GPU node's type as the resource ``accelerator_type:<label>`` (set by Ray on GPU
machines, or by ``ray start --resources='{"accelerator_type:A100": 1}'``); the node label
``ray.io/accelerator-type`` is read too. :func:`cluster_from_ray` turns every live node with GPUs
into a :class:`~heteroplan.cluster.Node` named ``<type>-<first 8 hex digits of its Ray node id>``,
its GPU type the label, renamed by ``type_labels`` when given (``{"A100": "A100-40"}``); nodes
without GPUs (a CPU-only head) are left out. The GPU types' memory comes from ``gpu_types``
when given, else from :data:`RAY_ACCELERATOR_MEMORY_GB` (vendor datasheets); an unknown label
with no ``gpu_types`` entry is an :class:`~heteroplan.errors.InputError` naming it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from heteroplan.cluster import Cluster, GPUType, Node
from heteroplan.errors import InputError

__all__ = ["RAY_ACCELERATOR_MEMORY_GB", "RayNodes", "cluster_from_ray", "require_ray", "connect"]

log = logging.getLogger(__name__)

ACCELERATOR_RESOURCE = "accelerator_type:"
ACCELERATOR_LABEL = "ray.io/accelerator-type"
NODE_ID_LABEL = "ray.io/node-id"

RAY_ACCELERATOR_MEMORY_GB: Mapping[str, float] = MappingProxyType({
    "K80": 12.0, "P4": 8.0, "P100": 16.0, "V100": 16.0, "T4": 16.0, "A10G": 24.0, "L4": 24.0,
    "L40S": 48.0, "A100": 40.0, "A100-40G": 40.0, "A100-80G": 80.0, "H100": 80.0, "H200": 141.0,
    "B200": 180.0,
})
"""GB of device memory of Ray's NVIDIA accelerator labels (the vendors' datasheets; V100 and A100
come in two sizes: the smaller is assumed, pass ``gpu_types`` for the other)."""


def require_ray() -> Any:
    """The ``ray`` module, or an ImportError naming the extra that installs it."""
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - exercised without ray
        raise ImportError("running on a Ray cluster needs Ray: pip install 'heteroplan[ray]'") from exc
    return ray


def connect(address: str | None = "auto") -> Any:
    """Join the Ray cluster at ``address`` (``"auto"``: the one ``ray start`` began on this machine;
    ``None``: a new one-node cluster in this process) unless already connected; quiet (no driver
    logs). Returns the ``ray`` module."""
    ray = require_ray()
    if not ray.is_initialized():
        if address is not None and (not isinstance(address, str) or not address):
            raise InputError("ray_address", address, "give 'auto', a cluster address (host:port) or None")
        try:
            ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING,
                     include_dashboard=False)
        except ConnectionError as exc:
            raise InputError("ray_address", address, f"no Ray cluster there ({exc}); start one with "
                             "'ray start --head' or give its address") from None
    return ray


@dataclass(frozen=True)
class RayNodes:
    """A Ray cluster as heteroplan schedules it.

    Attributes:
        cluster: the nodes with GPUs, as a :class:`~heteroplan.cluster.Cluster`.
        node_ids: node name -> Ray node id (hex), where its ranks are placed.
        cpus: node name -> CPUs Ray declares on it.
    """

    cluster: Cluster
    node_ids: Mapping[str, str]
    cpus: Mapping[str, float]


def _label(node: Mapping[str, Any]) -> str | None:
    labels = node.get("Labels") or {}
    if labels.get(ACCELERATOR_LABEL):
        return str(labels[ACCELERATOR_LABEL])
    for key in node.get("Resources", {}):
        if key.startswith(ACCELERATOR_RESOURCE):
            return key[len(ACCELERATOR_RESOURCE):]
    return None


def _gpu_type(name: str, label: str, gpus_per_node: int, given: Mapping[str, GPUType]) -> GPUType:
    if name in given:
        return given[name]
    memory = RAY_ACCELERATOR_MEMORY_GB.get(label, RAY_ACCELERATOR_MEMORY_GB.get(name))
    if memory is None:
        raise InputError("gpu_types", label, f"a Ray node's accelerator type heteroplan does not know; give its "
                         f"GPUType (known labels: {sorted(RAY_ACCELERATOR_MEMORY_GB)})")
    return GPUType(name, memory, gpus_per_node, model=f"NVIDIA {label}")


def nodes_from_ray_state(nodes: Sequence[Mapping[str, Any]], gpu_types: Sequence[GPUType] = (),
                         type_labels: Mapping[str, str] | None = None, name: str = "ray") -> RayNodes:
    """:func:`cluster_from_ray` from ``ray.nodes()``'s records (what it reads, for tests and replays)."""
    given = {t.name: t for t in gpu_types}
    rename = dict(type_labels or {})
    picked: list[tuple[str, str, str, int, float]] = []  # (type, label, node id, GPUs, CPUs)
    for node in nodes:
        resources = node.get("Resources", {})
        gpus = int(resources.get("GPU", 0))
        if not node.get("Alive") or gpus < 1:
            continue
        label = _label(node)
        if label is None:
            raise InputError(f"ray node {node['NodeID'][:8]}", "GPU", "declares GPUs but no accelerator type: start "
                             "it with --resources='{\"accelerator_type:<type>\": 1}'")
        picked.append((rename.get(label, label), label, str(node["NodeID"]), gpus, float(resources.get("CPU", 0))))
    if not picked:
        raise InputError("ray cluster", "no GPU nodes", "no live node declares GPUs (num_gpus / --num-gpus)")
    per_node = {t: max(g for tt, _, _, g, _ in picked if tt == t) for t, *_ in picked}
    types = {t: _gpu_type(t, label, per_node[t], given) for t, label, *_ in picked}
    out, ids, cpus = [], {}, {}
    for t, _, node_id, gpus, cpu in sorted(picked, key=lambda p: (p[0], p[2])):
        node_name = f"{t}-{node_id[:8]}"
        out.append(Node(node_name, t, gpus))
        ids[node_name], cpus[node_name] = node_id, cpu
    return RayNodes(Cluster(tuple(types.values()), tuple(out), name=name), MappingProxyType(ids),
                    MappingProxyType(cpus))


def cluster_from_ray(gpu_types: Sequence[GPUType] = (), type_labels: Mapping[str, str] | None = None,
                     name: str = "ray") -> RayNodes:
    """The live GPU nodes of the Ray cluster this process is connected to (see the module doc).

    Args:
        gpu_types: GPU types by heteroplan name (memory, price), overriding the built-in table.
        type_labels: Ray accelerator label -> heteroplan GPU type name.
        name: the cluster's name.
    """
    ray = require_ray()
    if not ray.is_initialized():
        raise InputError("ray", "not connected", "call heteroplan.runtime.ray_cluster.connect() first")
    return nodes_from_ray_state(ray.nodes(), gpu_types, type_labels, name)
