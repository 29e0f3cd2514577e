"""``torch.compile`` per plan layer: the compiled path of the runtime and the profiler.

Each plan layer (the embedding, every block, the head) is compiled on its own (inductor, static
shapes: one microbatch size per compiled graph), so a stage is still the plan's layers
``[first, last)``, a pipeline still cuts between layers, recomputation still checkpoints one
layer at a time, and parameters keep their names (``nn.Module.compile`` compiles in place), so
checkpoints move between compiled and eager runs. The profiler compiles the same way
(``profile_layers(compile=True)``) so a compiled run is predicted from compiled times.

With CUDA graphs the compiled layers are captured like eager ones: they are compiled during the
graph's eager warm-up iterations, before the capture. Not compiled: tensor-parallel stages
(DTensor layers; refused).
"""

from __future__ import annotations

import functools
import shutil

import torch
from torch import nn

from heteroplan.errors import InputError
from heteroplan.planner.plan import Plan

__all__ = ["compile_unavailable", "check_compile", "compile_in_place", "compiled_copy"]

OPTIONS = {"dynamic": False}
"""``torch.compile`` keyword arguments of every compiled layer (default mode, inductor)."""


@functools.cache
def compile_unavailable(device_type: str) -> str | None:
    """Why ``torch.compile`` cannot run on ``device_type`` here, or ``None`` when it can (inductor
    needs a C++ compiler for CPU code, Triton for CUDA code)."""
    try:
        import torch._dynamo as dynamo
    except ImportError as exc:  # pragma: no cover - part of torch
        return f"torch._dynamo cannot be imported: {exc}"
    if not dynamo.is_dynamo_supported():
        return "torch.compile is not supported on this Python/platform"
    if device_type == "cpu" and not any(shutil.which(cc) for cc in ("g++", "c++", "clang++")):
        return "inductor's CPU backend needs a C++ compiler (g++ or clang++) on the PATH"
    if device_type == "cuda":
        try:
            import triton  # noqa: F401
        except ImportError:
            return "inductor's CUDA backend needs Triton (pip install triton)"
    return None


def check_compile(plan: Plan, device_type: str, field: str = "config.compile") -> None:
    """Raise :class:`InputError` naming ``field`` where compiling cannot run ``plan`` on ``device_type``."""
    reason = compile_unavailable(device_type)
    if reason is not None:
        raise InputError(field, True, reason)
    for s, stage in enumerate(plan.stages):
        if any(group.tp > 1 for group in stage.replicas):
            raise InputError(field, True, f"tensor-parallel stages (plan.stages[{s}]) are not compiled: their "
                             "DTensor layers are not covered; use tp=1 or compile=False")


def compile_in_place(layers: nn.Module) -> None:
    """Compile every child of ``layers`` (a plan layer each) in place (names unchanged)."""
    for layer in layers.children():
        layer.compile(**OPTIONS)


def compiled_copy(layer: nn.Module) -> nn.Module:
    """``layer`` compiled, as a wrapper sharing its parameters (the profiler's own view of it)."""
    return torch.compile(layer, **OPTIONS)
