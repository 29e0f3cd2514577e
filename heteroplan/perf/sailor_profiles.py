"""Layer profiles and model sizes for the Sailor planner.

Data (from Sailor's artifact, shipped under ``heteroplan/data/sailor``):

- ``profiles/<model>/<gpu>.json``: ``{mbs: {tp: {layer: [fwd_s, bwd_s, update_s]}}}`` — measured
  seconds per microbatch for one layer on one GPU of a tensor-parallel group of size ``tp``.
- ``llm_info.json``: per model, tp and layer: parameters and activation sizes (floats, mbs 1).

A user directory with the same layout (written by :mod:`heteroplan.runtime.profiler`) is read
instead of the shipped data when ``data_dir`` is given.

Everything is turned into numpy arrays with prefix sums, so the cost of a stage covering
layers ``[a, b)`` is ``prefix[b] - prefix[a]`` — O(1) and vectorizable over many ranges.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path

import numpy as np

from heteroplan.errors import InputError
from heteroplan.inputs import read_json

__all__ = ["DATA_DIR", "MeasuredMemory", "ModelProfile", "available_models", "load_model_profile", "resolve_data_dir"]

DATA_DIR = Path(str(resources.files("heteroplan") / "data" / "sailor"))


def _prefix(values: np.ndarray) -> np.ndarray:
    """Prefix sums along the last axis with a leading 0: ``out[..., b] - out[..., a] = sum values[..., a:b]``."""
    pad = np.zeros(values.shape[:-1] + (1,))
    return np.concatenate([pad, np.cumsum(values, axis=-1)], axis=-1)


@dataclass(frozen=True, eq=False)
class MeasuredMemory:
    """Bytes a profiler measured per layer, ``{tp: array (L,)}`` each (per GPU of the TP group).

    Attributes:
        act_input: the layer's input per sample (what a recomputed layer keeps).
        act_output: the layer's output per sample (its gradient is alive during the layer's backward).
        act_saved: saved for backward per sample; ``act_saved_fixed`` per microbatch (bf16 weight casts).
        bwd_working: the backward's transient peak per sample; ``bwd_working_fixed`` per microbatch.
        update_working: the optimizer step's transient bytes (0 for the runtime's fused step).
        loss_saved: per sample, what the loss saves of the model's output (last layer; kept outside
            a recomputed layer).
        optimizer_state_per_param: bytes of optimizer state per parameter (Adam 8, SGD 0).
        overhead: bytes the device holds besides the model's tensors (CUDA: cuBLAS workspaces).
        precision: what the profile was measured in (``"fp32"``, ``"tf32"``, ``"bf16"``).
        param_tensors: ``{tp: per layer, the elements of each parameter tensor}`` where the
            profile recorded them (how ZeRO-1 partitions a stage's state; empty: unknown).
    """

    act_input: dict[int, np.ndarray]
    act_output: dict[int, np.ndarray]
    act_saved: dict[int, np.ndarray]
    act_saved_fixed: dict[int, np.ndarray]
    bwd_working: dict[int, np.ndarray]
    bwd_working_fixed: dict[int, np.ndarray]
    update_working: dict[int, np.ndarray]
    loss_saved: dict[int, np.ndarray]
    optimizer_state_per_param: float
    overhead: float
    precision: str
    param_tensors: dict[int, tuple[tuple[int, ...], ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelProfile:
    """Per-layer sizes and compute times of one model.

    Attributes:
        name: model name (``"OPT-350"``).
        num_layers: layers, including embedding and head.
        params: ``{tp: floats per GPU per layer}`` (shape ``(L,)``).
        act_out: ``{tp: floats of a layer's output activation at microbatch 1}``.
        act_mem: ``{tp: floats of activation memory kept for backward at microbatch 1}``.
        compute: ``{(gpu, mbs, tp): array (3, L)}`` fwd, bwd, optimizer-update seconds.
        recomputed: ``{(gpu, mbs, tp): array (3, L)}`` fwd, bwd, update seconds with every layer
            recomputed in its backward, where the profiler timed it (``time_recomputed``).
        measured: the memory :func:`heteroplan.runtime.profiler.profile_layers` measured (bytes;
            ``None`` for Sailor's shipped data, whose memory the calibrated constants model).
        forward_flops: per layer, the whole layer's forward FLOPs per sample the profiler counted
            (from the TP-1 entry); ``None`` where the profile has no counts (Sailor's shipped data,
            profiles written before the count).
    """

    name: str
    num_layers: int
    params: dict[int, np.ndarray]
    act_out: dict[int, np.ndarray]
    act_mem: dict[int, np.ndarray]
    compute: dict[tuple[str, int, int], np.ndarray]
    measured: MeasuredMemory | None = None
    recomputed: dict[tuple[str, int, int], np.ndarray] = field(default_factory=dict)
    forward_flops: tuple[float, ...] | None = None
    _prefix: dict[object, np.ndarray] = field(default_factory=dict, repr=False, compare=False)

    # ---------------------------------------------------------------- queries
    @property
    def gpu_types(self) -> tuple[str, ...]:
        return tuple(sorted({k[0] for k in self.compute}))

    def microbatch_sizes(self, gpu: str) -> tuple[int, ...]:
        return tuple(sorted({k[1] for k in self.compute if k[0] == gpu}))

    def tp_degrees(self, gpu: str, mbs: int) -> tuple[int, ...]:
        return tuple(sorted(k[2] for k in self.compute if k[0] == gpu and k[1] == mbs and k[2] in self.params))

    def has(self, gpu: str, mbs: int, tp: int) -> bool:
        return (gpu, mbs, tp) in self.compute and tp in self.params

    def compute_prefix(self, gpu: str, mbs: int, tp: int, recomputed: bool = False) -> np.ndarray:
        """Prefix sums ``(3, L+1)`` of fwd, bwd, update seconds per microbatch (``recomputed``: as
        timed with every layer recomputed; see :meth:`has_recomputed`)."""
        key = ("c", gpu, mbs, tp, recomputed)
        if key not in self._prefix:
            if not self.has(gpu, mbs, tp) or (recomputed and not self.has_recomputed(gpu, mbs, tp)):
                raise InputError("profile", (self.name, gpu, mbs, tp), "no profile for this GPU type, microbatch size and TP")
            self._prefix[key] = _prefix((self.recomputed if recomputed else self.compute)[(gpu, mbs, tp)])
        return self._prefix[key]

    def has_recomputed(self, gpu: str, mbs: int, tp: int) -> bool:
        """Whether the profiler timed these layers recomputed (else the planner prices them)."""
        return (gpu, mbs, tp) in self.recomputed

    def size_prefix(self, tp: int) -> np.ndarray:
        """Prefix sums ``(2, L+1)`` of parameter floats and activation-memory floats (mbs 1) per GPU."""
        key = ("s", tp)
        if key not in self._prefix:
            if tp not in self.params:
                raise InputError("tp", tp, f"{self.name} has sizes for tp in {sorted(self.params)}")
            self._prefix[key] = _prefix(np.stack([self.params[tp], self.act_mem[tp]]))
        return self._prefix[key]

    def stage_compute(self, gpu: str, mbs: int, tp: int, first: int, last: int) -> tuple[float, float, float]:
        """(fwd, bwd, update) seconds per microbatch of layers ``[first, last)``."""
        p = self.compute_prefix(gpu, mbs, tp)
        f, b, u = p[:, last] - p[:, first]
        return float(f), float(b), float(u)

    def stage_sizes(self, tp: int, first: int, last: int) -> tuple[float, float]:
        """(parameter floats, activation-memory floats at mbs 1) per GPU of layers ``[first, last)``."""
        p = self.size_prefix(tp)
        return float(p[0, last] - p[0, first]), float(p[1, last] - p[1, first])


def resolve_data_dir(data_dir: str | Path | None) -> Path:
    """The shipped data directory when ``data_dir`` is None, else ``data_dir`` (must exist)."""
    if data_dir is None:
        return DATA_DIR
    if not isinstance(data_dir, str | Path):
        raise InputError("data_dir", data_dir, "must be a path (str or pathlib.Path) or None")
    root = Path(data_dir).expanduser().resolve()
    if not root.is_dir():
        raise InputError("data_dir", str(data_dir), "not an existing directory")
    return root


def _stamp(paths: list[Path]) -> tuple:
    """(name, mtime_ns, size) of each existing file: changes when a file is rewritten."""
    out = []
    for path in paths:
        try:
            st = path.stat()
        except OSError:
            continue
        out.append((path.name, st.st_mtime_ns, st.st_size))
    return tuple(out)


def available_models(data_dir: str | Path | None = None) -> tuple[str, ...]:
    """Models with profiles in ``data_dir`` (default: the shipped data)."""
    profiles = resolve_data_dir(data_dir) / "profiles"
    if not profiles.is_dir():
        return ()
    return tuple(sorted(p.name for p in profiles.iterdir() if p.is_dir()))


@lru_cache(maxsize=8)
def _llm_info_at(root: str, stamp: tuple) -> dict:
    path = Path(root) / "llm_info.json"
    if not path.is_file():
        return {}
    info = read_json(path, "llm_info.json")  # InputError: truncated, not UTF-8, nested too deep
    if not isinstance(info, dict):
        raise InputError("llm_info.json", str(path), f"must be a JSON object {{model: ...}}, not {type(info).__name__}")
    return info


def _llm_info(data_dir: str | Path | None = None) -> dict:
    root = resolve_data_dir(data_dir)
    return _llm_info_at(str(root), _stamp([root / "llm_info.json"]))


def load_model_profile(model: str, data_dir: str | Path | None = None) -> ModelProfile:
    """Load the profile of ``model`` from ``data_dir`` (default: shipped data); :class:`InputError` if unknown.

    Results are cached per (model, directory) and reloaded when a file of the directory changes.
    A GPU type whose profile has a different number of layers than the model is skipped
    (Sailor's GPT-Neo-2.7 GH-96 file is a copy of OPT-350's).
    """
    root = resolve_data_dir(data_dir)
    files = [root / "llm_info.json", *sorted((root / "profiles" / str(model)).glob("*.json"))]
    return _load_model_profile(model, str(root), _stamp(files))


@lru_cache(maxsize=16)
def _load_model_profile(model: str, root_str: str, stamp: tuple) -> ModelProfile:
    root = Path(root_str)
    info = _llm_info_at(root_str, _stamp([root / "llm_info.json"]))
    if model not in info or not (root / "profiles" / model).is_dir():
        raise InputError("model", model, f"unknown model; known: {list(available_models(root))}")
    try:
        return _build_profile(model, root, info[model])
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:  # a file of another shape
        raise InputError("profile data", f"{root}: {model}", f"malformed llm_info.json or profile file "
                         f"({type(exc).__name__}: {exc}); regenerate it with `heteroplan profile`") from None


def _build_profile(model: str, root: Path, sizes: dict) -> ModelProfile:
    tps = sorted(int(t) for t in sizes)
    num_layers = len(sizes[str(tps[0])])

    def layer_array(tp: int, key: str) -> np.ndarray:
        layers = sizes[str(tp)]
        return np.array([layers[str(i)][key] for i in range(num_layers)], dtype=float)

    params = {tp: layer_array(tp, "params_floats") for tp in tps}
    act_out = {tp: layer_array(tp, "act_output_floats") for tp in tps}
    act_mem = {tp: layer_array(tp, "act_mem_floats") for tp in tps}
    compute: dict[tuple[str, int, int], np.ndarray] = {}
    measured = _measured_memory(sizes, tps, num_layers)
    recomputed: dict[tuple[str, int, int], np.ndarray] = {}
    for path in sorted((root / "profiles" / model).glob("*.json")):
        data = read_json(path, "profile")
        for mbs, by_tp in data.items():
            for tp, layers in by_tp.items():
                if len(layers) != num_layers:
                    continue
                rows = [layers[str(i)] for i in range(num_layers)]
                arr = np.array([r[:3] for r in rows], dtype=float).T
                compute[(path.stem, int(mbs), int(tp))] = arr
                if all(len(r) >= 5 for r in rows):  # + recomputed fwd, bwd (profile_layers(time_recomputed=True))
                    recomputed[(path.stem, int(mbs), int(tp))] = np.array([[r[3], r[4], r[2]] for r in rows], dtype=float).T
    flops = None
    if "1" in sizes and all(isinstance(sizes["1"][str(i)].get("forward_flops"), int | float) for i in range(num_layers)):
        flops = tuple(float(sizes["1"][str(i)]["forward_flops"]) for i in range(num_layers))
    return ModelProfile(model, num_layers, params, act_out, act_mem, _monotone_in_mbs(compute), measured,
                        _monotone_in_mbs(recomputed), flops)


_MEASURED_KEYS = {"act_input": "act_input_bytes", "act_output": "act_output_bytes", "act_saved": "act_mem_bytes",
                  "act_saved_fixed": "act_fixed_bytes", "bwd_working": "bwd_working_bytes",
                  "bwd_working_fixed": "bwd_working_fixed_bytes", "update_working": "update_working_bytes", "loss_saved": "loss_saved_bytes"}


def _measured_memory(sizes: dict, tps: list[int], num_layers: int) -> MeasuredMemory | None:
    """The profiler's memory measurements, when every layer of every TP degree has them."""
    layers = [sizes[str(tp)][str(i)] for tp in tps for i in range(num_layers)]
    if not all(all(k in layer for k in _MEASURED_KEYS.values()) for layer in layers):
        return None
    arrays = {name: {tp: np.array([float(sizes[str(tp)][str(i)][key]) for i in range(num_layers)]) for tp in tps}
              for name, key in _MEASURED_KEYS.items()}
    first = sizes[str(tps[0])]["0"]
    state = {"adam": 8.0, "sgd": 0.0}.get(str(first.get("optimizer", "adam")), 8.0)
    tensors = {tp: tuple(tuple(int(n) for n in sizes[str(tp)][str(i)]["param_tensor_floats"]) for i in range(num_layers))
               for tp in tps if all(isinstance(sizes[str(tp)][str(i)].get("param_tensor_floats"), list)
                                    for i in range(num_layers))}
    return MeasuredMemory(**arrays, optimizer_state_per_param=state, overhead=float(first.get("overhead_bytes", 0)),
                          precision=str(first.get("precision", "fp32")), param_tensors=tensors)


def _monotone_in_mbs(compute: dict[tuple[str, int, int], np.ndarray]) -> dict[tuple[str, int, int], np.ndarray]:
    """Clip the model's prefix times at a microbatch size to those at the next larger size.

    A microbatch of ``m`` samples cannot take longer than one of ``2m``; profiles at tiny
    microbatches are launch-bound and noisy (OPT-350 on GH-96 with TP4 measures mbs 1 slower
    than mbs 2), so the larger size's time is the better estimate. The clip acts on the running
    sums over layers (the prefixes ``[0, k)``) and the layers get their increments back: a
    prefix-timed profile (``profile_layers(timing="prefix")``) attributes a whole pass's time to
    layers unevenly, and clipping layer by layer would drop the total at every size whose
    attribution differs.
    """
    out = dict(compute)
    for gpu, _, tp in {(g, 0, t) for g, _, t in compute}:
        sizes = sorted(m for g, m, t in compute if g == gpu and t == tp)
        for small, large in zip(sizes[-2::-1], sizes[:0:-1], strict=True):
            running = np.minimum(np.cumsum(out[(gpu, small, tp)], axis=-1), np.cumsum(out[(gpu, large, tp)], axis=-1))
            out[(gpu, small, tp)] = np.diff(running, axis=-1, prepend=0.0)
    return out
