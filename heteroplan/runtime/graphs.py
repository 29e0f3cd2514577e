"""One microbatch's forward, loss and backward captured as a CUDA graph and replayed.

A bf16 microbatch of a mid-sized model is launch-bound: on an H100 the 320M-parameter GPT of
docs/runtime.md costs 55-68 ms a microbatch at every microbatch size 1-8, the host's launch of
some 2,000 kernels, while its arithmetic is a fraction of that. Replaying a captured graph
launches the whole microbatch at once. :class:`GraphedMicrobatch` is torch's whole-network
capture (``torch.cuda.graph``, docs "CUDA Graphs"): warm-up iterations on a side stream, one
capture, then ``replay()`` per microbatch with the inputs copied into the graph's static tensors.
The parameters' gradients must exist before the capture (the runtime's flat gradient buffer):
the captured backward adds into them in place, so the replays accumulate as eager microbatches
do. The optimizer step, the data-parallel all-reduce and the loss's read stay outside the graph.

What a graph cannot replay: a different shape (one microbatch size per graph), host
synchronisation inside the microbatch, several microbatches in flight (each replay overwrites the
previous one's activations: one-stage plans only), autocast's cast cache (off under capture) and
the RNG state a recomputing checkpoint restores (not restored under capture: no dropout there).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from heteroplan.errors import InputError
from heteroplan.planner.plan import OptimizerSharding, Plan, Recomputation
from heteroplan.run_options import PipelineEngine
from heteroplan.runtime.config import RunConfig

__all__ = ["GraphedMicrobatch", "WARMUP_ITERATIONS", "check_cuda_graphs", "check_graphed_layers"]

WARMUP_ITERATIONS = 3
"""Eager iterations on a side stream before the capture (torch's docs use 3): cuBLAS / cuDNN
workspaces and autograd's lazily built state exist before the graph records."""


def check_cuda_graphs(plan: Plan, config: RunConfig) -> None:
    """Raise :class:`InputError` where ``config.cuda_graphs`` cannot run ``plan``: graphs replay one
    microbatch at a time on one stage (each replay overwrites the last one's activations), with
    TP 1 and no sharded optimizer state, under heteroplan's own loop in the 1F1B order. (A
    recomputing stage is captured too, if its layers draw no random numbers:
    :func:`check_graphed_layers`.)"""
    if not config.cuda_graphs:
        return
    if plan.pp != 1:
        raise InputError("config.cuda_graphs", True, f"replays one microbatch at a time: one-stage plans only "
                         f"(this plan has {plan.pp} stages)")
    stage = plan.stages[0]
    if any(group.tp > 1 for group in stage.replicas):
        raise InputError("config.cuda_graphs", True, "tensor-parallel stages are not captured; use tp=1")
    if stage.optimizer_sharding is not OptimizerSharding.NONE:
        raise InputError("config.cuda_graphs", True, "not with sharded optimizer state (plan.stages[0]."
                         f"optimizer_sharding={stage.optimizer_sharding.value!r}): its broadcasts of the "
                         "updated parameters are not checked against a captured graph")
    if config.pipeline is PipelineEngine.TORCH:
        raise InputError("config.pipeline", config.pipeline, "CUDA graphs run heteroplan's own loop; use 'auto'")
    if config.schedule != "1f1b":
        raise InputError("config.schedule", config.schedule, "CUDA graphs run each microbatch's forward and "
                         "backward together (1F1B's order on one stage); use '1f1b'")


_RANDOM_LAYERS = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)


def check_graphed_layers(layers: nn.Module, recompute: Recomputation) -> None:
    """Raise :class:`InputError` where a captured stage with ``recompute`` would train differently
    from an eager one: a recomputing stage whose layers hold dropout with ``p > 0`` (under capture
    the checkpoints cannot save and restore the RNG state, so the recomputed forward would draw
    other masks than the forward did). Dropout called as a function (``F.dropout``) is not seen:
    a model that does so must not combine recomputation with CUDA graphs."""
    if recompute is Recomputation.NONE:
        return
    for name, module in layers.named_modules():
        if isinstance(module, _RANDOM_LAYERS) and module.p > 0 and module.training:
            raise InputError("config.cuda_graphs", True, f"a recomputing stage's layer {name!r} is "
                             f"{type(module).__name__}(p={module.p}): under capture its recomputation would draw "
                             "other random numbers; use recompute='none' or dropout 0")


class GraphedMicrobatch:
    """``loss = step(*inputs); loss.backward()`` as one CUDA graph.

    Args:
        step: the microbatch's forward and loss, ``(*inputs) -> scalar loss``; it must not
            synchronise with the host and must use autocast with ``cache_enabled=False``.
        example: device tensors of the inputs' shapes and dtypes (copied; the first replay's
            inputs are fine).
        zero_gradients: sets the parameters' gradients to zero in place (run after the warm-up,
            whose backwards accumulate into them).

    Calling it copies ``inputs`` into the static inputs, replays the graph and returns the static
    loss (a device tensor the next call overwrites: read or copy it before calling again).
    """

    def __init__(self, step: Callable[..., torch.Tensor], example: Sequence[torch.Tensor],
                 zero_gradients: Callable[[], None]) -> None:
        self.static_inputs = tuple(t.detach().clone() for t in example)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP_ITERATIONS):
                step(*self.static_inputs).backward()
        torch.cuda.current_stream().wait_stream(side)
        zero_gradients()
        self.graph = torch.cuda.CUDAGraph()
        # thread_local: only this thread may not make unsafe CUDA calls while capturing (the NCCL
        # watchdog and other threads may; the backward's device thread launches onto the capture stream)
        with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
            self.static_loss = step(*self.static_inputs)
            self.static_loss.backward()
        # (entering torch.cuda.graph synchronised and emptied the cache: the warm-up's blocks went
        # back before the graph's pool was made, so the two pools' peaks do not add up)
        self.static_loss = self.static_loss.detach()

    def __call__(self, *inputs: torch.Tensor) -> torch.Tensor:
        if len(inputs) != len(self.static_inputs):
            raise ValueError(f"the graph was captured with {len(self.static_inputs)} inputs, got {len(inputs)}")
        for static, value in zip(self.static_inputs, inputs, strict=True):
            if static.shape != value.shape:
                raise ValueError(f"the graph was captured for inputs of shape {tuple(static.shape)}, "
                                 f"got {tuple(value.shape)}")
            static.copy_(value, non_blocking=True)
        self.graph.replay()
        return self.static_loss
