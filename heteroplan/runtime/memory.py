"""Measured memory of a rank: what is alive at the peak of an iteration, in bytes.

On CUDA the caching allocator's own counters: ``max_memory_allocated`` (bytes in live tensors)
and ``max_memory_reserved`` (bytes the allocator holds from the driver, what an out-of-memory
error is about), reset at the start of the measured span. On CPU torch's profiler records every
allocation and free (``profile_memory=True``) in order; the peak of their running sum is the
largest increase of live bytes over the span, added to the bytes alive when it starts (the
module's parameters and buffers, their gradients if any, and the optimizer state). The CPU
allocator keeps no cache, so there reserved = allocated.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

__all__ = ["PeakMemory", "persistent_bytes", "tensor_bytes", "peak_increase"]


def tensor_bytes(tensors: Any) -> int:
    """Bytes of the distinct storages among ``tensors`` (an iterable of tensors; ``None`` skipped)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for t in tensors:
        if t is None:
            continue
        data = t.to_local() if hasattr(t, "to_local") else t
        storage = data.untyped_storage()
        key = (storage.data_ptr(), storage.nbytes())
        if key not in seen:
            seen.add(key)
            total += storage.nbytes()
    return total


def persistent_bytes(module: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> int:
    """Bytes alive between iterations: ``module``'s parameters, buffers and gradients, and the
    tensors in ``optimizer``'s state (a ``ZeroRedundancyOptimizer``: pass its local optimizer)."""
    tensors: list[Any] = [*module.parameters(), *module.buffers(), *(p.grad for p in module.parameters())]
    if optimizer is not None:
        tensors += [v for state in optimizer.state.values() for v in state.values() if isinstance(v, torch.Tensor)]
    return tensor_bytes(tensors)


class PeakMemory:
    """Peak allocated and reserved bytes on ``device`` between :meth:`start` and :meth:`stop`.

    ``alive_at_start`` (bytes) is what the CPU measurement adds to the profiler's peak increase
    (CUDA's counters include it already).
    """

    def __init__(self, device: torch.device, alive_at_start: int = 0) -> None:
        self.device = device
        self.alive_at_start = alive_at_start
        self._profiler: Any = None

    def start(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            return
        from torch.profiler import ProfilerActivity, profile

        self._profiler = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
        self._profiler.__enter__()

    def stop(self) -> tuple[int, int]:
        """``(peak allocated bytes, peak reserved bytes)`` over the span."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            return (int(torch.cuda.max_memory_allocated(self.device)), int(torch.cuda.max_memory_reserved(self.device)))
        self._profiler.__exit__(None, None, None)
        peak = self.alive_at_start + _running_sum(self._profiler)[0]
        return peak, peak


def _running_sum(prof: Any) -> tuple[int, int]:
    """``(largest, final)`` running sum of the CPU allocations (+) and frees (-) a finished profiler
    recorded, in bytes."""
    events = [e for e in prof.profiler.kineto_results.events()
              if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU]
    events.sort(key=lambda e: e.start_ns())
    running = peak = 0
    for e in events:
        running += e.nbytes()
        peak = max(peak, running)
    return peak, running


def peak_increase(fn: Callable[[], Any]) -> tuple[int, int, Any]:
    """Run ``fn()`` on CPU under torch's profiler: ``(peak increase of live bytes, live bytes still
    allocated at the end relative to the start, fn's result)``."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn()
    peak, end = _running_sum(prof)
    return peak, end, result
