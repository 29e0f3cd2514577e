"""Sweep files: a grid of workloads x clusters x policies x fidelities x seeds, expanded into cells.

A sweep file is TOML (see ``docs/sweeps.md``)::

    name = "small"
    simulator = "sia"          # "sia" (Sia CSV workloads) or "slotted" (generated rigid Gavel-style jobs); both run in the one round loop
    seeds = [0, 1]
    jobs = 40                  # optional: only the first N jobs of each workload
    max_hours = 200            # optional: stop each simulation after this many simulated hours
    round = 60                 # optional: round length in seconds (default: the policy's own)

    [[workloads]]
    bundled = ["philly/workload-1", "saturn/workload-1"]
    [[clusters]]
    preset = "sia-64"
    scale = 2                  # optional: every GPU count x 2
    [[policies]]
    name = "sia"
    label = "sia-lp"           # optional
    options = { mode = "lp-round" }
    [[fidelities]]             # sia simulator only; default: the Sia artifact's
    preset = "ideal"

Every cell is a frozen :class:`CellSpec`; its :attr:`~CellSpec.key` hashes every input
(including the contents of workload and cluster files), so a finished cell is found again
on a rerun and a changed input makes a new cell.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import itertools
import json
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from heteroplan.cluster import PRESETS, Cluster, preset
from heteroplan.errors import InputError
from heteroplan.inputs import (
    MAX_GENERATED_JOBS,
    MIN_ROUND_S,
    enum_choice,
    is_count,
    read_text,
    real_value,
)
from heteroplan.names import a_path, path_component
from heteroplan.schema import Number, Plain, Seq, Text, decode, naming_file
from heteroplan.sim.fidelity import FidelityPreset, SimFidelity
from heteroplan.workload.sia import BUNDLED_WORKLOADS, is_bundled_workload

if TYPE_CHECKING:  # pragma: no cover
    from heteroplan.policies.base import Policy

__all__ = [
    "SimulatorKind",
    "WorkloadSource",
    "ClusterSource",
    "CellSpec",
    "ClusterSpec",
    "FidelitySpec",
    "PolicySpec",
    "SweepSpec",
    "WorkloadSpec",
    "load_sweep",
    "parse_sweep",
]

class WorkloadSource(StrEnum):
    """Where a sweep's workload comes from (the sweep file's ``bundled``, ``file`` or ``generate`` key)."""

    BUNDLED = "bundled"
    FILE = "file"
    GENERATED = "generated"


class ClusterSource(StrEnum):
    """Where a sweep's cluster comes from (the sweep file's ``preset`` or ``file`` key)."""

    PRESET = "preset"
    FILE = "file"


class SimulatorKind(StrEnum):
    """The workloads a sweep simulates (both run in the one round loop)."""

    SIA = "sia"  # Sia CSV workloads (goodput ground truth)
    SLOTTED = "slotted"  # generated rigid Gavel-style jobs in slots


Options = tuple[tuple[str, Any], ...]
_TOP_KEYS = {"name", "simulator", "seeds", "jobs", "max_hours", "round", "workloads", "clusters", "policies",
             "fidelities"}
_GENERATE_KEYS = {"jobs", "rate", "multi_gpu", "duration_scale"}
MAX_CELLS = 100_000  # simulations in one sweep: more is a typo (a seeds array of a million)
MAX_TABLES = 1_000  # [[workloads]], [[clusters]], [[policies]] or [[fidelities]] tables of one sweep
MAX_HOURS = 10 * 365 * 24.0  # simulated hours of one cell (ten years)
MAX_ROUND_S = 7 * 86_400.0  # a scheduling round (a week)

# The fields of a sweep file that are single values, each checked by one spec (heteroplan.schema).
_SEEDS = Seq(Number(low=0, high=2 ** 63 - 1, integer=True), 1, 100 * MAX_CELLS)  # MAX_CELLS bounds the grid
_FIELDS = {"simulator": Text(choices=tuple(k.value for k in SimulatorKind)), "jobs": Number(low=1, high=1_000_000, integer=True, unit="jobs"),
           "max_hours": Number(above=0, high=MAX_HOURS, unit="hours"),
           "round": Number(above=0, high=MAX_ROUND_S, unit="seconds")}
_LABEL = Text()
_OPTIONS = Plain()


def _options(field_name: str, value: object) -> Options:
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise InputError(field_name, value, "must be a table of option = value")
    return tuple(sorted((str(k), _plain(f"{field_name}.{k}", v)) for k, v in value.items()))


def _plain(field_name: str, value: object) -> Any:
    """``value`` as JSON data (lists for arrays; finite numbers, bounded strings and nesting), so
    cells hash and pickle the same everywhere."""
    return decode(_OPTIONS, value, field_name)


def _digest(field_name: str, path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    except OSError as exc:
        raise InputError(field_name, str(path), f"cannot read: {exc.strerror or exc}") from None


@dataclass(frozen=True)
class WorkloadSpec:
    """One workload: ``kind`` (:class:`WorkloadSource`) is ``"bundled"`` (``name`` = e.g.
    ``philly/workload-3``), ``"file"`` (``name`` = a Sia workload CSV path) or ``"generated"``
    (``name`` = ``"gavel"``: Gavel-style jobs drawn with the cell's seed; ``params``: jobs, rate
    jobs/h, multi_gpu, duration_scale)."""

    kind: WorkloadSource
    name: str
    family: str
    params: Options = ()
    digest: str = ""

    @property
    def label(self) -> str:
        if self.kind == WorkloadSource.GENERATED:
            return f"{self.name}(" + ",".join(f"{k}={v}" for k, v in self.params) + ")"
        return self.name


@dataclass(frozen=True)
class ClusterSpec:
    """A cluster preset or JSON file (``kind``, :class:`ClusterSource`: ``"preset"``/``"file"``),
    every GPU count x ``scale``."""

    kind: ClusterSource
    name: str
    scale: float = 1.0
    digest: str = ""

    @property
    def label(self) -> str:
        base = Path(self.name).stem if self.kind == ClusterSource.FILE else self.name
        return base if self.scale == 1 else f"{base}x{self.scale:g}"

    def build(self) -> Cluster:
        """The cluster: the preset or JSON file, every (type, zone) GPU count x ``scale``."""
        cluster = preset(self.name) if self.kind == ClusterSource.PRESET else Cluster.from_json(self.name)
        if self.scale == 1:
            return cluster
        counts = {key: max(1, round(n * self.scale)) for key, n in cluster.capacity_by_zone().items()}
        return Cluster.from_counts(cluster.gpu_types, counts, self.label, cluster.zones)


@dataclass(frozen=True)
class PolicySpec:
    """A policy by registry name, with constructor options; ``label`` names it in the results."""

    name: str
    label: str
    options: Options = ()

    def build(self) -> Policy:
        """A fresh policy from the registry, named by ``label``; :class:`InputError` for an unknown
        name (field ``policy``) or option (field ``policy.options.<option>``).

        Names are :data:`heteroplan.policies.registry.POLICIES`; options are the policy's
        constructor keywords but private ones (``round_length`` and ``restart_delay_s`` are
        understood by every policy; ``mechanism`` by those whose class carries one: it picks the
        class, whose keywords then count).
        """
        from heteroplan.policies.registry import make_policy

        default = make_policy(self.name, **{k: v for k, v in self.options if k == "mechanism"})  # it picks the class
        cls = type(default)
        accepted = ({k for k in inspect.signature(cls).parameters if not k.startswith("_")}  # not a private field
                    | {"round_length", "restart_delay_s"} | ({"mechanism"} if hasattr(cls, "MECHANISM") else set()))
        accepted -= {"self"}
        for k, v in self.options:
            if k not in accepted:
                raise InputError(f"policy.options.{k}", v, f"{self.name} has no such option; known: {sorted(accepted)}")
        try:
            policy = make_policy(self.name, **dict(self.options)) if self.options else default
        except InputError as exc:  # the registry names its field policy[<name>].options
            prefix = f"policy[{self.name}]"
            if not exc.field.startswith(prefix):
                raise
            raise InputError("policy" + exc.field[len(prefix):], exc.value, exc.reason) from None
        policy.name = self.label
        return policy


@dataclass(frozen=True)
class FidelitySpec:
    """Simulator fidelity (sia simulator): ``preset`` ``"sia"`` or ``"ideal"`` plus field overrides."""

    label: str = "sia"
    preset: FidelityPreset = FidelityPreset.SIA
    overrides: Options = ()

    def build(self) -> SimFidelity:
        """The preset with the overrides applied (every field the preset sets is kept)."""
        base = SimFidelity.preset(self.preset)
        return dataclasses.replace(base, **dict(self.overrides))


@dataclass(frozen=True)
class CellSpec:
    """One simulation of the grid; everything a worker needs, as plain data.

    Attributes:
        simulator: :class:`SimulatorKind` (``"sia"`` or ``"slotted"``).
        seed: workload generation seed (generated workloads) and simulator seed.
        jobs: only the first ``jobs`` jobs of the workload (``None``: all).
        max_hours: simulated-time limit (hours), ``None`` for none.
        round_length: seconds per round (``None``: the policy's own / 360 s slotted).
    """

    simulator: SimulatorKind
    workload: WorkloadSpec
    cluster: ClusterSpec
    policy: PolicySpec
    fidelity: FidelitySpec
    seed: int
    jobs: int | None = None
    max_hours: float | None = None
    round_length: float | None = None

    def __post_init__(self) -> None:  # a cell made by hand: jobs=2.5 failed in the cell as a TypeError
        if not is_count(self.seed) or self.seed < 0:
            raise InputError("seed", self.seed, "must be an integer >= 0 (a random seed)")
        if self.jobs is not None and (not is_count(self.jobs) or self.jobs < 1):
            raise InputError("jobs", self.jobs, "must be an integer >= 1 or None")
        object.__setattr__(self, "seed", int(self.seed))  # np.int64 too: the key is JSON of the fields
        if self.jobs is not None:
            object.__setattr__(self, "jobs", int(self.jobs))

    def to_dict(self) -> dict[str, Any]:
        """Every input as JSON data (options as tables)."""
        return {
            "simulator": self.simulator,
            "workload": {"kind": self.workload.kind, "name": self.workload.name, "family": self.workload.family,
                         "params": dict(self.workload.params), "digest": self.workload.digest},
            "cluster": {"kind": self.cluster.kind, "name": self.cluster.name, "scale": self.cluster.scale,
                        "digest": self.cluster.digest},
            "policy": {"name": self.policy.name, "label": self.policy.label, "options": dict(self.policy.options)},
            "fidelity": {"label": self.fidelity.label, "preset": self.fidelity.preset,
                         "overrides": dict(self.fidelity.overrides)},
            "seed": self.seed,
            "jobs": self.jobs,
            "max_hours": self.max_hours,
            "round_length": self.round_length,
        }

    @property
    def key(self) -> str:
        """A 16-hex-digit hash of every input: the cell's file name in the result store."""
        blob = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def labels(self) -> dict[str, Any]:
        """The columns that identify the cell in the results table."""
        return {"simulator": self.simulator, "workload": self.workload.label, "family": self.workload.family,
                "cluster": self.cluster.label, "policy": self.policy.label, "fidelity": self.fidelity.label,
                "seed": self.seed}


@dataclass(frozen=True)
class SweepSpec:
    """A parsed sweep: the grid's axes; :meth:`cells` expands them (workload-major order)."""

    name: str
    simulator: SimulatorKind
    workloads: tuple[WorkloadSpec, ...]
    clusters: tuple[ClusterSpec, ...]
    policies: tuple[PolicySpec, ...]
    fidelities: tuple[FidelitySpec, ...]
    seeds: tuple[int, ...]
    jobs: int | None = None
    max_hours: float | None = None
    round_length: float | None = None
    source: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def cells(self) -> list[CellSpec]:
        grid = itertools.product(self.workloads, self.clusters, self.fidelities, self.seeds, self.policies)
        return [CellSpec(self.simulator, w, c, p, f, s, self.jobs, self.max_hours, self.round_length)
                for w, c, f, s, p in grid]


# ------------------------------------------------------------------ parsing
def load_sweep(path: str | Path) -> SweepSpec:
    """Read a sweep TOML file; relative workload/cluster paths are relative to the file. Errors
    are :class:`InputError` naming the file, the field and the value."""
    path = a_path("sweep", path)
    data = read_toml(path, "sweep")
    data.setdefault("name", path.stem)
    with naming_file(path):
        return parse_sweep(data, base=path.parent)


def read_toml(path: Path, field_name: str) -> dict[str, Any]:
    """The tables of the TOML file ``path``; unreadable, non-UTF-8 or invalid TOML (nested too
    deep, an integer of more than 4300 digits) is an :class:`InputError` naming ``field_name`` and the file."""
    text = read_text(path, field_name)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(field_name, str(path), f"not valid TOML: {exc}") from None
    except RecursionError:
        raise InputError(field_name, str(path), "not valid TOML: nested too deeply") from None
    except ValueError as exc:  # an integer of more than 4300 digits
        raise InputError(field_name, str(path), f"not valid TOML: {exc}") from None


def parse_sweep(data: Mapping[str, Any], base: str | Path = ".") -> SweepSpec:
    """Build a :class:`SweepSpec` from a sweep file's tables (a dict); :class:`InputError`
    names the first bad field (``policies[1].options.mode``) and its value."""
    if not isinstance(data, Mapping):
        raise InputError("sweep", data, "must be a table")
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise InputError(unknown[0], data[unknown[0]], f"unknown sweep field; known: {sorted(_TOP_KEYS)}")
    base = a_path("base", base)
    values = {key: decode(spec, data[key], key) for key, spec in _FIELDS.items() if key in data}
    simulator = SimulatorKind(values.get("simulator", SimulatorKind.SIA))
    seeds = data.get("seeds", [0])
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        seeds = [seeds]
    if not isinstance(seeds, list) or any(not isinstance(s, int) for s in seeds):  # 1.0 is no seed
        raise InputError("seeds", seeds, "must be a non-empty array of integers >= 0 (random seeds)")
    try:
        seeds = decode(_SEEDS, seeds, "seeds")
    except InputError as exc:
        raise InputError("seeds", exc.value, f"must be a non-empty array of integers >= 0 (random seeds): "
                         f"{exc.reason}") from None
    jobs = values.get("jobs")
    max_hours = None if values.get("max_hours") is None else float(values["max_hours"])
    round_length = None if values.get("round") is None else float(values["round"])
    if round_length is not None and round_length < MIN_ROUND_S:
        raise InputError("round", round_length, f"must be >= {MIN_ROUND_S:g} seconds (a scheduling round, not a time step)")
    name = _sweep_name(data.get("name", "sweep"))
    workloads = tuple(w for i, t in enumerate(_tables(data, "workloads")) for w in _workloads(i, t, simulator, base))
    clusters = tuple(_cluster(i, t, base) for i, t in enumerate(_tables(data, "clusters")))
    policies = tuple(_policy(i, t) for i, t in enumerate(_tables(data, "policies")))
    fid_tables = data.get("fidelities", [{}])
    if simulator is SimulatorKind.SLOTTED and "fidelities" in data:
        raise InputError("fidelities", fid_tables, "only the sia simulator has fidelity options")
    fidelities = tuple(_fidelity(i, t) for i, t in enumerate(_tables({"fidelities": fid_tables}, "fidelities")))
    cells = len(workloads) * len(clusters) * len(policies) * len(fidelities) * len(set(seeds))
    if cells > MAX_CELLS:
        raise InputError("sweep", f"{cells:,} cells", f"at most {MAX_CELLS:,} cells in one sweep; split it")
    for what, items in (("policies", [p.label for p in policies]), ("fidelities", [f.label for f in fidelities])):
        dup = sorted({x for x in items if items.count(x) > 1})
        if dup:
            raise InputError(f"{what}.label", dup[0], "labels must be unique (set label = ...)")
    return SweepSpec(name, simulator, workloads, clusters, policies, fidelities,
                     tuple(dict.fromkeys(seeds)), jobs, max_hours, round_length, dict(data))


def _sweep_name(value: object) -> str:
    """The sweep's name: one plain path component, as the default output folder ``sweeps/<name>``
    must stay inside ``sweeps/`` (``"../x"``, ``"/tmp/x"``, ``""`` and ``"."`` are refused)."""
    if isinstance(value, str) and value != value.strip():
        raise InputError("name", value, "must not start or end with spaces (it names the output folder sweeps/<name>)")
    return path_component("name", value)


def _positive(field_name: str, value: object) -> float | None:
    if value is None:
        return None
    number = real_value(value)  # NaN for a bool, a string and 10**400 (was an OverflowError from math.isfinite)
    if not (number > 0 and math.isfinite(number)):
        raise InputError(field_name, value, "must be a number > 0")
    return number


def _tables(data: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    tables = data.get(key)
    if not isinstance(tables, list) or not tables:
        raise InputError(key, tables, f"give at least one [[{key}]] table")
    if len(tables) > MAX_TABLES:
        raise InputError(key, f"{len(tables):,} tables", f"at most {MAX_TABLES:,} [[{key}]] tables")
    for i, t in enumerate(tables):
        if not isinstance(t, Mapping):
            raise InputError(f"{key}[{i}]", t, "must be a table")
    return tables


def _only(where: str, table: Mapping[str, Any], allowed: set[str]) -> None:
    extra = sorted(set(table) - allowed)
    if extra:
        raise InputError(f"{where}.{extra[0]}", table[extra[0]], f"unknown field; known: {sorted(allowed)}")


def _workloads(i: int, t: Mapping[str, Any], simulator: SimulatorKind, base: Path) -> list[WorkloadSpec]:
    where = f"workloads[{i}]"
    kinds = [k for k in ("bundled", "file", "generate") if k in t]
    if len(kinds) != 1:
        raise InputError(where, dict(t), "give exactly one of bundled = ..., file = ..., generate = ...")
    kind = kinds[0]
    family = t.get("family")
    if family is not None:
        decode(_LABEL, family, f"{where}.family")
    if kind == "generate":
        _only(where, t, {"generate", "family"} | _GENERATE_KEYS)
        if simulator is not SimulatorKind.SLOTTED:
            raise InputError(f"{where}.generate", t["generate"], "generated workloads need simulator = \"slotted\"")
        if t["generate"] != "gavel":
            raise InputError(f"{where}.generate", t["generate"], "the only generator is \"gavel\"")
        params = {k: _plain(f"{where}.{k}", t[k]) for k in sorted(_GENERATE_KEYS) if k in t}
        if "jobs" not in params:
            raise InputError(f"{where}.jobs", None, "say how many jobs to generate")
        if isinstance(params["jobs"], bool) or not isinstance(params["jobs"], int) or \
                not 1 <= params["jobs"] <= MAX_GENERATED_JOBS:
            raise InputError(f"{where}.jobs", params["jobs"], f"must be an integer in [1, {MAX_GENERATED_JOBS}]")
        for key in ("rate", "duration_scale"):
            if key in params:
                _positive(f"{where}.{key}", params[key])
        if not isinstance(params.get("multi_gpu", True), bool):
            raise InputError(f"{where}.multi_gpu", params["multi_gpu"], "must be true or false")
        return [WorkloadSpec(WorkloadSource.GENERATED, "gavel", family or "gavel", tuple(params.items()))]
    _only(where, t, {kind, "family"})
    if simulator is not SimulatorKind.SIA:
        raise InputError(f"{where}.{kind}", t[kind], "the slotted simulator takes generated workloads only")
    names = t[kind] if isinstance(t[kind], list) else [t[kind]]
    if not names or not all(isinstance(n, str) for n in names):
        raise InputError(f"{where}.{kind}", t[kind], "must be a string or an array of strings")
    decode(Seq(Text(max_len=4096), 1, MAX_TABLES), names, f"{where}.{kind}")
    out = []
    for n in names:
        if kind == "bundled":
            if not is_bundled_workload(n):
                raise InputError(f"{where}.bundled", n, f"unknown bundled workload; known: {list(BUNDLED_WORKLOADS)}"
                                                        " and newtrace/seed-<s>")
            out.append(WorkloadSpec(WorkloadSource.BUNDLED, n, family or n.split("/")[0]))
        else:
            path = (base / n).resolve()
            digest = _digest(f"{where}.file", path)
            _check_workload_file(f"{where}.file", path)
            out.append(WorkloadSpec(WorkloadSource.FILE, str(path), family or path.stem, (), digest))
    return out


def _check_workload_file(field_name: str, path: Path) -> None:
    """Read a workload CSV now, as its cells will (known applications, batch limits), so a bad
    row fails the sweep file before any output exists instead of failing every cell."""
    from heteroplan.perf.applications import APPLICATIONS
    from heteroplan.workload.sia import read_sia_workload

    limits = {name: app.max_batch_size for name, app in APPLICATIONS.items()}
    try:
        read_sia_workload(path, known_apps=set(APPLICATIONS), batch_limits=limits)
    except InputError as exc:
        raise InputError(f"{field_name}[{path.name}].{exc.field}", exc.value, exc.reason) from None


def _cluster(i: int, t: Mapping[str, Any], base: Path) -> ClusterSpec:
    where = f"clusters[{i}]"
    kinds = [k for k in ("preset", "file") if k in t]
    if len(kinds) != 1:
        raise InputError(where, dict(t), "give exactly one of preset = ... or file = ...")
    _only(where, t, {kinds[0], "scale"})
    scale = _positive(f"{where}.scale", t.get("scale", 1.0))
    assert scale is not None
    if "preset" in t:
        if not isinstance(t["preset"], str) or t["preset"] not in PRESETS:
            raise InputError(f"{where}.preset", t["preset"], f"unknown preset; known: {sorted(PRESETS)}")
        return _built(where, ClusterSpec(ClusterSource.PRESET, t["preset"], scale))
    if not isinstance(t["file"], str):
        raise InputError(f"{where}.file", t["file"], "must be a path")
    decode(Text(max_len=4096), t["file"], f"{where}.file")
    path = (base / t["file"]).resolve()
    return _built(where, ClusterSpec(ClusterSource.FILE, str(path), scale, _digest(f"{where}.file", path)))


def _built(where: str, spec: ClusterSpec) -> ClusterSpec:
    """``spec`` once its cluster builds (a bad file, a scale beyond the GPU limit fail here, before any cell runs)."""
    try:
        spec.build()
    except InputError as exc:
        raise InputError(f"{where}.{spec.kind}", spec.name, str(exc)) from None
    return spec


def _policy(i: int, t: Mapping[str, Any]) -> PolicySpec:
    where = f"policies[{i}]"
    _only(where, t, {"name", "label", "options"})
    name = t.get("name")
    if not isinstance(name, str):
        raise InputError(f"{where}.name", name, "must be a policy name")
    decode(_LABEL, name, f"{where}.name")
    options = _options(f"{where}.options", t.get("options"))
    label = t.get("label", name)
    if not isinstance(label, str) or not label:
        raise InputError(f"{where}.label", label, "must be a non-empty string")
    decode(_LABEL, label, f"{where}.label")
    spec = PolicySpec(name, label, options)
    try:
        spec.build()  # unknown names and options fail here, before any cell runs
    except InputError as exc:  # ours ("policy", "policy.options.x") or the constructor's ("slot")
        field = exc.field.removeprefix("policy").lstrip(".") if exc.field.startswith("policy") else \
            f"options.{exc.field}"
        raise InputError(f"{where}.{field or 'name'}", exc.value, exc.reason) from None
    except (TypeError, ValueError) as exc:  # a constructor refusing an option's type
        raise InputError(f"{where}.options", dict(options), f"{name} refused them: {exc}") from None
    return spec


def _fidelity(i: int, t: Mapping[str, Any]) -> FidelitySpec:
    where = f"fidelities[{i}]"
    _only(where, t, {"label", "preset", "slowdown", "batch_size", "grad_stats", "profiling_time", "restart_delay_s",
                     "profiles"})
    preset = enum_choice(FidelityPreset, f"{where}.preset", t.get("preset", FidelityPreset.SIA))
    overrides = _options(where, {k: v for k, v in t.items() if k not in ("label", "preset")})
    default = preset + ("(" + ",".join(f"{k}={v}" for k, v in overrides) + ")" if overrides else "")
    if "label" in t:
        decode(_LABEL, t["label"], f"{where}.label")
    spec = FidelitySpec(str(t.get("label", default)), preset, overrides)
    try:
        spec.build()
    except InputError as exc:
        raise InputError(f"{where}.{exc.field.removeprefix('fidelity.')}", exc.value, exc.reason) from None
    return spec

