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
from heteroplan.inputs import enum_values, read_json
from heteroplan.run_options import Optimizer
from heteroplan.schema import (
    Flag,
    IntKey,
    Number,
    Record,
    Seq,
    Table,
    Text,
    check,
    decode,
    naming_file,
    shown,
)

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


MAX_LAYERS = 100_000  # layers of one model
MAX_TP = 1024  # GPUs of one tensor-parallel group
MAX_MICROBATCH = 1_000_000  # samples of one microbatch
MAX_LAYER_S = 86_400.0  # seconds one layer may take for one microbatch (a day: beyond is a unit error)
_STATE_BYTES_PER_PARAM = {Optimizer.ADAM: 8.0, Optimizer.SGD: 0.0}  # optimizer state per parameter (Adam: two fp32 moments)
MAX_SIZE = 1e15  # floats or bytes of one layer

_SIZE = Number(low=0, high=MAX_SIZE, unit="floats or bytes")
_LAYER_INFO = Record(
    {"params_floats": _SIZE, "act_output_floats": _SIZE, "act_mem_floats": _SIZE},
    {**{key: _SIZE for key in ("act_input_floats", "params_bytes", "act_output_bytes", "act_input_bytes",
                               "act_mem_bytes", "act_fixed_bytes", "bwd_working_bytes", "bwd_working_fixed_bytes",
                               "update_working_bytes", "loss_saved_bytes", "overhead_bytes", "forward_flops")},
     "param_tensor_floats": Seq(Number(low=0, high=MAX_SIZE, integer=True), 0, MAX_LAYERS),
     "precision": Text(choices=("fp32", "tf32", "bf16")), "optimizer": Text(choices=enum_values(Optimizer)),
     "cuda_graphs": Flag(), "compiled": Flag()})
LLM_INFO_FILE = Table(Table(Table(_LAYER_INFO, IntKey(0, MAX_LAYERS - 1, "layer"), 1, MAX_LAYERS),
                            IntKey(1, MAX_TP, "TP degree"), 1, 64), Text(), 0, 10_000)
"""``llm_info.json``: ``{model: {tp: {layer: sizes}}}``; sizes are finite and >= 0."""

PROFILE_FILE = Table(Table(Table(Seq(Number(low=0, high=MAX_LAYER_S, unit="s"), 3, 5),
                                 IntKey(0, MAX_LAYERS - 1, "layer"), 1, MAX_LAYERS),
                           IntKey(1, MAX_TP, "TP degree"), 1, 64), IntKey(1, MAX_MICROBATCH, "microbatch size"), 1, 64)
"""``profiles/<model>/<gpu>.json``: ``{mbs: {tp: {layer: [fwd_s, bwd_s, update_s(, recomputed fwd_s, bwd_s)]}}}``;
seconds finite and >= 0."""


def decode_llm_info(info: object) -> dict[str, dict[int, dict[int, dict]]]:
    """``llm_info.json``'s object checked by :data:`LLM_INFO_FILE`; each model's TP degrees have the
    same layers ``0..L-1`` and parameters in all (keys as integers)."""
    out = decode(LLM_INFO_FILE, info, "llm_info")
    for model, by_tp in out.items():
        for tp, layers in by_tp.items():
            where = f"llm_info[{model!r}][{tp}]"
            check(sorted(layers) == list(range(len(layers))), where, f"{len(layers)} layers",
                  "layers must be numbered 0, 1, ... without gaps")
            check(sum(layer["params_floats"] for layer in layers.values()) > 0, f"{where}.params_floats", 0,
                  "the model has no parameters (every layer's params_floats is 0)")
        counts = {len(layers) for layers in by_tp.values()}
        check(len(counts) == 1, f"llm_info[{model!r}]", sorted(counts), "every TP degree needs the same layers")
    return out


def decode_profile(data: object, where: str = "profile") -> dict[int, dict[int, dict[int, list[float]]]]:
    """A profile file's object checked by :data:`PROFILE_FILE`: layers ``0..L-1`` and a
    positive time per microbatch in all (keys as integers)."""
    out = decode(PROFILE_FILE, data, where)
    for mbs, by_tp in out.items():
        for tp, layers in by_tp.items():
            at = f"{where}[{mbs}][{tp}]"
            check(sorted(layers) == list(range(len(layers))), at, f"{len(layers)} layers",
                  "layers must be numbered 0, 1, ... without gaps")
            check(sum(row[0] + row[1] for row in layers.values()) > 0, at, 0,
                  "forward and backward take 0 s in all: a microbatch must take time")
    return out


