"""Cluster description: GPU types, zones and nodes.

Everything here is a frozen dataclass validated on construction. Bad input raises
:class:`heteroplan.errors.ClusterError` (a ``ValueError``) naming the field and value.

Units: memory in GB, prices in $/h per GPU.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from heteroplan._html import table, title
from heteroplan.errors import ClusterError
from heteroplan.inputs import finite_number, read_json, strict_int
from heteroplan.schema import (
    Number,
    OneOf,
    Record,
    Seq,
    Table,
    Text,
    Versioned,
    decode,
    naming_file,
)

__all__ = ["GPUType", "Zone", "Node", "Cluster", "preset", "PRESETS"]


def _check_name(field_name: str, value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ClusterError(field_name, value, "must be a non-empty string")


MAX_CLUSTER_GPUS = 1_000_000
"""Most GPUs a cluster built from counts may have (ten times the largest training clusters):
a count beyond it is a typo, and would build millions of node objects."""


_GPU_TYPE = Record({"name": Text(), "memory_gb": Number(above=0, high=1e6, unit="GB"),
                    "gpus_per_node": Number(low=1, high=4096, integer=True, unit="GPUs")},
                   {"price_per_hour": Number(low=0, high=1e6, unit="$/h"), "model": Text(min_len=0),
                    "memory_bandwidth_gbs": Number(low=0, high=1e6, unit="GB/s"),
                    **{f"peak_tflops_{p}": Number(low=0, high=1e6, unit="TFLOP/s") for p in ("fp32", "tf32", "bf16")},
                    "peak_source": Text(min_len=0, max_len=1000)})
_COUNT = Number(low=0, high=MAX_CLUSTER_GPUS, integer=True, unit="GPUs")
CLUSTER_FILE = Versioned({1: Record(
    {"gpu_types": Seq(_GPU_TYPE, 0, 10_000)},
    {"name": Text(), "zones": Seq(OneOf((Text(), Record({"name": Text()}, {"region": Text(min_len=0)}))), 0, 10_000),
     "nodes": Seq(Record({"name": Text(), "gpu_type": Text(), "num_gpus": _COUNT}, {"zone": Text()}), 0, MAX_CLUSTER_GPUS),
     "counts": Table(_COUNT, Text(), 0, 10_000)})})
"""A cluster file (:meth:`Cluster.from_dict`); an optional ``format_version`` (1)."""


def _check_count(field_name: str, value: object, minimum: int = 0) -> int:
    return strict_int(field_name, value, minimum, error=ClusterError)


def _check_nonneg(field_name: str, value: object) -> float:
    return finite_number(field_name, value, low=0, error=ClusterError)


@dataclass(frozen=True)
class GPUType:
    """A kind of GPU.

    Attributes:
        name: identifier used everywhere else (e.g. ``"A100-40"``, ``"aws"``).
        memory_gb: device memory (GB).
        gpus_per_node: GPUs of this type in one node.
        price_per_hour: rental price of one GPU ($/h); 0 when unknown.
        model: human-readable hardware name (e.g. ``"NVIDIA T4"``).
        memory_bandwidth_gbs: device memory bandwidth (GB/s, the vendor's figure); 0 when
            unknown. The planner prices a memory-bound optimizer step with it.
        peak_tflops_fp32, peak_tflops_tf32, peak_tflops_bf16: dense peak arithmetic (TFLOP/s, no
            sparsity) in fp32, TF32 and bf16 tensor-core matmuls; 0 when unknown or absent (a V100
            has no TF32 nor bf16). MFU is reported against the peak of the plan's precision
            (:mod:`heteroplan.planner.model.flops`).
        peak_source: where the peaks come from (the vendor's datasheet).
    """

    name: str
    memory_gb: float
    gpus_per_node: int
    price_per_hour: float = 0.0
    model: str = ""
    memory_bandwidth_gbs: float = 0.0
    peak_tflops_fp32: float = 0.0
    peak_tflops_tf32: float = 0.0
    peak_tflops_bf16: float = 0.0
    peak_source: str = ""

    def __post_init__(self) -> None:
        _check_name("gpu_type.name", self.name)
        if _check_nonneg(f"gpu_type[{self.name}].memory_gb", self.memory_gb) <= 0:
            raise ClusterError(f"gpu_type[{self.name}].memory_gb", self.memory_gb, "must be > 0")
        object.__setattr__(self, "gpus_per_node",
                           _check_count(f"gpu_type[{self.name}].gpus_per_node", self.gpus_per_node, minimum=1))
        for name in ("memory_gb", "price_per_hour", "memory_bandwidth_gbs", "peak_tflops_fp32", "peak_tflops_tf32",
                     "peak_tflops_bf16"):  # stored as floats: numpy's (np.float32) would not reach a saved file
            object.__setattr__(self, name, _check_nonneg(f"gpu_type[{self.name}].{name}", getattr(self, name)))
        if not isinstance(self.peak_source, str):
            raise ClusterError(f"gpu_type[{self.name}].peak_source", self.peak_source, "must be a string")


@dataclass(frozen=True)
class Zone:
    """An availability zone inside a region (e.g. ``us-central1-a`` in ``us-central1``)."""

    name: str
    region: str = ""

    def __post_init__(self) -> None:
        _check_name("zone.name", self.name)
        if not self.region:
            # GCP-style names: region is the name without its last "-x" part.
            object.__setattr__(self, "region", self.name.rsplit("-", 1)[0] if "-" in self.name else self.name)


@dataclass(frozen=True)
class Node:
    """A machine holding ``num_gpus`` GPUs of one type in one zone."""

    name: str
    gpu_type: str
    num_gpus: int
    zone: str = "default"

    def __post_init__(self) -> None:
        _check_name("node.name", self.name)
        _check_name(f"node[{self.name}].gpu_type", self.gpu_type)
        object.__setattr__(self, "num_gpus", _check_count(f"node[{self.name}].num_gpus", self.num_gpus, minimum=1))
        _check_name(f"node[{self.name}].zone", self.zone)


@dataclass(frozen=True)
class Cluster:
    """A set of nodes of known GPU types, spread over zones.

    Use :meth:`from_counts` to build one from ``{(gpu_type, zone): num_gpus}`` and
    :func:`preset` for the built-in clusters.
    """

    gpu_types: tuple[GPUType, ...]
    nodes: tuple[Node, ...]
    zones: tuple[Zone, ...] = ()
    name: str = "cluster"
    _types_by_name: dict[str, GPUType] = field(init=False, repr=False, compare=False)
    _node_types: dict[str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "gpu_types", tuple(self.gpu_types))
        object.__setattr__(self, "nodes", tuple(self.nodes))
        zones = tuple(self.zones)
        by_name: dict[str, GPUType] = {}
        for t in self.gpu_types:
            if not isinstance(t, GPUType):
                raise ClusterError("gpu_types", t, "each entry must be a GPUType")
            if t.name in by_name:
                raise ClusterError("gpu_types.name", t.name, "GPU type named twice")
            by_name[t.name] = t
        if not zones:
            zones = tuple(Zone(z) for z in dict.fromkeys(n.zone for n in self.nodes))
        zone_names: set[str] = set()
        for z in zones:
            if z.name in zone_names:
                raise ClusterError("zones.name", z.name, "zone named twice")
            zone_names.add(z.name)
        object.__setattr__(self, "zones", zones)
        node_names: set[str] = set()
        for n in self.nodes:
            if not isinstance(n, Node):
                raise ClusterError("nodes", n, "each entry must be a Node")
            if n.name in node_names:
                raise ClusterError("nodes.name", n.name, "node named twice")
            node_names.add(n.name)
            if n.gpu_type not in by_name:
                raise ClusterError(
                    f"node[{n.name}].gpu_type", n.gpu_type, f"unknown GPU type; known: {sorted(by_name)}"
                )
            if n.zone not in zone_names:
                raise ClusterError(f"node[{n.name}].zone", n.zone, f"unknown zone; known: {sorted(zone_names)}")
            if n.num_gpus > by_name[n.gpu_type].gpus_per_node:
                raise ClusterError(
                    f"node[{n.name}].num_gpus",
                    n.num_gpus,
                    f"exceeds gpus_per_node={by_name[n.gpu_type].gpus_per_node} of type {n.gpu_type}",
                )
        object.__setattr__(self, "_types_by_name", by_name)
        object.__setattr__(self, "_node_types", {n.name: n.gpu_type for n in self.nodes})

    # ----------------------------------------------------------------- queries
    @property
    def type_names(self) -> tuple[str, ...]:
        """GPU type names in declaration order."""
        return tuple(t.name for t in self.gpu_types)

    @property
    def num_gpus(self) -> int:
        """Total GPUs in the cluster."""
        return sum(n.num_gpus for n in self.nodes)

    def gpu_type(self, name: str) -> GPUType:
        """The GPU type called ``name``; :class:`ClusterError` if unknown."""
        try:
            return self._types_by_name[name]
        except KeyError:
            raise ClusterError("gpu_type", name, f"unknown GPU type; known: {list(self.type_names)}") from None

    @property
    def node_types(self) -> Mapping[str, str]:
        """GPU type of each node, by node name (built once per cluster; read-only)."""
        return MappingProxyType(self._node_types)

    def capacity(self) -> dict[str, int]:
        """GPUs per type (every type listed, 0 if it has no node)."""
        cap = dict.fromkeys(self.type_names, 0)
        for n in self.nodes:
            cap[n.gpu_type] += n.num_gpus
        return cap

    def capacity_by_zone(self) -> dict[tuple[str, str], int]:
        """GPUs per (type, zone), only pairs that hold GPUs."""
        cap: dict[tuple[str, str], int] = {}
        for n in self.nodes:
            cap[(n.gpu_type, n.zone)] = cap.get((n.gpu_type, n.zone), 0) + n.num_gpus
        return cap

    def nodes_of_type(self, gpu_type: str) -> tuple[Node, ...]:
        """Nodes holding GPUs of ``gpu_type`` (validated)."""
        self.gpu_type(gpu_type)
        return tuple(n for n in self.nodes if n.gpu_type == gpu_type)

    def zone(self, name: str) -> Zone:
        for z in self.zones:
            if z.name == name:
                return z
        raise ClusterError("zone", name, f"unknown zone; known: {[z.name for z in self.zones]}")

    def summary(self) -> str:
        """One line per GPU type: nodes x GPUs/node, total, price."""
        lines = [f"Cluster {self.name!r}: {self.num_gpus} GPUs, {len(self.nodes)} nodes, {len(self.zones)} zones"]
        cap = self.capacity()
        for t in self.gpu_types:
            n_nodes = len(self.nodes_of_type(t.name))
            lines.append(
                f"  {t.name:<10} {cap[t.name]:>5} GPUs on {n_nodes:>3} nodes "
                f"({t.gpus_per_node}/node, {t.memory_gb:g} GB, ${t.price_per_hour:.3f}/h)"
            )
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        cap = self.capacity()
        rows = [
            (t.name, t.model, cap[t.name], len(self.nodes_of_type(t.name)), t.gpus_per_node, f"{t.memory_gb:g}",
             f"{t.price_per_hour:.3f}")
            for t in self.gpu_types
        ]
        headers = ("type", "model", "GPUs", "nodes", "GPUs/node", "memory (GB)", "$/h per GPU")
        detail = f"{self.num_gpus} GPUs, {len(self.nodes)} nodes, {len(self.zones)} zones"
        return title(f"Cluster {self.name}", detail) + table(headers, rows)

    # ------------------------------------------------------------ construction
    @classmethod
    def from_counts(
        cls,
        gpu_types: Iterable[GPUType],
        counts: Mapping[str | tuple[str, str], int],
        name: str = "cluster",
        zones: Iterable[Zone] = (),
    ) -> Cluster:
        """Build a cluster from GPU counts.

        Args:
            gpu_types: the GPU types that may appear.
            counts: ``{type: num_gpus}`` (zone ``"default"``) or ``{(type, zone): num_gpus}``.
                Each count is split into full nodes of ``gpus_per_node`` plus one partial node.
            name: cluster name.
            zones: zone descriptions (inferred from ``counts`` when empty).
        """
        types = {t.name: t for t in gpu_types}
        nodes: list[Node] = []
        total = 0
        for key, count in counts.items():
            if not isinstance(key, str) and not (isinstance(key, tuple) and len(key) == 2):
                raise ClusterError("counts", key, "keys must be GPU type names or (gpu_type, zone) pairs")
            gpu_type, zone = (key, "default") if isinstance(key, str) else key
            _check_count(f"counts[{key!r}]", count)
            if gpu_type not in types:
                raise ClusterError(f"counts[{key!r}]", gpu_type, f"unknown GPU type; known: {sorted(types)}")
            total += int(count)
            if total > MAX_CLUSTER_GPUS:  # before building millions of node objects
                raise ClusterError(f"counts[{key!r}]", count, f"the cluster would have {total:,} GPUs; at most "
                                   f"{MAX_CLUSTER_GPUS:,} are modelled (check the count's units)")
            per_node = types[gpu_type].gpus_per_node
            full, rest = divmod(int(count), per_node)
            sizes = [per_node] * full + ([rest] if rest else [])
            nodes += [Node(f"{gpu_type}@{zone}/{i}", gpu_type, s, zone) for i, s in enumerate(sizes)]
        return cls(tuple(types.values()), tuple(nodes), tuple(zones), name)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Cluster:
        """Build from ``{"name", "gpu_types": [...], "nodes": [...] | "counts": {...}, "zones": [...]}``.

        ``counts`` keys are ``"type"`` or ``"type@zone"``.
        """
        if not isinstance(data, Mapping):
            raise ClusterError("cluster", type(data).__name__, "must be a mapping")
        if "gpu_types" not in data:
            raise ClusterError("gpu_types", None, "missing")
        data = decode(CLUSTER_FILE, data, error=ClusterError)
        try:
            types = tuple(GPUType(**t) for t in data["gpu_types"])
            zones = tuple(Zone(**z) if isinstance(z, Mapping) else Zone(z) for z in data.get("zones", ()))
        except TypeError as exc:
            raise ClusterError("gpu_types/zones", data.get("gpu_types"), f"bad entry: {exc}") from None
        name = data.get("name", "cluster")
        if "nodes" in data:
            try:
                nodes = tuple(Node(**n) for n in data["nodes"])
            except TypeError as exc:
                raise ClusterError("nodes", data["nodes"], f"bad entry: {exc}") from None
            if not nodes:
                raise ClusterError("nodes", [], "the cluster has no GPUs")
            if sum(n.num_gpus for n in nodes) > MAX_CLUSTER_GPUS:
                raise ClusterError("nodes", f"{sum(n.num_gpus for n in nodes):,} GPUs",
                                   f"at most {MAX_CLUSTER_GPUS:,} are modelled")
            return cls(types, nodes, zones, name)
        if "counts" in data:
            if not isinstance(data["counts"], Mapping):
                raise ClusterError("counts", data["counts"], "must map 'type' or 'type@zone' to a GPU count")
            counts: dict[str | tuple[str, str], int] = {}
            seen: dict[tuple[str, str], str] = {}
            for key, count in data["counts"].items():
                if not isinstance(key, str) or not key:
                    raise ClusterError(f"counts[{key!r}]", count, "keys are 'type' or 'type@zone' strings")
                parsed = tuple(key.split("@", 1)) if "@" in key else key
                canonical = parsed if isinstance(parsed, tuple) else (parsed, "default")
                if canonical in seen:
                    raise ClusterError(f"counts[{key!r}]", count, f"the same GPU type and zone as {seen[canonical]!r}")
                seen[canonical] = key  # type: ignore[assignment]
                counts[parsed] = count  # type: ignore[index]
            cluster = cls.from_counts(types, counts, name, zones)
            if cluster.num_gpus == 0:  # every job would be rejected, silently
                raise ClusterError("counts", dict(data["counts"]), "the cluster has no GPUs")
            return cluster
        raise ClusterError("nodes", None, "give either 'nodes' or 'counts'")

    @classmethod
    def from_json(cls, path: str | Path) -> Cluster:
        """Load a cluster from a JSON file in the :meth:`from_dict` format (errors name the file)."""
        with naming_file(path):
            return cls.from_dict(read_json(path, "cluster JSON", ClusterError))

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable form accepted by :meth:`from_dict`."""
        return {
            "name": self.name,
            "gpu_types": [asdict(t) for t in self.gpu_types],
            "zones": [asdict(z) for z in self.zones],
            "nodes": [asdict(n) for n in self.nodes],
        }


# --------------------------------------------------------------------- presets
SIA_GPU_TYPES = (
    GPUType("aws", 16, 4, 0.0, "NVIDIA T4"),
    GPUType("rtx", 11, 8, 0.0, "NVIDIA RTX 2080 Ti"),
    GPUType("dgx-ext", 40, 8, 0.0, "NVIDIA A100"),
)
GAVEL_GPU_TYPES = (
    GPUType("k80", 12, 4, 0.0, "NVIDIA K80"),
    GPUType("p100", 16, 4, 0.0, "NVIDIA P100"),
    GPUType("v100", 16, 4, 0.0, "NVIDIA V100"),
)
# Sailor's GCP prices ($/h per GPU) and memories (GB); 4 GPUs per VM for A100/V100 as in its runs.
# The RTX types are the MIT cluster of Sailor's validation runs (8 per node, no price: 0 $/h).
# Memory bandwidths (GB/s) are the vendors' figures (A100 40GB SXM, V100 SXM2, GH200 with HBM3).
# Dense peaks (TFLOP/s, fp32 / TF32 / bf16, without sparsity) from the vendors' datasheets, named in
# peak_source; 0 where the GPU has no such unit (V100, Turing: no TF32 nor bf16). H100-80 and
# H200-141 are the GPUs of the runtime's leases (SXM, 8 per node; no price recorded: 0 $/h).
_A100 = "NVIDIA A100 datasheet (SXM): FP32 19.5, TF32 156, BF16 312 dense"
_V100 = "NVIDIA V100 datasheet (SXM2): FP32 15.7 (FP16 tensor 125; no TF32, no BF16)"
_HOPPER = "NVIDIA {} datasheet (SXM): FP32 67, TF32 494.7, BF16 989.4 dense (half the sparse figures)"
SAILOR_GPU_TYPES = (
    GPUType("A100-40", 40, 4, 3.673, "NVIDIA A100 40GB", 1555.0, 19.5, 156.0, 312.0, _A100),
    GPUType("V100-16", 16, 4, 2.860, "NVIDIA V100 16GB", 900.0, 15.7, 0.0, 0.0, _V100),
    GPUType("GH-96", 96, 4, 11.06, "NVIDIA GH200 96GB", 4000.0, 67.0, 494.7, 989.4, _HOPPER.format("GH200")),
    GPUType("RTX-2080", 11, 8, 0.0, "NVIDIA GeForce RTX 2080 Ti 11GB", 616.0, 13.4, 0.0, 0.0,
            "NVIDIA Turing whitepaper (RTX 2080 Ti): FP32 13.4 (no TF32, no BF16)"),
    GPUType("RTX-3090", 24, 8, 0.0, "NVIDIA GeForce RTX 3090 24GB", 936.0, 35.6, 35.6, 71.0,
            "NVIDIA Ampere GA102 whitepaper (RTX 3090): FP32 35.6, TF32 35.6, BF16 (FP32 accumulate) 71 dense"),
    GPUType("Titan-RTX", 24, 8, 0.0, "NVIDIA Titan RTX 24GB", 672.0, 16.3, 0.0, 0.0,
            "NVIDIA Turing whitepaper (Titan RTX): FP32 16.3 (no TF32, no BF16)"),
    GPUType("H100-80", 80, 8, 0.0, "NVIDIA H100 80GB HBM3", 3350.0, 67.0, 494.7, 989.4, _HOPPER.format("H100")),
    GPUType("H200-141", 141, 8, 0.0, "NVIDIA H200", 4800.0, 67.0, 494.7, 989.4, _HOPPER.format("H200")),
)
SAILOR_ZONES = ("us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f", "us-west1-b")


def _sia_64() -> Cluster:
    return Cluster.from_counts(SIA_GPU_TYPES, {"aws": 24, "dgx-ext": 16, "rtx": 24}, "sia-64")


def _gavel_108() -> Cluster:
    return Cluster.from_counts(GAVEL_GPU_TYPES, {"k80": 36, "p100": 36, "v100": 36}, "gavel-108")


def _sailor_gcp() -> Cluster:
    counts: dict[str | tuple[str, str], int] = {("A100-40", z): 256 for z in SAILOR_ZONES}
    counts[("V100-16", "us-central1-a")] = 256
    return Cluster.from_counts(SAILOR_GPU_TYPES[:2], counts, "sailor-gcp", tuple(Zone(z) for z in SAILOR_ZONES))


PRESETS = {
    "sia-64": _sia_64,
    "gavel-108": _gavel_108,
    "sailor-gcp": _sailor_gcp,
}


def preset(name: str) -> Cluster:
    """A built-in cluster.

    - ``sia-64``: Sia's simulated cluster, 6x4 T4 (``aws``) + 2x8 A100 (``dgx-ext``) + 3x8 RTX (``rtx``).
    - ``gavel-108``: Gavel's simulated cluster, 36 each of K80, P100, V100 (4 per node).
    - ``sailor-gcp``: 5 GCP zones with 256 A100-40 each, plus 256 V100-16 in us-central1-a.
    """
    try:
        return PRESETS[name]()
    except (KeyError, TypeError):  # TypeError: an unhashable name (a list)
        raise ClusterError("cluster", name, f"unknown preset; known: {sorted(PRESETS)}") from None
