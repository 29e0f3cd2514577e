"""Per-layer profiler of a ``torch.nn.Sequential``: planner profiles for your own hardware.

For every layer ``i`` of the Sequential (= plan layer ``i``) and every microbatch size it measures,
as the median of ``repeats`` runs after ``warmup`` runs (the fastest of ``sweeps`` interleaved
passes over all sizes and layers):

- forward seconds of the layer on its input (the previous layer's output);
- backward seconds of the layer given a gradient of its output (the loss's backward on the last
  layer when a ``loss_fn`` is given; the loss is then part of the last layer's times);
- optimizer update seconds of ``optimizer.step()`` over the layer's parameters (the same for
  every microbatch size);

and once, per sample: parameter floats, output activation floats, input floats and the bytes of
tensors saved for backward (:func:`torch.autograd.graph.saved_tensors_hooks`, parameters
excluded, each storage counted once). ``LayerProfile.write`` stores them in Sailor's format
(:mod:`heteroplan.perf.sailor_profiles`), so ``plan_job(..., data_dir=...)`` can plan with them.

On CUDA, times come from CUDA events between ``torch.cuda.synchronize`` calls; on CPU from
``time.perf_counter``. Repeated timings that disagree (a busy or drifting machine: their median
absolute deviation over :data:`TIMING_SPREAD_BOUND` of their median) raise a
:class:`TimingSpreadWarning` naming the worst; the profile is still returned. torch is imported only when profiling (extra ``heteroplan[runtime]``).
"""

from __future__ import annotations

import math
import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from heteroplan.atomic_json import write_json_atomic
from heteroplan.errors import InputError, check_int, check_int_list
from heteroplan.inputs import enum_choice, read_json
from heteroplan.names import path_component
from heteroplan.perf.sailor_profiles import decode_llm_info, decode_profile
from heteroplan.planner.plan import Precision, Recomputation
from heteroplan.run_options import LayerTiming, Optimizer
from heteroplan.runtime.config import RunConfig, make_optimizer
from heteroplan.runtime.tensor_parallel import local_tensor
from heteroplan.schema import naming_file

if TYPE_CHECKING:  # pragma: no cover
    import torch
    from torch import nn

__all__ = ["LayerProfile", "profile_layers", "graphed_microbatch_seconds", "check_device", "write_json_atomic",
           "TIMING_SPREAD_BOUND", "TimingSpreadWarning"]

TIMING_SPREAD_BOUND = 0.2
"""Largest relative spread of one measurement's repeated timings taken as agreeing: their median
absolute deviation over their median (0.2: half the repeats lie within +-20% of the median)."""


MAX_REPEATS = 1000
"""Most ``warmup`` runs, timed ``repeats`` and ``sweeps`` of one profile, as the command line takes
(each multiplies its time: ``repeats=10**12`` never answered)."""


class TimingSpreadWarning(UserWarning):
    """Repeated timings of one measurement disagreed by more than :data:`TIMING_SPREAD_BOUND`."""



def _torch() -> Any:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is installed with the runtime extra
        raise InputError("torch", None, "the profiler needs PyTorch: pip install torch==2.13.0 "
                         "(the CPU wheel without a GPU: --index-url https://download.pytorch.org/whl/cpu)") from None
    return torch