@lru_cache(maxsize=8)
def _llm_info_at(root: str, stamp: tuple) -> dict:
    path = Path(root) / "llm_info.json"
    if not path.is_file():
        return {}
    with naming_file(path):
        return decode_llm_info(read_json(path, "llm_info.json"))  # truncated, not UTF-8, nested too deep


def _llm_info(data_dir: str | Path | None = None) -> dict:
    root = resolve_data_dir(data_dir)
    return _llm_info_at(str(root), _stamp([root / "llm_info.json"]))


def load_model_profile(model: str, data_dir: str | Path | None = None) -> ModelProfile:
    """Load the profile of ``model`` from ``data_dir`` (default: shipped data); :class:`InputError` if unknown.

    Results are cached per (model, directory) and reloaded when a file of the directory changes.
    A GPU type whose profile has a different number of layers than the model is skipped
    (Sailor's GPT-Neo-2.7 GH-96 file is a copy of OPT-350's).
    """
    if not isinstance(model, str):  # a list would reach the cache unhashable
        raise InputError("model", shown(model), "must be a model name (a string)")
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


def _build_profile(model: str, root: Path, sizes: dict[int, dict[int, dict]]) -> ModelProfile:
    tps = sorted(sizes)
    num_layers = len(sizes[tps[0]])

    def layer_array(tp: int, key: str) -> np.ndarray:
        layers = sizes[tp]
        return np.array([layers[i][key] for i in range(num_layers)], dtype=float)

    params = {tp: layer_array(tp, "params_floats") for tp in tps}
    act_out = {tp: layer_array(tp, "act_output_floats") for tp in tps}
    act_mem = {tp: layer_array(tp, "act_mem_floats") for tp in tps}
    compute: dict[tuple[str, int, int], np.ndarray] = {}
    measured = _measured_memory(sizes, tps, num_layers)
    recomputed: dict[tuple[str, int, int], np.ndarray] = {}
    for path in sorted((root / "profiles" / model).glob("*.json")):
        with naming_file(path):
            data = decode_profile(read_json(path, "profile"))
        for mbs, by_tp in data.items():
            for tp, layers in by_tp.items():
                if len(layers) != num_layers:
                    continue
                rows = [layers[i] for i in range(num_layers)]
                arr = np.array([r[:3] for r in rows], dtype=float).T
                compute[(path.stem, mbs, tp)] = arr
                if all(len(r) >= 5 for r in rows):  # + recomputed fwd, bwd (profile_layers(time_recomputed=True))
                    recomputed[(path.stem, mbs, tp)] = np.array([[r[3], r[4], r[2]] for r in rows], dtype=float).T
    flops = None
    if 1 in sizes and all(isinstance(sizes[1][i].get("forward_flops"), int | float) for i in range(num_layers)):
        flops = tuple(float(sizes[1][i]["forward_flops"]) for i in range(num_layers))
    return ModelProfile(model, num_layers, params, act_out, act_mem, _monotone_in_mbs(compute), measured,
                        _monotone_in_mbs(recomputed), flops)


_MEASURED_KEYS = {"act_input": "act_input_bytes", "act_output": "act_output_bytes", "act_saved": "act_mem_bytes",
                  "act_saved_fixed": "act_fixed_bytes", "bwd_working": "bwd_working_bytes",
                  "bwd_working_fixed": "bwd_working_fixed_bytes", "update_working": "update_working_bytes", "loss_saved": "loss_saved_bytes"}


def _measured_memory(sizes: dict[int, dict[int, dict]], tps: list[int], num_layers: int) -> MeasuredMemory | None:
    """The profiler's memory measurements, when every layer of every TP degree has them."""
    layers = [sizes[tp][i] for tp in tps for i in range(num_layers)]
    if not all(all(k in layer for k in _MEASURED_KEYS.values()) for layer in layers):
        return None
    arrays = {name: {tp: np.array([float(sizes[tp][i][key]) for i in range(num_layers)]) for tp in tps}
              for name, key in _MEASURED_KEYS.items()}
    first = sizes[tps[0]][0]
    state = _STATE_BYTES_PER_PARAM[Optimizer(first.get("optimizer", Optimizer.ADAM))]
    tensors = {tp: tuple(tuple(int(n) for n in sizes[tp][i]["param_tensor_floats"]) for i in range(num_layers))
               for tp in tps if all(isinstance(sizes[tp][i].get("param_tensor_floats"), list)
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
