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
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from heteroplan.cluster import Cluster, GPUType, Node
from heteroplan.errors import InputError
from heteroplan.inputs import real_value, strict_int

__all__ = ["RAY_ACCELERATOR_MEMORY_GB", "RayNodes", "check_reader_options", "cluster_from_ray", "nodes_from_ray_state",
           "require_ray", "connect"]

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


def _label(node: Mapping[str, Any], resources: Mapping[str, Any]) -> str | None:
    labels = node.get("Labels") or {}
    if not isinstance(labels, Mapping):
        raise InputError(f"ray node {_node_id(node)[:8]}.Labels", labels, "must map label names to values")
    if labels.get(ACCELERATOR_LABEL):
        return str(labels[ACCELERATOR_LABEL])
    for key in resources:
        if isinstance(key, str) and key.startswith(ACCELERATOR_RESOURCE):
            return key[len(ACCELERATOR_RESOURCE):]
    return None


def _node_id(node: Mapping[str, Any]) -> str:
    """A live GPU node's Ray id (hex): its name's tail and where its ranks are placed."""
    node_id = node.get("NodeID")
    if not isinstance(node_id, str) or not node_id:
        raise InputError("ray node.NodeID", node_id, "a live node with GPUs needs its Ray node id (a hex string)")
    return node_id


def _resources(node: object) -> Mapping[str, Any]:
    """A node record's resources (an empty mapping where it declares none)."""
    if not isinstance(node, Mapping):
        raise InputError("ray nodes", node, "each node must be a record of ray.nodes() (a dict)")
    resources = node.get("Resources") or {}
    if not isinstance(resources, Mapping):
        raise InputError(f"ray node {str(node.get('NodeID'))[:8]}.Resources", resources,
                         "must map resource names to amounts")
    return resources


def _amount(node: Mapping[str, Any], resources: Mapping[str, Any], key: str) -> float:
    """A finite amount >= 0 of resource ``key`` that ``node`` declares (0 when absent)."""
    amount = resources.get(key, 0)
    if not (real_value(amount) >= 0 and math.isfinite(real_value(amount))):
        raise InputError(f"ray node {str(node.get('NodeID'))[:8]}.Resources.{key}", amount, "must be a finite number >= 0")
    return real_value(amount)


def _gpu_type(name: str, label: str, gpus_per_node: int, given: Mapping[str, GPUType]) -> GPUType:
    if name in given:
        return given[name]
    memory = RAY_ACCELERATOR_MEMORY_GB.get(label, RAY_ACCELERATOR_MEMORY_GB.get(name))
    if memory is None:
        raise InputError("gpu_types", label, f"a Ray node's accelerator type heteroplan does not know; give its "
                         f"GPUType (known labels: {sorted(RAY_ACCELERATOR_MEMORY_GB)})")
    return GPUType(name, memory, gpus_per_node, model=f"NVIDIA {label}")


def check_reader_options(gpu_types: object, type_labels: object) -> None:
    """Refuse, naming the argument, ``gpu_types`` that are no sequence of GPUType or ``type_labels``
    that map no label to a type name (the options of :func:`cluster_from_ray` and ``RayBackend``)."""
    if isinstance(gpu_types, GPUType) or not isinstance(gpu_types, Sequence) or not all(
            isinstance(t, GPUType) for t in gpu_types):
        raise InputError("gpu_types", gpu_types, "must be a sequence of GPUType")
    if type_labels is not None and not (isinstance(type_labels, Mapping) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in type_labels.items())):
        raise InputError("type_labels", type_labels, "must map Ray accelerator labels to GPU type names (strings)")


def nodes_from_ray_state(nodes: Sequence[Mapping[str, Any]], gpu_types: Sequence[GPUType] = (),
                         type_labels: Mapping[str, str] | None = None, name: str = "ray") -> RayNodes:
    """:func:`cluster_from_ray` from ``ray.nodes()``'s records (what it reads, for tests and replays).

    A live node's record must hold a node id (``NodeID``), ``Resources`` mapping names to finite
    amounts >= 0 (``GPU`` a whole number), ``Labels`` a mapping and ``Alive`` a boolean; otherwise an
    :class:`~heteroplan.errors.InputError` names the node and the field. Dead nodes are skipped unread."""
    check_reader_options(gpu_types, type_labels)
    if isinstance(nodes, str | Mapping) or not isinstance(nodes, Sequence):
        raise InputError("ray nodes", type(nodes).__name__, "must be the list ray.nodes() returns")
    given = {t.name: t for t in gpu_types}
    rename = dict(type_labels or {})
    picked: list[tuple[str, str, str, int, float]] = []  # (type, label, node id, GPUs, CPUs)
    for node in nodes:
        resources = _resources(node)
        alive = node.get("Alive")
        if alive is not None and not isinstance(alive, bool):  # "false" was a live node
            raise InputError(f"ray node {str(node.get('NodeID'))[:8]}.Alive", alive, "must be true or false")
        if not alive:  # a dead node's record is read no further
            continue
        gpus = _amount(node, resources, "GPU")
        if gpus == 0:
            continue
        node_id = _node_id(node)
        gpus = strict_int(f"ray node {node_id[:8]}.Resources.GPU", gpus)  # whole GPUs: 1.5 is no node
        label = _label(node, resources)
        if label is None:
            raise InputError(f"ray node {node_id[:8]}", "GPU", "declares GPUs but no accelerator type: start "
                             "it with --resources='{\"accelerator_type:<type>\": 1}'")
        picked.append((rename.get(label, label), label, node_id, gpus, _amount(node, resources, "CPU")))
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