@dataclass(frozen=True)
class LayerProfile:
    """What :func:`profile_layers` measured for each layer of a model.

    Attributes:
        compute: ``{mbs: ((fwd_s, bwd_s, update_s) per layer)}``, seconds per microbatch.
        params_floats: parameters per layer (numbers, exact).
        params_bytes: bytes of those parameters.
        act_output_floats: elements of the layer's output per sample.
        act_output_bytes: bytes of the layer's output per sample.
        act_input_floats: elements of the layer's input per sample.
        act_input_bytes: bytes of the layer's input per sample.
        act_mem_bytes: bytes of tensors saved for backward per sample (parameters excluded; the
            last layer's include what the loss saves of its output).
        device: where it was measured (``"cpu"``, ``"cuda:0"``).
        optimizer: optimizer whose update was timed (``"sgd"`` or ``"adam"``).
        act_fixed_bytes: bytes saved for backward per microbatch whatever its size (bf16: the
            weight casts autocast saves); with ``act_mem_bytes``, the line through the saved bytes
            at the smallest and largest profiled microbatch sizes.
        bwd_working_bytes, bwd_working_fixed_bytes: the layer's backward's transient memory (peak
            live bytes above those at its start: input and weight gradients, temporaries), per
            sample and per microbatch, fitted the same way; the gradient of the layer's output,
            alive at its start, is not in it.
        update_working_bytes: transient bytes of the optimizer step over the layer's parameters,
            stepped as the runtime steps them (fused: 0; a foreach Adam would hold one fp32 buffer
            of the parameters' size); after the first step.
        overhead_bytes: bytes the device holds outside the model's tensors once profiled (CUDA:
            the cuBLAS workspaces in the caching allocator; CPU: 0).
        precision: arithmetic the profile was measured in (``"fp32"``, ``"tf32"``, ``"bf16"``).
        loss_saved_bytes: per sample, what the loss saves of the last layer's output (0 for the
            others): kept outside a recomputed layer.
        recomputed: ``{mbs: ((fwd_s, bwd_s) per layer)}`` with every layer recomputed in its
            backward (``torch.utils.checkpoint``), timed as ``compute``; ``None`` if not timed.
        param_tensor_floats: per layer, the elements of each of its parameter tensors (ZeRO-1
            gives each tensor whole to one replica: what the planner's share of the state is
            computed from, :func:`heteroplan.planner.model.terms.zero1_share`).
        cuda_graphs: the times are those of microbatches replayed as CUDA graphs (they predict
            ``RunConfig(cuda_graphs=True)`` runs; eager runs of a launch-bound model are slower).
        forward_flops: per layer, forward FLOPs per sample counted by torch's FLOP counter
            (:func:`heteroplan.runtime.flops.forward_flops`; empty in profiles written before it):
            what model FLOPs and MFU are computed from (:mod:`heteroplan.planner.model.flops`).
        compiled: the layers were measured compiled (``torch.compile`` per layer), as
            ``RunConfig(compile=True)`` runs them.
    """

    compute: dict[int, tuple[tuple[float, float, float], ...]]
    params_floats: tuple[int, ...]
    params_bytes: tuple[int, ...]
    act_output_floats: tuple[int, ...]
    act_output_bytes: tuple[int, ...]
    act_input_floats: tuple[int, ...]
    act_input_bytes: tuple[int, ...]
    act_mem_bytes: tuple[int, ...]
    device: str = "cpu"
    optimizer: str = "sgd"
    act_fixed_bytes: tuple[int, ...] = ()
    bwd_working_bytes: tuple[int, ...] = ()
    bwd_working_fixed_bytes: tuple[int, ...] = ()
    update_working_bytes: tuple[int, ...] = ()
    overhead_bytes: int = 0
    precision: str = "fp32"
    loss_saved_bytes: tuple[int, ...] = ()
    recomputed: dict[int, tuple[tuple[float, float], ...]] | None = None
    param_tensor_floats: tuple[tuple[int, ...], ...] = ()
    cuda_graphs: bool = False
    forward_flops: tuple[int, ...] = ()
    compiled: bool = False

    @property
    def num_layers(self) -> int:
        return len(self.params_floats)

    @property
    def microbatch_sizes(self) -> tuple[int, ...]:
        return tuple(sorted(self.compute))

    @property
    def act_mem_floats(self) -> tuple[int, ...]:
        """Activation memory per sample in 4-byte float equivalents (what the simulator multiplies by 4 bytes)."""
        return tuple(-(-b // 4) for b in self.act_mem_bytes)

    def llm_info(self) -> dict[str, dict[str, int]]:
        """Per-layer sizes as one tp entry of ``llm_info.json``: ``{layer: {params_floats: ..., ...}}``."""
        keys = ("params_floats", "act_output_floats", "act_input_floats", "act_mem_floats")
        keys += tuple(k.replace("floats", "bytes") for k in keys)
        extra = tuple(k for k in ("act_fixed_bytes", "bwd_working_bytes", "bwd_working_fixed_bytes",
                                  "update_working_bytes", "loss_saved_bytes", "forward_flops")
                      if len(getattr(self, k)) == self.num_layers)
        info: dict[str, dict[str, Any]] = {
            str(i): {k: int(getattr(self, k)[i]) for k in keys + extra} for i in range(self.num_layers)}
        if len(self.param_tensor_floats) == self.num_layers:
            for i, numels in enumerate(self.param_tensor_floats):
                info[str(i)]["param_tensor_floats"] = [int(n) for n in numels]
        info["0"] |= {"overhead_bytes": int(self.overhead_bytes), "precision": self.precision,
                      "optimizer": self.optimizer, "cuda_graphs": self.cuda_graphs, "compiled": self.compiled}
        return info

    def profile_json(self, tp: int = 1) -> dict[str, dict[str, dict[str, list[float]]]]:
        """``{mbs: {tp: {layer: [fwd_s, bwd_s, update_s]}}}``, the format of ``profiles/<model>/<gpu>.json``
        (``[fwd_s, bwd_s, update_s, recomputed fwd_s, recomputed bwd_s]`` when :attr:`recomputed`)."""
        def row(m: int, i: int) -> list[float]:
            extra = self.recomputed[m][i] if self.recomputed is not None else ()
            return [float(x) for x in (*self.compute[m][i], *extra)]

        return {str(m): {str(tp): {str(i): row(m, i) for i in range(self.num_layers)}} for m in self.microbatch_sizes}

    def write(self, data_dir: str | Path, model_name: str, gpu_type: str, tp: int = 1) -> Path:
        """Write this profile as the ``tp`` entry of ``<data_dir>/llm_info.json`` and
        ``<data_dir>/profiles/<model_name>/<gpu_type>.json``; returns the profile file's path.

        Other models, GPU types and TP degrees already there are kept, except entries of this
        model with another layer count (a different model under the same name), which are dropped.
        ``tp > 1``: a profile of one rank of a tensor-parallel group (:func:`profile_tensor_parallel`).
        """
        path_component("model_name", model_name)
        path_component("gpu_type", gpu_type)
        check_int("tp", tp, 1)
        if not isinstance(data_dir, str | Path):
            raise InputError("data_dir", data_dir, "must be a path")
        root = Path(data_dir).expanduser()
        if root.exists() and not root.is_dir():
            raise InputError("data_dir", str(data_dir), "exists and is not a directory")
        info_path = root / "llm_info.json"
        out = root / "profiles" / model_name / f"{gpu_type}.json"
        info, times = _read_json(info_path, decode_llm_info), _read_json(out, decode_profile)
        same = {t: e for t, e in info.get(model_name, {}).items() if len(e) == self.num_layers and t != str(tp)}
        info[model_name] = {**same, str(tp): self.llm_info()}
        write_json_atomic(info_path, info, root=root)
        merged = {m: {t: e for t, e in per.items() if t in same} for m, per in times.items()}
        for m, entry in self.profile_json(tp).items():
            merged.setdefault(m, {}).update(entry)
        write_json_atomic(out, {m: per for m, per in merged.items() if per}, root=root)
        return out

    def table(self) -> str:
        """Text table: per layer, fwd/bwd/update milliseconds at each microbatch size and sizes."""
        mbs = self.microbatch_sizes
        head = ["layer", *(f"mbs{m} f/b/u ms" for m in mbs), "params", "out/sample", "saved B/sample"]
        rows = []
        for i in range(self.num_layers):
            cells = [str(i)]
            cells += ["/".join(f"{1e3 * x:.3g}" for x in self.compute[m][i]) for m in mbs]
            cells += [str(self.params_floats[i]), str(self.act_output_floats[i]), str(self.act_mem_bytes[i])]
            rows.append(cells)
        widths = [max(len(r[k]) for r in [head, *rows]) for k in range(len(head))]
        return "\n".join("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in [head, *rows])


def _read_json(path: Path, check: Callable[[object], object]) -> dict:
    """The file already at ``path`` (``{}`` when none), checked by ``check`` (its format's decoder:
    a hostile file is refused, naming it, rather than merged into the new one)."""
    if not path.is_file():
        return {}
    with naming_file(path):
        data = read_json(path, "data_dir")  # InputError: unreadable, not UTF-8, invalid, nested too deep
        if not isinstance(data, dict):
            raise InputError("data_dir", str(path), "existing file is not a JSON object")
        check(data)
    return data


def check_device(device: object) -> torch.device:
    """``device`` as a ``torch.device`` (cpu or an available cuda device); InputError otherwise."""
    torch = _torch()
    try:
        dev = torch.device(device)  # type: ignore[arg-type]
    except (RuntimeError, TypeError, ValueError):
        raise InputError("device", device, "unknown device; use 'cpu', 'cuda' or 'cuda:<index>'") from None
    if dev.type not in ("cpu", "cuda"):
        raise InputError("device", device, "only 'cpu' and 'cuda' devices are supported")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise InputError("device", device, "CUDA is not available on this machine")
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        if index >= torch.cuda.device_count():
            raise InputError("device", device, f"only {torch.cuda.device_count()} CUDA device(s)")
        dev = torch.device("cuda", index)
    return dev


def _check_args(model: object, microbatch_sizes: object, warmup: object, repeats: object) -> tuple[int, ...]:
    nn = _torch().nn
    if not isinstance(model, nn.Sequential):
        raise InputError("model", type(model).__name__, "must be a torch.nn.Sequential (layer i = plan layer i)")
    if len(model) == 0:
        raise InputError("model", "Sequential()", "has no layers")
    sizes = check_int_list("microbatch_sizes", microbatch_sizes, 1, "microbatch sizes")
    _check_repeats("warmup", warmup, 0)
    _check_repeats("repeats", repeats, 1)
    return sizes


def _check_repeats(name: str, value: object, low: int) -> None:
    """A count of runs (``warmup``, ``repeats``, ``sweeps``) in ``[low, MAX_REPEATS]``."""
    if check_int(name, value, low) > MAX_REPEATS:
        raise InputError(name, value, f"must be at most {MAX_REPEATS:,} (each multiplies the profile's time)")


class _Timer:
    """Seconds taken by a call: CUDA events on a GPU, ``perf_counter`` on CPU."""

    def __init__(self, torch: Any, dev: torch.device) -> None:
        self.torch = torch
        self.cuda = dev.type == "cuda"
        self.dev = dev
        self.spreads: list[tuple[float, str, float]] = []  # (relative spread, what, median s) per measurement

    def median(self, times: list[float], what: str) -> float:
        """The median of ``times`` (s); their relative spread is kept for :meth:`warn_spread`."""
        mid = statistics.median(times)
        if len(times) > 1 and mid > 0:
            self.spreads.append((statistics.median(abs(t - mid) for t in times) / mid, what, mid))
        return mid

    def warn_spread(self, bound: float = TIMING_SPREAD_BOUND) -> None:
        """A :class:`TimingSpreadWarning` when some measurement's repeats spread beyond ``bound``."""
        over = [s for s in self.spreads if s[0] > bound]
        if not over:
            return
        spread, what, mid = max(over)
        warnings.warn(TimingSpreadWarning(
            f"{len(over)} of {len(self.spreads)} measurements had repeated timings more than {bound:.0%} apart "
            f"(median absolute deviation over median; worst: {what}, {spread:.0%} around {mid * 1e3:.3g} ms): the "
            "machine is busy or its speed drifts, so the profile is noisy; profile on an idle machine, or with "
            "more repeats and sweeps"), stacklevel=3)

    def __call__(self, fn: Callable[[], Any]) -> tuple[float, Any]:
        if self.cuda:
            cuda = self.torch.cuda
            start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
            cuda.synchronize(self.dev)
            start.record()
            out = fn()
            end.record()
            cuda.synchronize(self.dev)
            return start.elapsed_time(end) / 1e3, out
        t0 = time.perf_counter()
        out = fn()
        return time.perf_counter() - t0, out


def _storage_key(t: torch.Tensor) -> tuple[str, int, int]:
    s = t.untyped_storage()
    return (str(t.device), s.data_ptr(), s.nbytes())


def _saved_bytes(torch: Any, layer: nn.Module, inp: torch.Tensor, index: int,
                 loss_fn: Callable[[torch.Tensor], torch.Tensor] | None = None) -> int:
    """Bytes of the distinct storages the layer (and ``loss_fn`` of its output, when given) saves
    for backward on ``inp`` (parameters excluded)."""
    params = {_storage_key(local_tensor(p)) for p in layer.parameters()}
    seen: dict[tuple[str, int, int], int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        # Returns a detached alias, not ``t``: a saved output would hold its own grad_fn, a
        # reference cycle through autograd's C++ graph that Python's gc cannot free (it kept every
        # profiled layer's parameters and activations alive: 3.3 GB on the GPU after one
        # 320M-parameter profile). This graph is never backpropagated through.
        try:
            key = _storage_key(local_tensor(t))  # a DTensor (tensor-parallel layer) saves its local shard
        except (RuntimeError, NotImplementedError):  # tensors without a plain storage
            return t.detach()
        if key not in params:
            seen[key] = key[2]
        return t.detach()

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = _forward(layer, inp, index)
        if loss_fn is not None:
            loss_fn(out)
    return sum(seen.values())


def _forward(layer: nn.Module, inp: torch.Tensor, index: int) -> torch.Tensor:
    torch = _torch()
    try:
        out = layer(inp)
    except (RuntimeError, TypeError, ValueError, IndexError) as exc:
        raise InputError(
            f"model[{index}]", type(layer).__name__, f"forward failed on an input of shape {tuple(inp.shape)}: {exc}"
        ) from None
    if not isinstance(out, torch.Tensor):
        raise InputError(f"model[{index}]", type(layer).__name__, f"must return a Tensor, got {type(out).__name__}")
    return out


def _make_input(make_input: Callable[[int], Any], mbs: int, dev: torch.device) -> torch.Tensor:
    torch = _torch()
    x = make_input(mbs)
    if not isinstance(x, torch.Tensor):
        raise InputError("make_input", type(x).__name__, "must return a torch.Tensor (the input of layer 0)")
    if x.dim() == 0 or x.shape[0] != mbs:
        raise InputError("make_input", tuple(x.shape), f"the first dimension must be the microbatch size {mbs}")
    return x.to(dev)


def _leaf_input(torch: Any, x: torch.Tensor) -> torch.Tensor:
    inp = x.detach()
    if inp.is_floating_point() or inp.is_complex():
        inp.requires_grad_(True)
    return inp


def _time_update(torch: Any, timer: _Timer, dev: torch.device, layer: nn.Module, optimizer: Optimizer, warmup: int,
                 repeats: int) -> tuple[float, int]:
    """Median seconds of ``optimizer.step()`` over the layer's parameters, and the transient bytes
    of one more (untimed, state-holding) step; weights restored after."""
    params = [p for p in layer.parameters() if p.requires_grad]
    if not params:
        return 0.0, 0
    for p in params:
        if p.grad is None:
            p.grad = torch.randn_like(p)
    saved = [p.detach().clone() for p in params]
    opt = make_optimizer(params, RunConfig(optimizer=optimizer, lr=1e-3))
    times = []
    for r in range(warmup + repeats):
        dt, _ = timer(opt.step)
        if r >= warmup:
            times.append(dt)
    work = _peak_increase_bytes(torch, dev, opt.step)
    with torch.no_grad():
        for p, s in zip(params, saved, strict=True):
            p.copy_(s)
            p.grad = None
    return timer.median(times, f"layer update ({optimizer})"), work


def _time_layer(
    torch: Any, timer: _Timer, layer: nn.Module, inp: torch.Tensor, index: int,
    loss_fn: Callable[[torch.Tensor], torch.Tensor] | None, warmup: int, repeats: int,
) -> tuple[float, float, torch.Tensor]:
    """Median forward and backward seconds of ``layer`` on ``inp`` (``loss_fn`` timed with it when
    given), and its output. The backward accumulates into gradients that exist before it, as every
    microbatch of the runtime's does (its gradients live in one buffer, ``worker.flat_gradients``):
    the add of each parameter's gradient is part of the time (on an H100, 1.2-1.4 ms a microbatch
    of the 320M GPT in fp32: what back-to-back microbatches cost over an isolated one)."""
    fwd, bwd = [], []
    out = grad = None
    for p in layer.parameters():
        if p.requires_grad:
            p.grad = torch.zeros_like(p)
    for r in range(warmup + repeats):

        def run_forward() -> tuple[torch.Tensor, torch.Tensor]:
            o = _forward(layer, inp, index)
            return o, (loss_fn(o) if loss_fn is not None else o)

        t_f, (out, target) = timer(run_forward)
        t_b = 0.0
        if target.requires_grad:
            if loss_fn is not None:
                if target.numel() != 1:
                    raise InputError("loss_fn", tuple(target.shape), "must return a scalar")
                t_b, _ = timer(target.backward)
            else:
                if grad is None:
                    grad = torch.randn_like(target)
                t_b, _ = timer(lambda target=target, grad=grad: target.backward(grad))
        if r >= warmup:
            fwd.append(t_f)
            bwd.append(t_b)
    for p in layer.parameters():
        p.grad = None
    shape = tuple(inp.shape) if hasattr(inp, "shape") else ()
    return (timer.median(fwd, f"layer {index} forward, input {shape}"),
            timer.median(bwd, f"layer {index} backward, input {shape}"), out)


def _prefix_times(torch: Any, timer: _Timer, layers: list, make_input: Callable[[int], Any], mbs: int,
                  dev: torch.device, loss_fn: Callable | None, warmup: int, repeats: int,
                  sweeps: int) -> list[tuple[float, float]]:
    """Per-layer ``(fwd_s, bwd_s)`` at ``mbs`` as increments of whole-prefix times (see ``timing``)."""
    nn = torch.nn
    L = len(layers)
    cumulative = [(math.inf, math.inf)] * L
    for _ in range(sweeps):
        x = _make_input(make_input, mbs, dev)
        for k in range(1, L + 1):
            fwd, bwd, out = _time_layer(torch, timer, nn.Sequential(*layers[:k]), _leaf_input(torch, x), k - 1,
                                        loss_fn if k == L else None, warmup, repeats)
            del out
            if fwd + bwd < sum(cumulative[k - 1]):
                cumulative[k - 1] = (fwd, bwd)
    fwd = _increments(_nondecreasing([f for f, _ in cumulative]))
    bwd = _increments(_nondecreasing([b for _, b in cumulative]))
    return list(zip(fwd, bwd, strict=True))


def _nondecreasing(values: list[float]) -> list[float]:
    """The nondecreasing sequence nearest ``values`` in least squares (pool adjacent violators).

    Prefix times grow with the prefix; noise makes some shrink. A running maximum would let one
    slow measurement set every later prefix (and the whole pass) to its time; the least-squares
    fit pools it with its neighbours instead."""
    blocks: list[list[float]] = []  # [mean, count]
    for v in values:
        blocks.append([v, 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m2, n2), (m1, n1) = blocks.pop(), blocks.pop()
            blocks.append([(m1 * n1 + m2 * n2) / (n1 + n2), n1 + n2])
    return [m for m, n in blocks for _ in range(int(n))]


def _increments(cumulative: list[float]) -> list[float]:
    """Per-layer times from nondecreasing prefix times (the first prefix is layer 0 alone)."""
    return [max(c - p, 0.0) for c, p in zip(cumulative, [0.0, *cumulative[:-1]], strict=True)]


def _autocast_layer(layer: nn.Module, device_type: str) -> nn.Module:
    """``layer`` with its forward under bf16 autocast (the parameters are the layer's own)."""
    from torch import nn

    from heteroplan.runtime.dimensions import compute_context

    class Autocast(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = layer

        def forward(self, x: Any) -> Any:
            with compute_context(Precision.BF16, device_type):
                return self.layer(x)

    return Autocast()


def profile_layers(
    model: nn.Sequential, make_input: Callable[[int], torch.Tensor], microbatch_sizes: Sequence[int] = (1, 2, 4),
    loss_fn: Callable[[torch.Tensor], torch.Tensor] | None = None, device: str | torch.device = "cpu",
    warmup: int = 2, repeats: int = 5, optimizer: Optimizer | str = Optimizer.SGD, sweeps: int = 1,
    precision: Precision | str = Precision.FP32, timing: LayerTiming | str = LayerTiming.PREFIX,
    time_recomputed: bool = False, cuda_graphs: bool = False, compile: bool = False,
) -> LayerProfile:
    """Measure every layer of ``model`` (moved to ``device``) at each microbatch size.

    Args:
        model: the model; layer ``i`` of the Sequential is plan layer ``i``.
        make_input: microbatch size -> input of layer 0 (first dimension = microbatch size;
            integer token ids are fine).
        microbatch_sizes: microbatch sizes to profile (samples).
        loss_fn: output of the last layer -> scalar loss, timed with the last layer; default:
            the last layer's backward gets a random output gradient like every other layer.
        device: ``"cpu"``, ``"cuda"`` or ``"cuda:<i>"``.
        warmup: untimed runs per measurement.
        repeats: timed runs per measurement; the median is kept.
        optimizer: :class:`~heteroplan.run_options.Optimizer` or its value, ``"sgd"`` or ``"adam"``, whose ``step()`` is timed per layer (the model's
            weights are restored afterwards).
        precision: arithmetic of the forwards (and the loss) as a plan of that
            :class:`~heteroplan.planner.plan.Precision` runs them: ``"bf16"`` under
            ``torch.autocast`` (times and saved activations in bf16; parameters stay fp32),
            ``"tf32"`` with TF32 matmuls on CUDA. A plan is predicted from a profile of its precision.
        timing: :class:`~heteroplan.run_options.LayerTiming` or its value. ``"prefix"`` (default): the prefixes ``model[:k]`` timed whole (forward, and
            backward from their output), layer ``k``'s time being the increase from prefix ``k`` to
            ``k + 1`` (of the nondecreasing least-squares fit to the prefix times, so it is >= 0),
            so the times of the layers of any prefix add up to a measured whole forward and backward, without a per-layer launch and synchronisation cost. Costs
            ``L (L + 1) / 2`` layer runs per measurement instead of ``L``. On an H100 (24-block
            GPT, width 1024) the sum was within 1% of a measured fp32 step at microbatch 1-8.
            ``"layer"``: each layer timed on its own (one synchronisation per layer; +23-38% at
            microbatch 1 on an H200, the launch and synchronisation a whole step overlaps).
        time_recomputed: also time every layer recomputed in its backward (each wrapped in a
            non-reentrant ``torch.utils.checkpoint``, as the runtime runs a ``recompute="full"``
            stage), with the same ``timing``: the planner prices recomputing plans from these
            times instead of the backward + one more forward (which misses checkpointing's own
            launch cost: +60 ms per microbatch on an H100 in bf16, about 3 forwards at microbatch 1).
        cuda_graphs: CUDA only: also time the whole model's microbatch (forward, loss and
            backward) replayed back-to-back as one CUDA graph at each size, as
            ``RunConfig(cuda_graphs=True)`` runs a one-stage plan, and scale that size's layer
            times so that they add up to it (the per-layer split stays the eager one's); with
            ``time_recomputed`` the recomputed times too, from a graphed recomputing microbatch.
            The profile of graphed runs; eager plans are predicted from a profile without it.
        compile: time (and measure the memory of) every layer compiled with ``torch.compile``
            (:mod:`heteroplan.runtime.compiled`), as ``RunConfig(compile=True)`` runs them: the
            profile of compiled runs. The FLOPs are counted on the eager layers (the same model FLOPs).
        sweeps: passes over all microbatch sizes and layers; each time keeps its fastest pass's
            median. On a shared machine whose speed drifts over seconds, several interleaved
            sweeps keep one slow spell from skewing one microbatch size against the others.

    Sizes (params, activations) are per sample, measured at the smallest microbatch size.
    """
    torch = _torch()
    sizes = _check_args(model, microbatch_sizes, warmup, repeats)
    optimizer, timing = enum_choice(Optimizer, "optimizer", optimizer), enum_choice(LayerTiming, "timing", timing)
    dev = _check_profile_options(make_input, loss_fn, device, sweeps, cuda_graphs, compile, time_recomputed)
    timer = _Timer(torch, dev)
    model.to(dev)
    precision = enum_choice(Precision, "precision", precision)
    layers, eager_layers = _profiled_layers(model, precision, dev, compile)
    user_loss = loss_fn
    loss_fn = _loss_under(loss_fn, precision, dev)
    with torch.enable_grad():
        overhead = _overhead_bytes(torch, dev, model, layers, make_input, sizes[0], loss_fn)
    tensors, params, params_bytes = _parameter_sizes(layers)
    lp = _LayerPass.run(torch, timer, dev, layers, eager_layers, make_input, loss_fn, optimizer, sizes, timing,
                        sweeps, (warmup, repeats))
    best = lp.best if timing is not LayerTiming.PREFIX else [
        _prefix_times(torch, timer, layers, make_input, mbs, dev, loss_fn, warmup, repeats, sweeps) for mbs in sizes]
    recomputed = _recomputed(torch, timer, layers, make_input, sizes, dev, loss_fn, warmup, repeats, sweeps,
                             timing) if time_recomputed else None
    compute = {mbs: tuple((*best[k][i], lp.update[i]) for i in range(len(layers))) for k, mbs in enumerate(sizes)}
    if cuda_graphs:
        _scale_to_graphs(compute, recomputed, model, make_input, sizes, dev, precision, user_loss, repeats, compile)
    timer.warn_spread()
    mem_b, fixed_b, work_b, work_fixed_b, loss_b = lp.memory_lines(sizes)
    return LayerProfile(compute, params, params_bytes, tuple(lp.out_f), tuple(lp.out_b), tuple(lp.in_f),
                        tuple(lp.in_b), mem_b, str(dev), optimizer, fixed_b, work_b, work_fixed_b, tuple(lp.update_work),
                        overhead, precision.value, loss_b, recomputed, tensors, cuda_graphs, tuple(lp.flops), compile)


def _parameter_sizes(layers: list[nn.Module]) -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...], tuple[int, ...]]:
    """Per layer: each parameter tensor's elements, their sum and their bytes (under tensor
    parallelism the shard this rank holds)."""
    tensors = tuple(tuple(local_tensor(p).numel() for p in layer.parameters()) for layer in layers)
    params = tuple(sum(numels) for numels in tensors)
    params_bytes = tuple(sum(local_tensor(p).numel() * p.element_size() for p in layer.parameters()) for layer in layers)
    return tensors, params, params_bytes


def _check_profile_options(make_input: Any, loss_fn: Any, device: Any, sweeps: int, cuda_graphs: Any,
                           compile: Any, time_recomputed: Any) -> torch.device:
    """:func:`profile_layers`'s options checked (:class:`InputError` naming the first bad one);
    returns the device."""
    _check_repeats("sweeps", sweeps, 1)
    if not callable(make_input):
        raise InputError("make_input", make_input, "must be a function: microbatch size -> input tensor")
    if loss_fn is not None and not callable(loss_fn):
        raise InputError("loss_fn", loss_fn, "must be a function: output -> scalar loss, or None")
    dev = check_device(device)
    for name, flag in (("cuda_graphs", cuda_graphs), ("compile", compile), ("time_recomputed", time_recomputed)):
        if not isinstance(flag, bool):  # "no" was taken as True
            raise InputError(name, flag, "must be True or False")
    if cuda_graphs and dev.type != "cuda":
        raise InputError("cuda_graphs", cuda_graphs, f"CUDA graphs need a CUDA device, not {dev}")
    return dev


def _profiled_layers(model: nn.Sequential, precision: Precision, dev: torch.device,
                     compile: bool) -> tuple[list[nn.Module], list[nn.Module]]:
    """The layers as timed (under ``precision``'s autocast, compiled with ``compile``) and as
    their FLOPs are counted (not compiled); sets the process's TF32 switch for ``precision``."""
    from heteroplan.runtime.dimensions import set_matmul_precision

    set_matmul_precision(precision)
    layers = list(model) if precision is not Precision.BF16 else [_autocast_layer(layer, dev.type) for layer in model]
    eager_layers = layers  # FLOPs are counted on these
    if compile:
        from heteroplan.runtime.compiled import compile_unavailable, compiled_copy

        reason = compile_unavailable(dev.type)
        if reason is not None:
            raise InputError("compile", True, reason)
        layers = [compiled_copy(layer) for layer in layers]
    return layers, eager_layers


def _loss_under(loss_fn: Callable[[torch.Tensor], torch.Tensor] | None, precision: Precision,
                dev: torch.device) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """``loss_fn`` computed under ``precision``'s autocast (bf16), else itself."""
    if loss_fn is None or precision is not Precision.BF16:
        return loss_fn
    from heteroplan.runtime.dimensions import compute_context

    scalar_loss = loss_fn

    def wrapped(out: torch.Tensor) -> torch.Tensor:
        with compute_context(precision, dev.type):
            return scalar_loss(out)

    return wrapped


@dataclass
class _LayerPass:
    """What :func:`profile_layers`' pass over the layers measures, per layer ``i``: per-sample
    output/input floats and bytes, optimizer-step work and FLOPs (at the smallest size), the
    fastest update seconds, the saved, working and loss-saved bytes at the smallest and largest
    size index (``k`` in ``saved``), and ``best[k][i] = (fwd_s, bwd_s)``, the fastest sweep's medians."""

    out_f: list[int]
    out_b: list[int]
    in_f: list[int]
    in_b: list[int]
    update_work: list[int]
    flops: list[int]
    saved: dict[int, list[int]]
    working: dict[int, list[int]]
    loss_saved: dict[int, list[int]]
    update: list[float]
    best: list[list[tuple[float, float]]]

    @classmethod
    def run(cls, torch: Any, timer: _Timer, dev: torch.device, layers: list[nn.Module], eager_layers: list[nn.Module],
            make_input: Callable[[int], torch.Tensor], loss_fn: Callable[[torch.Tensor], torch.Tensor] | None,
            optimizer: Optimizer, sizes: Sequence[int], timing: LayerTiming, sweeps: int, runs: tuple[int, int]) -> _LayerPass:
        """The pass over every size and layer (``sweeps`` times with ``runs`` = (warm-up, timed) runs
        per measurement under ``"layer"`` timing). Prefix timing replaces the layer times: one pass
        measures the sizes, memory and optimizer steps; its own layer times (one untimed-quality
        run each) are not kept."""
        L, ends = len(layers), {0, len(sizes) - 1}  # memory at the smallest and largest sizes, a line through both
        lp = cls(*([0] * L for _ in range(6)), {k: [0] * L for k in ends}, {k: [0] * L for k in ends},
                 {k: [0] * L for k in ends}, [math.inf] * L, [[(math.inf, math.inf)] * L for _ in sizes])
        layer_sweeps, layer_runs = (1, (0, 1)) if timing is LayerTiming.PREFIX else (sweeps, runs)
        with torch.enable_grad():
            for sweep in range(layer_sweeps):
                for k, mbs in enumerate(sizes):
                    lp.measure_size(torch, timer, dev, layers, eager_layers, make_input, loss_fn, optimizer, sweep, k,
                                    mbs, layer_runs, runs)
        return lp

    def memory_lines(self, sizes: Sequence[int]) -> tuple[tuple[int, ...], ...]:
        """Saved and working bytes as per-sample lines (per sample, fixed) through the two measured
        sizes, and the loss's saved bytes per sample at the largest."""
        mem_b, fixed_b = _per_sample_line(self.saved, sizes)
        work_b, work_fixed_b = _per_sample_line(self.working, sizes)
        loss_b = tuple(-(-b // sizes[max(self.loss_saved)]) for b in self.loss_saved[max(self.loss_saved)])
        return mem_b, fixed_b, work_b, work_fixed_b, loss_b

    def measure_size(self, torch: Any, timer: _Timer, dev: torch.device, layers: list[nn.Module],
                     eager_layers: list[nn.Module], make_input: Callable[[int], torch.Tensor],
                     loss_fn: Callable[[torch.Tensor], torch.Tensor] | None, optimizer: Optimizer, sweep: int, k: int,
                     mbs: int, layer_runs: tuple[int, int], update_runs: tuple[int, int]) -> None:
        """Sweep ``sweep`` at microbatch size ``mbs`` (index ``k``): every layer in order, each fed
        the previous one's output; ``layer_runs``/``update_runs``: (warm-up, timed) runs."""
        L = len(layers)
        x = _make_input(make_input, mbs, dev)
        for i, layer in enumerate(layers):
            inp = _leaf_input(torch, x)
            fwd, bwd, out = _time_layer(torch, timer, layer, inp, i, loss_fn if i == L - 1 else None, *layer_runs)
            if sweep == 0 and k in self.saved:
                self.saved[k][i] = _saved_bytes(torch, layer, inp, i, loss_fn if i == L - 1 else None)
                if i == L - 1 and loss_fn is not None:
                    self.loss_saved[k][i] = self.saved[k][i] - _saved_bytes(torch, layer, inp, i)
                self.working[k][i] = _backward_working_bytes(torch, dev, layer, inp, i, loss_fn if i == L - 1 else None)
            if k == 0:
                if sweep == 0:
                    self.out_f[i], self.out_b[i] = out.numel() // mbs, out.numel() * out.element_size() // mbs
                    self.in_f[i], self.in_b[i] = inp.numel() // mbs, inp.numel() * inp.element_size() // mbs
                    self.flops[i] = _forward_flops(torch, eager_layers[i], inp, i) // mbs
                seconds, self.update_work[i] = _time_update(torch, timer, dev, layer, optimizer, *update_runs)
                self.update[i] = min(self.update[i], seconds)
            if fwd + bwd < sum(self.best[k][i]):
                self.best[k][i] = (fwd, bwd)
            x = out.detach()
            del out


def _recomputed(torch: Any, timer: _Timer, layers: list[nn.Module], make_input: Callable[[int], torch.Tensor],
                sizes: Sequence[int], dev: torch.device, loss_fn: Callable[[torch.Tensor], torch.Tensor] | None,
                warmup: int, repeats: int, sweeps: int, timing: LayerTiming) -> dict[int, tuple[tuple[float, ...], ...]]:
    """Per microbatch size, every layer's times recomputed in its backward (each wrapped in a
    non-reentrant checkpoint, as a ``recompute="full"`` stage runs it)."""
    wrapped = [_checkpointed(layer) for layer in layers]
    with torch.enable_grad():
        return {mbs: tuple(_recomputed_times(torch, timer, wrapped, make_input, mbs, dev, loss_fn, warmup,
                                             repeats, sweeps, timing)) for mbs in sizes}


def _scale_to_graphs(compute: dict, recomputed: dict | None, model: nn.Sequential,
                     make_input: Callable[[int], torch.Tensor], sizes: Sequence[int], dev: torch.device,
                     precision: Precision, user_loss: Any, repeats: int, compile: bool) -> None:
    """Scale each size's layer times in ``compute`` (and ``recomputed``) in place to add up to a
    whole microbatch replayed as one CUDA graph (:func:`graphed_microbatch_seconds`)."""
    for mbs in sizes:
        x = _make_input(make_input, mbs, dev)
        compute[mbs] = _scaled_to(compute[mbs], graphed_microbatch_seconds(model, x, precision, user_loss, repeats,
                                                                           compile=compile))
        if recomputed is not None:
            recomputed[mbs] = _scaled_to(recomputed[mbs], graphed_microbatch_seconds(
                model, x, precision, user_loss, repeats, Recomputation.FULL, compile=compile))


def _forward_flops(torch: Any, layer: nn.Module, inp: torch.Tensor, index: int) -> int:
    """FLOPs of ``layer``'s forward on ``inp`` (:func:`heteroplan.runtime.flops.forward_flops`)."""
    from heteroplan.runtime.flops import forward_flops

    with torch.no_grad():
        return forward_flops(lambda: _forward(layer, inp, index))


def _scaled_to(times: tuple[tuple[float, ...], ...], seconds: float) -> tuple[tuple[float, ...], ...]:
    """Per-layer ``(fwd_s, bwd_s, ...)`` with the forwards and backwards scaled to add up to
    ``seconds`` (later entries, the update, unchanged)."""
    ratio = seconds / max(sum(t[0] + t[1] for t in times), 1e-12)
    return tuple((t[0] * ratio, t[1] * ratio, *t[2:]) for t in times)


GRAPHED_MICROBATCHES = 8
"""Replays timed back-to-back per measurement of a graphed microbatch."""


def graphed_microbatch_seconds(model: nn.Sequential, x: torch.Tensor, precision: Precision | str,
                               loss_fn: Callable[[torch.Tensor], torch.Tensor] | None, repeats: int = 5,
                               recompute: Recomputation | str = "none", compile: bool = False) -> float:
    """Seconds per microbatch of ``model``'s forward, loss and backward on ``x`` (on a CUDA device,
    with the model) replayed as one CUDA graph, as ``RunConfig(cuda_graphs=True)`` runs it
    (:class:`~heteroplan.runtime.graphs.GraphedMicrobatch`, gradients accumulating in place): the
    median over ``repeats`` runs of :data:`GRAPHED_MICROBATCHES` replays in a row. ``loss_fn``:
    output -> scalar (default: the output's sum); ``recompute``: every layer recomputed in the
    backward, as a recomputing stage runs captured; ``compile``: every layer compiled
    (:func:`heteroplan.runtime.compiled.compiled_copy`). The parameters' gradients are ``None`` after."""
    torch = _torch()
    from heteroplan.runtime.dimensions import compute_context, run_layers
    from heteroplan.runtime.graphs import GraphedMicrobatch

    if x.device.type != "cuda":
        raise InputError("x", str(x.device), "CUDA graphs need the input (and the model) on a CUDA device")
    precision = enum_choice(Precision, "precision", precision)
    recompute = enum_choice(Recomputation, "recompute", recompute)
    timer = _Timer(torch, x.device)
    params = [p for p in model.parameters() if p.requires_grad]
    layers = list(model)
    if compile:
        from heteroplan.runtime.compiled import compiled_copy

        layers = [compiled_copy(layer) for layer in layers]

    def zero() -> None:
        for p in params:
            p.grad.zero_()

    def step(h: torch.Tensor) -> torch.Tensor:
        with compute_context(precision, x.device.type, recompute, captured=True):
            out = run_layers(layers, h, recompute, captured=True)
            return loss_fn(out) if loss_fn is not None else out.float().sum()

    for p in params:
        p.grad = torch.zeros_like(p)
    try:
        with torch.enable_grad():
            graphed = [GraphedMicrobatch(step, (x,), zero)]

            def replays() -> None:
                for _ in range(GRAPHED_MICROBATCHES):
                    graphed[0](x)

            timer(replays)  # warm
            seconds = statistics.median(timer(replays)[0] for _ in range(repeats)) / GRAPHED_MICROBATCHES
            graphed.clear()  # the graph and its memory pool
    finally:
        for p in params:
            p.grad = None
        torch.cuda.empty_cache()
    return seconds


def _checkpointed(layer: nn.Module) -> nn.Module:
    """``layer`` run as the runtime runs a recomputing stage's layer (non-reentrant checkpoint)."""
    from torch import nn
    from torch.utils.checkpoint import checkpoint

    class Checkpointed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = layer

        def forward(self, x: Any) -> Any:
            return checkpoint(self.layer, x, use_reentrant=False)

    return Checkpointed()


def _recomputed_times(torch: Any, timer: _Timer, layers: list, make_input: Callable[[int], Any], mbs: int,
                      dev: torch.device, loss_fn: Callable | None, warmup: int, repeats: int, sweeps: int,
                      timing: LayerTiming) -> list[tuple[float, float]]:
    """Per-layer ``(fwd_s, bwd_s)`` at ``mbs`` of checkpointed ``layers``: prefix-timed, or each
    layer alone (fastest of ``sweeps``)."""
    if timing is LayerTiming.PREFIX:
        return _prefix_times(torch, timer, layers, make_input, mbs, dev, loss_fn, warmup, repeats, sweeps)
    best = [(math.inf, math.inf)] * len(layers)
    for _ in range(sweeps):
        x = _make_input(make_input, mbs, dev)
        for i, layer in enumerate(layers):
            fwd, bwd, out = _time_layer(torch, timer, layer, _leaf_input(torch, x), i,
                                        loss_fn if i == len(layers) - 1 else None, warmup, repeats)
            if fwd + bwd < sum(best[i]):
                best[i] = (fwd, bwd)
            x = out.detach()
    return best


def _per_sample_line(measured: dict[int, list[int]], sizes: list[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Per layer, ``(bytes per sample, bytes per microbatch)`` of the line through the bytes
    measured at the smallest and largest microbatch sizes (both >= 0; one size: all per sample)."""
    lo, hi = min(measured), max(measured)
    m0, m1 = sizes[lo], sizes[hi]
    per_sample, fixed = [], []
    for a, b in zip(measured[lo], measured[hi], strict=True):
        slope = (b - a) / (m1 - m0) if m1 > m0 else a / m0
        slope = min(max(slope, 0.0), b / m1)  # keeps the intercept >= 0 too
        per_sample.append(int(round(slope)))
        fixed.append(int(round(max(b - slope * m1, 0.0))))
    return tuple(per_sample), tuple(fixed)


def _peak_increase_bytes(torch: Any, dev: torch.device, fn: Callable[[], Any]) -> int:
    """Peak live bytes on ``dev`` above those at the call's start, while ``fn()`` runs."""
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        base = torch.cuda.memory_allocated(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        fn()
        torch.cuda.synchronize(dev)
        return max(int(torch.cuda.max_memory_allocated(dev)) - base, 0)
    from heteroplan.runtime.memory import peak_increase

    return max(peak_increase(fn)[0], 0)


def _backward_working_bytes(torch: Any, dev: torch.device, layer: nn.Module, inp: torch.Tensor, index: int,
                            loss_fn: Callable[[torch.Tensor], torch.Tensor] | None) -> int:
    """Transient bytes of the layer's backward on ``inp``, with its parameters' gradients already
    allocated (as after the first microbatch) and its output's gradient given."""
    params = [p for p in layer.parameters() if p.requires_grad]
    for p in params:
        p.grad = torch.zeros_like(p)
    out = _forward(layer, inp, index)
    target = loss_fn(out) if loss_fn is not None else out
    if not target.requires_grad:
        return 0
    grad = None if loss_fn is not None else torch.randn_like(target)
    work = _peak_increase_bytes(torch, dev, lambda: target.backward(grad))
    for p in params:
        p.grad = None
    inp.grad = None
    return work


def _overhead_bytes(torch: Any, dev: torch.device, model: nn.Module, layers: list, make_input: Callable[[int], Any],
                    mbs: int, loss_fn: Callable | None) -> int:
    """Bytes the CUDA caching allocator keeps in live blocks after one forward and backward of the
    whole model that were not alive before it (cuBLAS workspaces); 0 on CPU. Measured against
    what is allocated before the pass, so tensors the caller holds elsewhere on the device are not
    counted; before anything else is profiled: nothing of the profiler's own is alive then.

    The process's cuBLAS workspaces are released first: a process that already ran matmuls (an
    earlier profile, say) holds them, and they would be missing from this profile's overhead
    (measured on an H100: 68 MB in the first of two profiles of one process, 0 in the second,
    while a run's fresh process allocates them again)."""
    if dev.type != "cuda":
        return 0
    import gc

    clear_workspaces = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)  # torch's own tests use it
    if clear_workspaces is not None:
        torch.cuda.synchronize(dev)
        clear_workspaces()

    def allocated_now() -> int:
        for p in model.parameters():
            p.grad = None
        gc.collect()
        torch.cuda.synchronize(dev)
        return int(torch.cuda.memory_allocated(dev))

    before = allocated_now()
    x = _make_input(make_input, mbs, dev)
    for i, layer in enumerate(layers):
        x = _forward(layer, x, i)
    (loss_fn(x) if loss_fn is not None else x.float().sum()).backward()
    del x
    return max(allocated_now() - before, 0)
