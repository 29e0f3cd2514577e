"""Network model for the Sailor planner: fitted bandwidth curves and egress prices.

A curve maps a message size to bandwidth: with ``L = log2(bytes / 1e6)``,
``bw = a*L^2 + b*L + c`` GB/s, capped by the measured maximum (the second number of each
entry, bytes/s). ``L`` is clipped to ``[0, vertex]`` (messages under 1 MB see the 1 MB
bandwidth; past the parabola's peak the bandwidth stays at the peak). Curves are given per
number ``k`` of GPUs of a node that send at once; ``bw`` is the node's aggregate, so one GPU
gets ``bw / k``.

Sources: ``network_coeffs_all_homo.json`` (between nodes of one type in one zone),
``multizone_bandwidths_het.json`` (any pair of (zone, type, k)), ``communication_cost.json``
(egress $/GB between zones). ``load_network(data_dir)`` reads these files from a user
directory (e.g. written by :func:`heteroplan.runtime.netbench.measure_network`), falling back
to the shipped file for any file the directory lacks.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from heteroplan.errors import InputError
from heteroplan.inputs import read_json
from heteroplan.perf.sailor_profiles import DATA_DIR, resolve_data_dir
from heteroplan.schema import IntKey, Number, Pair, Record, Table, Text, decode, naming_file

__all__ = ["BandwidthCurve", "NetworkModel", "load_network", "NETWORK_FILES"]

NETWORK_FILES = ("network_coeffs_all_homo.json", "multizone_bandwidths_het.json", "communication_cost.json")

MAX_SENDERS = 1024  # GPUs of one node sending at once
MAX_BYTES_PER_S = 1e15  # a link's measured maximum (bytes/s): a petabyte per second is a unit error
MAX_EGRESS_PER_GB = 1000.0  # $/GB between zones

_COEFF = Number(low=-1e6, high=1e6)
_CURVE = Pair((Pair((_COEFF, _COEFF, Number(above=0, high=1e6, unit="GB/s at 1 MB"))),
               Number(above=0, high=MAX_BYTES_PER_S, unit="bytes/s")))
_BY_SENDERS = Table(_CURVE, IntKey(1, MAX_SENDERS, "GPUs sending"), 1, 64)
_BY_TYPE = Table(_BY_SENDERS, Text(), 0, 10_000)
HOMO_FILE = Record({"inter": _BY_TYPE}, {"intra": _BY_TYPE})
"""``network_coeffs_all_homo.json``: ``{"inter" (, "intra"): {gpu_type: {k: [[a, b, c], cap_bytes_s]}}}``."""
MULTIZONE_FILE = Table(Table(Table(Table(Table(_BY_SENDERS, Text(), 0, 10_000), Text(), 0, 10_000),
                                   IntKey(1, MAX_SENDERS, "GPUs sending"), 1, 64), Text(), 0, 10_000), Text(), 0, 10_000)
"""``multizone_bandwidths_het.json``: ``{zone: {gpu_type: {k: {zone: {gpu_type: {k: curve}}}}}}``."""
EGRESS_FILE = Table(Table(Number(low=0, high=MAX_EGRESS_PER_GB, unit="$/GB"), Text(), 0, 10_000), Text(), 0, 10_000)
"""``communication_cost.json``: ``{zone: {zone: $/GB}}``, prices finite and >= 0."""


@dataclass(frozen=True)
class BandwidthCurve:
    """``bw(bytes)`` in GB/s of a link (aggregate of ``k`` sending GPUs)."""

    a: float
    b: float
    c: float
    cap_gbs: float

    @classmethod
    def from_entry(cls, entry: list) -> BandwidthCurve:
        (a, b, c), cap = entry
        return cls(float(a), float(b), float(c), float(cap) / 1e9)

    def bandwidth(self, nbytes: np.ndarray | float) -> np.ndarray:
        """GB/s for messages of ``nbytes`` bytes (vectorized)."""
        lg = np.log2(np.maximum(np.asarray(nbytes, dtype=float), 1.0) / 1e6)
        hi = -self.b / (2 * self.a) if self.a < 0 else np.inf
        lg = np.clip(lg, 0.0, max(hi, 0.0))
        bw = self.a * lg * lg + self.b * lg + self.c
        return np.clip(bw, 1e-3, self.cap_gbs)


def _k_key(table: dict, k: int) -> str:
    keys = sorted(int(x) for x in table)
    usable = [x for x in keys if x <= k]
    return str(usable[-1] if usable else keys[0])


class NetworkModel:
    """Per-GPU bandwidth between two (GPU type, zone) endpoints, and egress prices."""

    def __init__(self, homo: dict, multizone: dict, egress: dict) -> None:
        self._homo = homo
        self._multi = multizone
        self._egress = egress
        self._cache: dict[tuple, BandwidthCurve] = {}

    @property
    def zones(self) -> tuple[str, ...]:
        return tuple(self._egress)

    def curve(self, src: tuple[str, str], dst: tuple[str, str], k: int = 1) -> BandwidthCurve:
        """Curve of the link between nodes ``src=(type, zone)`` and ``dst``, ``k`` GPUs per node sending."""
        key = (src, dst, k)
        if key in self._cache:
            return self._cache[key]
        (t1, z1), (t2, z2) = src, dst
        entry = None
        try:
            row = self._multi[z1][t1]
            entry = row[_k_key(row, k)][z2][t2]
            entry = entry[_k_key(entry, k)]
        except KeyError:
            entry = None
        if entry is None or (t1 == t2 and z1 == z2):
            if z1 != z2 and entry is None:
                raise InputError("zone", (z1, z2), "no bandwidth measurements between these zones")
            homo = self._homo["inter"]
            cands = [homo[t][_k_key(homo[t], k)] for t in {t1, t2} if t in homo]
            if not cands and entry is None:
                raise InputError("gpu_type", (t1, t2), "no bandwidth measurements for this GPU type")
            if cands:
                curves = [BandwidthCurve.from_entry(c) for c in cands]
                curve = min(curves, key=lambda cv: float(cv.bandwidth(1e8)))
                self._cache[key] = curve
                return curve
        curve = BandwidthCurve.from_entry(entry)
        self._cache[key] = curve
        return curve

    def per_gpu_bandwidth(self, src: tuple[str, str], dst: tuple[str, str], k: int, nbytes: float) -> float:
        """GB/s one GPU gets when ``k`` GPUs per node each send ``nbytes`` over this link."""
        return float(self.curve(src, dst, k).bandwidth(nbytes)) / k

    def egress_per_gb(self, z1: str, z2: str) -> float:
        """Egress price ($/GB) from zone ``z1`` to ``z2`` (0 inside a zone)."""
        if z1 == z2:
            return 0.0
        try:
            return float(self._egress[z1][z2])
        except KeyError:
            raise InputError("zone", (z1, z2), f"no egress price; known zones: {list(self._egress)}") from None


def load_network(data_dir: str | Path | None = None) -> NetworkModel:
    """The network model of ``data_dir``; default: the shipped GCP model (5 zones in us-central1 / us-west1).

    Each of :data:`NETWORK_FILES` is read from ``data_dir`` when there, else from the shipped data.
    Cached per directory; reloaded when one of its files changes.
    """
    root = resolve_data_dir(data_dir)
    paths = tuple(root / n if (root / n).is_file() else DATA_DIR / n for n in NETWORK_FILES)
    stamp = tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in paths)
    return _load_network(stamp)


@lru_cache(maxsize=8)
def _load_network(stamp: tuple) -> NetworkModel:
    files = []
    for (path, _, _), spec in zip(stamp, (HOMO_FILE, MULTIZONE_FILE, EGRESS_FILE), strict=True):
        with naming_file(path):
            data = read_json(path, "network file")
            decode(spec, data, Path(path).stem)  # types, bounds, positive bandwidths, prices >= 0
        files.append(data)
    homo, multi, egress = files
    try:
        return NetworkModel(homo, multi, egress)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:  # a file of another shape
        raise InputError("network files", [path for path, _, _ in stamp],
                         f"malformed ({type(exc).__name__}: {exc}); regenerate them with `heteroplan profile`") from None
