"""Point-to-point bandwidth of this machine's processes, fitted to the planner's network curve.

:func:`measure_network` spawns ``world_size`` local processes (``torch.multiprocessing``, spawn,
TCP rendezvous on a free port) that ping-pong messages of each size between rank 0 and every
other rank with ``torch.distributed`` send/recv. The one-way time of a message is half a round
trip; bandwidth = bytes / one-way time (GB/s, 1 GB = 1e9 bytes), the slowest peer per size.

:func:`fit_bandwidth_curve` fits Sailor's curve ``bw = a L^2 + b L + c`` GB/s with
``L = log2(bytes / 1e6)`` (numpy least squares on messages of at least 1 MB, where the planner
evaluates the curve) and the cap (largest measured bandwidth, bytes/s).
:meth:`NetworkMeasurement.write` stores it as one zone of the planner's network files
(:mod:`heteroplan.perf.sailor_network`). torch is imported only inside the measurement.
"""

from __future__ import annotations

import json
import socket
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from heteroplan.atomic_json import write_json_atomic
from heteroplan.errors import InputError, check_int, check_int_list
from heteroplan.inputs import check_process_count, check_wait, enum_choice, read_json
from heteroplan.perf.sailor_network import EGRESS_FILE, HOMO_FILE, MULTIZONE_FILE, BandwidthCurve
from heteroplan.run_options import CommBackend
from heteroplan.runtime._networker import ping_pong
from heteroplan.schema import decode, naming_file

NETWORK_SPECS = {"network_coeffs_all_homo.json": HOMO_FILE, "multizone_bandwidths_het.json": MULTIZONE_FILE,
                 "communication_cost.json": EGRESS_FILE}

__all__ = ["DEFAULT_SIZES", "NetworkMeasurement", "fit_bandwidth_curve", "measure_network"]

DEFAULT_SIZES = tuple(int(1e6) << k for k in range(6))  # 1, 2, 4, 8, 16, 32 MB


def fit_bandwidth_curve(sizes_bytes: Sequence[float], bandwidth_gbs: Sequence[float]) -> tuple[tuple[float, float, float], float]:
    """Least-squares ``(a, b, c)`` of ``bw = a L^2 + b L + c`` (GB/s, ``L = log2(bytes/1e6)``) and the cap (bytes/s).

    Only messages of at least 1 MB enter the fit (the planner clips smaller ones to 1 MB);
    at least 3 distinct such sizes are needed. The cap is the largest measured bandwidth.
    """
    x = np.asarray(sizes_bytes, dtype=float)
    y = np.asarray(bandwidth_gbs, dtype=float)
    if x.ndim != 1 or x.shape != y.shape or x.size == 0:
        raise InputError("sizes_bytes", x.shape, f"need two equal-length 1-D sequences (bandwidths: {y.shape})")
    if not (np.all(np.isfinite(x)) and np.all(x > 0)):
        raise InputError("sizes_bytes", x.tolist(), "must be positive finite byte counts")
    if not (np.all(np.isfinite(y)) and np.all(y > 0)):
        raise InputError("bandwidth_gbs", y.tolist(), "must be positive finite GB/s")
    keep = x >= 1e6
    lg = np.log2(x[keep] / 1e6)
    if np.unique(lg).size < 3:
        raise InputError("sizes_bytes", x.tolist(), "need at least 3 distinct message sizes >= 1e6 bytes to fit the curve")
    A = np.stack([lg * lg, lg, np.ones_like(lg)], axis=1)
    (a, b, c), *_ = np.linalg.lstsq(A, y[keep], rcond=None)
    return (float(a), float(b), float(c)), float(y.max() * 1e9)


@dataclass(frozen=True)
class NetworkMeasurement:
    """Measured bandwidth per message size and the fitted curve.

    Attributes:
        sizes_bytes: message sizes (bytes).
        bandwidth_gbs: bandwidth per size (GB/s), slowest peer of rank 0.
        latency_s: one-way seconds per size (median of repeats, slowest peer).
        coeffs: ``(a, b, c)`` of the fitted curve (GB/s in ``L = log2(bytes/1e6)``).
        cap_bytes_per_s: largest measured bandwidth (bytes/s).
        backend: torch.distributed backend used.
        world_size: processes spawned.
    """

    sizes_bytes: tuple[int, ...]
    bandwidth_gbs: tuple[float, ...]
    latency_s: tuple[float, ...]
    coeffs: tuple[float, float, float]
    cap_bytes_per_s: float
    backend: str = "gloo"
    world_size: int = 2

    def entry(self) -> list:
        """``[[a, b, c], cap_bytes_per_s]``, one curve in Sailor's file format."""
        return [list(self.coeffs), self.cap_bytes_per_s]

    def curve(self) -> BandwidthCurve:
        return BandwidthCurve.from_entry(self.entry())

    def write(self, data_dir: str | Path, gpu_type: str, zone: str = "local") -> Path:
        """Add this curve for ``gpu_type`` in ``zone`` to the network files of ``data_dir``.

        Writes (merging with files already there) ``network_coeffs_all_homo.json``
        (``inter[gpu_type]["1"]``), ``multizone_bandwidths_het.json`` (``zone, gpu_type`` to
        itself) and ``communication_cost.json`` (0 $/GB inside ``zone``). Returns ``data_dir``.
        """
        for name, value in (("gpu_type", gpu_type), ("zone", zone)):
            if not isinstance(value, str) or not value.strip():
                raise InputError(name, value, "must be a non-empty string")
        root = Path(data_dir).expanduser()

        def read(name: str) -> dict:
            """The file already there, checked by its format's spec (a hostile file is not merged)."""
            path = root / name
            if not path.is_file():
                return {}
            with naming_file(path):
                data = read_json(path, "data_dir")
                decode(NETWORK_SPECS[name], data, path.stem)
            return data

        entry = self.entry()
        homo = read("network_coeffs_all_homo.json")
        homo.setdefault("inter", {})[gpu_type] = {"1": entry}
        homo.setdefault("intra", {})
        multi = read("multizone_bandwidths_het.json")
        multi.setdefault(zone, {}).setdefault(gpu_type, {}).setdefault("1", {}).setdefault(zone, {})[gpu_type] = {"1": entry}
        egress = read("communication_cost.json")
        egress.setdefault(zone, {})[zone] = 0.0
        write_json_atomic(root / "network_coeffs_all_homo.json", homo, root=root)
        write_json_atomic(root / "multizone_bandwidths_het.json", multi, root=root)
        write_json_atomic(root / "communication_cost.json", egress, root=root)
        return root

    def table(self) -> str:
        lines = ["     bytes   one-way ms   GB/s   fitted GB/s"]
        fitted = self.curve().bandwidth(np.asarray(self.sizes_bytes, dtype=float))
        for s, t, bw, f in zip(self.sizes_bytes, self.latency_s, self.bandwidth_gbs, fitted, strict=True):
            lines.append(f"{s:>10d} {1e3 * t:>12.4g} {bw:>6.3g} {f:>13.3g}")
        a, b, c = self.coeffs
        lines.append(f"curve: bw = {a:.4g} L^2 + {b:.4g} L + {c:.4g} GB/s, cap {self.cap_bytes_per_s / 1e9:.4g} GB/s")
        return "\n".join(lines)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (for a rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def measure_network(
    world_size: int = 2,
    sizes: Sequence[int] = DEFAULT_SIZES,
    backend: CommBackend | str = CommBackend.GLOO,
    warmup: int = 1,
    repeats: int = 5,
    timeout_s: float = 120.0,
) -> NetworkMeasurement:
    """Spawn ``world_size`` local processes and measure send/recv bandwidth per message size (bytes).

    Raises InputError on bad arguments and TimeoutError when the processes do not finish in
    ``timeout_s`` seconds (they are terminated).
    """
    check_int("world_size", world_size, 2)
    check_process_count("world_size", world_size)
    backend = enum_choice(CommBackend, "backend", backend)
    sizes_t = check_int_list("sizes", sizes, 4, "message sizes in bytes")
    check_int("warmup", warmup, 0)
    check_int("repeats", repeats, 1)
    check_wait("timeout_s", timeout_s)
    fit_bandwidth_curve(sizes_t, [1.0] * len(sizes_t))  # enough sizes >= 1 MB? (fails early, before spawning)
    import torch
    import torch.multiprocessing as mp

    if backend is CommBackend.NCCL and torch.cuda.device_count() < world_size:
        raise InputError("backend", backend, f"nccl needs {world_size} CUDA devices, found {torch.cuda.device_count()}")
    with tempfile.TemporaryDirectory(prefix="heteroplan-net-") as tmp:
        out = Path(tmp) / "result.json"
        args = (world_size, free_port(), backend, sizes_t, warmup, repeats, str(out), float(timeout_s))
        ctx = mp.start_processes(ping_pong, args=args, nprocs=world_size, join=False, start_method="spawn")
        deadline = time.monotonic() + timeout_s
        try:
            while not ctx.join(timeout=max(deadline - time.monotonic(), 0.01)):
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"measure_network: {world_size} processes did not finish in {timeout_s} s")
        finally:
            for p in ctx.processes:
                if p.is_alive():
                    p.terminate()
                    p.join(5)
        one_way = json.loads(out.read_text())
    lat = tuple(max(one_way[str(s)]) for s in sizes_t)
    bw = tuple(s / t / 1e9 for s, t in zip(sizes_t, lat, strict=True))
    coeffs, cap = fit_bandwidth_curve(sizes_t, bw)
    return NetworkMeasurement(sizes_t, bw, lat, coeffs, cap, backend, world_size)
