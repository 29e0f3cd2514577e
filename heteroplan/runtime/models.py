"""A small GPT and a synthetic token dataset (no downloads), plus the task protocol.

A *task* bundles what every rank needs to train: how to build the model (a
``torch.nn.Sequential`` whose layer ``i`` is plan layer ``i``), how to produce samples
``[start, start + count)`` of iteration ``step`` (deterministically, so each rank makes its own
slice without any data loader), and the loss (mean over the samples it is given).
Tasks must be picklable: ranks are separate processes.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from heteroplan.errors import InputError, check_int
from heteroplan.inputs import is_count

__all__ = ["TrainTask", "TinyGPTTask", "SequentialTask", "tiny_gpt", "Embedding", "Block", "Head", "load_task",
           "GPT_320M", "GPT_1_3B", "gpt_320m", "gpt_1_3b"]


@runtime_checkable
class TrainTask(Protocol):
    """What the runtime needs to train a model (see module doc)."""

    def build_model(self) -> nn.Sequential:
        """The full model; layer ``i`` is plan layer ``i``. Must be deterministic."""
        ...

    def batch(self, step: int, start: int, count: int) -> tuple[Tensor, Tensor]:
        """Inputs of layer 0 and targets of samples ``[start, start + count)`` of iteration ``step``."""
        ...

    def loss(self, output: Tensor, target: Tensor) -> Tensor:
        """Mean loss over the samples of ``output``."""
        ...


class Embedding(nn.Module):
    """Token plus learned position embedding: ``(batch, seq)`` ids -> ``(batch, seq, d_model)``."""

    def __init__(self, vocab: int, seq_len: int, d_model: int) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, d_model)
        self.positions = nn.Parameter(torch.zeros(seq_len, d_model))
        nn.init.normal_(self.positions, std=0.02)

    def forward(self, ids: Tensor) -> Tensor:
        return self.tokens(ids) + self.positions[: ids.shape[1]]


class Block(nn.Module):
    """Pre-norm GPT-2 transformer block: causal self-attention and a 4x MLP.

    ``q``, ``k``, ``v`` are separate linears and the attention takes its head count from the
    width it is given (``local width / head_dim``), so the block runs unchanged when
    :meth:`tensor_parallel_plan` shards it Megatron-style: ``q, k, v`` and ``mlp.0`` column-parallel
    (each TP rank holds ``n_heads / tp`` heads and ``4 d / tp`` hidden units), ``proj`` and
    ``mlp.2`` row-parallel (their outputs are summed over the TP group, so the full activation is
    on every TP rank after each of them).
    """

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.ln1 = nn.LayerNorm(d_model)
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, d_model)
        self.v = nn.Linear(d_model, d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        h = self.ln1(x)
        q, k, v = (lin(h) for lin in (self.q, self.k, self.v))
        heads = q.shape[-1] // self.head_dim  # n_heads, or n_heads / tp under tensor parallelism
        q, k, v = (y.view(b, t, heads, self.head_dim).transpose(1, 2) for y in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, heads * self.head_dim))
        return x + self.mlp(self.ln2(x))

    def tensor_parallel_plan(self, tp: int) -> dict[str, str]:
        """``{submodule: "colwise" | "rowwise"}`` for ``tp`` ranks; raises when heads do not divide."""
        if self.n_heads % tp:
            raise InputError("plan tp", tp, f"must divide the model's n_heads={self.n_heads}")
        return {"q": "colwise", "k": "colwise", "v": "colwise", "proj": "rowwise",
                "mlp.0": "colwise", "mlp.2": "rowwise"}


class Head(nn.Module):
    """Final layer norm and the projection to vocabulary logits."""

    def __init__(self, d_model: int, vocab: int) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(d_model)
        self.out = nn.Linear(d_model, vocab)

    def forward(self, x: Tensor) -> Tensor:
        return self.out(self.ln(x))


def _check_gpt_shape(vocab: object, seq_len: object, d_model: object, n_layers: object, n_heads: object) -> None:
    """Refuse, naming the field, a GPT's size that is no integer >= 1 or a width that its heads do not divide."""
    for name, value in (("vocab", vocab), ("seq_len", seq_len), ("d_model", d_model), ("n_layers", n_layers),
                        ("n_heads", n_heads)):
        check_int(name, value, 1)
    if d_model % n_heads:  # type: ignore[operator]
        raise InputError("d_model", d_model, f"must be divisible by n_heads={n_heads}")


def tiny_gpt(vocab: int = 64, seq_len: int = 16, d_model: int = 32, n_layers: int = 4, n_heads: int = 2,
             seed: int = 0, dtype: torch.dtype = torch.float32) -> nn.Sequential:
    """A GPT of ``n_layers + 2`` plan layers: embedding, ``n_layers`` blocks, head."""
    _check_gpt_shape(vocab, seq_len, d_model, n_layers, n_heads)
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        layers = [Embedding(vocab, seq_len, d_model)] + [Block(d_model, n_heads) for _ in range(n_layers)]
        model = nn.Sequential(*layers, Head(d_model, vocab))
    finally:
        torch.random.set_rng_state(gen_state)
    return model.to(dtype)


@dataclass(frozen=True)
class TinyGPTTask:
    """Next-token prediction on synthetic sequences with a learnable pattern.

    Sample ``i`` of iteration ``step`` is a sequence ``x_j = (a + b j) mod vocab`` with ``a, b``
    drawn from a generator seeded by ``(seed, step, i)`` — the same on every rank — so the
    loss falls as the model learns the arithmetic progression.
    """

    vocab: int = 64
    seq_len: int = 16
    d_model: int = 32
    n_layers: int = 4
    n_heads: int = 2
    seed: int = 0
    dtype: str = "float32"

    def __post_init__(self) -> None:  # checked here, not first in every rank that builds the model
        for name in ("vocab", "seq_len", "d_model", "n_layers", "n_heads"):  # np.int64 too, stored as int
            if is_count(getattr(self, name)):
                object.__setattr__(self, name, int(getattr(self, name)))
        _check_gpt_shape(self.vocab, self.seq_len, self.d_model, self.n_layers, self.n_heads)
        if not is_count(self.seed):
            raise InputError("seed", self.seed, "must be an integer")
        object.__setattr__(self, "seed", int(self.seed))
        if self.dtype not in ("float32", "float64"):
            raise InputError("dtype", self.dtype, "choose 'float32' or 'float64'")

    @property
    def num_layers(self) -> int:
        """Plan layers: embedding + blocks + head."""
        return self.n_layers + 2

    @property
    def parameter_count(self) -> int:
        """Parameters of the model, analytically: per block ``12 d^2 + 13 d`` (q, k, v and the
        projection ``4 (d^2 + d)``, the MLP ``8 d^2 + 5 d``, two layer norms ``4 d``), the embeddings
        ``(vocab + seq_len) d``, the head ``d vocab + vocab + 2 d``."""
        d, v = self.d_model, self.vocab
        return self.n_layers * (12 * d * d + 13 * d) + (v + self.seq_len) * d + d * v + v + 2 * d

    @property
    def forward_flops_per_sample(self) -> int:
        """Forward FLOPs of one sample (``seq_len`` tokens), analytically, as torch's FLOP counter
        counts them (2 per multiply-add of a matmul; biases, norms and activations not counted;
        attention over the full ``s x s`` scores): per block ``24 d^2 s`` for the six matmuls and
        ``4 s^2 d`` for the attention's two, the head ``2 d vocab s``, the embedding lookup 0.
        That is ``2 x (parameters - embeddings - biases and norms) x tokens + attention``."""
        d, s = self.d_model, self.seq_len
        return self.n_layers * (24 * d * d * s + 4 * s * s * d) + 2 * d * self.vocab * s

    def build_model(self) -> nn.Sequential:
        if self.dtype not in ("float32", "float64"):
            raise InputError("dtype", self.dtype, "choose 'float32' or 'float64'")
        return tiny_gpt(self.vocab, self.seq_len, self.d_model, self.n_layers, self.n_heads, self.seed,
                        getattr(torch, self.dtype))

    def batch(self, step: int, start: int, count: int) -> tuple[Tensor, Tensor]:
        idx = torch.arange(start, start + count, dtype=torch.int64)
        # a per-sample hash of (seed, step, index): cheap, deterministic, identical on every rank
        h = (idx * 1_000_003 + step * 7_919 + self.seed * 104_729) % 2_147_483_647
        a = (h * 48_271) % self.vocab
        b = 1 + (h // self.vocab) % max(self.vocab // 4, 1)
        pos = torch.arange(self.seq_len + 1, dtype=torch.int64)
        seq = (a[:, None] + b[:, None] * pos[None, :]) % self.vocab
        return seq[:, :-1], seq[:, 1:]

    def loss(self, output: Tensor, target: Tensor) -> Tensor:
        return F.cross_entropy(output.reshape(-1, output.shape[-1]), target.reshape(-1))


GPT_320M = TinyGPTTask(vocab=8192, seq_len=512, d_model=1024, n_layers=24, n_heads=16)
"""The closed loop's GPT (docs/runtime.md): 24 blocks, width 1024, 16 heads, sequence 512,
vocabulary 8192; 319,621,120 parameters (:attr:`TinyGPTTask.parameter_count`)."""

GPT_1_3B = TinyGPTTask(vocab=8192, seq_len=512, d_model=2048, n_layers=24, n_heads=16)
"""A 1B-class GPT: GPT-3 XL's 24 blocks of width 2048 (16 heads of 128), with the 320M GPT's
sequence and vocabulary (the same tokens per sample); 1,243,213,824 parameters, 1.21B of them in
the blocks."""


def gpt_320m() -> TinyGPTTask:
    """:data:`GPT_320M` (``--model heteroplan.runtime.models:gpt_320m``)."""
    return GPT_320M


def gpt_1_3b() -> TinyGPTTask:
    """:data:`GPT_1_3B` (``--model heteroplan.runtime.models:gpt_1_3b``)."""
    return GPT_1_3B


@dataclass(frozen=True)
class SequentialTask:
    """A user model: three picklable (module-level) callables.

    Attributes:
        model_fn: ``() -> nn.Sequential`` (deterministic: seed inside).
        batch_fn: ``(step, start, count) -> (inputs, targets)``.
        loss_fn: ``(output, target) -> mean loss``.
    """

    model_fn: Callable[[], nn.Sequential]
    batch_fn: Callable[[int, int, int], tuple[Tensor, Tensor]]
    loss_fn: Callable[[Tensor, Tensor], Tensor]

    def build_model(self) -> nn.Sequential:
        model = self.model_fn()
        if not isinstance(model, nn.Sequential):
            raise InputError("model_fn", type(model).__name__, "must return a torch.nn.Sequential")
        return model

    def batch(self, step: int, start: int, count: int) -> tuple[Tensor, Tensor]:
        return self.batch_fn(step, start, count)

    def loss(self, output: Tensor, target: Tensor) -> Tensor:
        return self.loss_fn(output, target)


def _import_from_cwd(name: str) -> Any:
    """``import name``; failing that for want of its top-level module, with the working directory first
    on ``sys.path`` (kept there, so processes started from this one find it too)."""
    import importlib

    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        top, cwd = name.partition(".")[0], os.getcwd()
        if exc.name != top or cwd in sys.path or not (Path(cwd, f"{top}.py").is_file() or Path(cwd, top).is_dir()):
            raise
    sys.path.insert(0, cwd)
    return importlib.import_module(name)


def load_task(spec: str) -> TrainTask:
    """The task ``"package.module:factory"`` names: ``factory()`` is imported and called, and must return
    a :class:`TrainTask` (wrap a plain ``nn.Sequential`` in :class:`SequentialTask`). Used by
    ``heteroplan profile/run --model`` and the torchrun entry point, which call it in every process.
    A module that is not importable otherwise is looked for in the working directory (as ``python -m``
    does; the ``heteroplan`` command itself does not put it on ``sys.path``)."""
    if not isinstance(spec, str) or spec.count(":") != 1 or not all(spec.split(":")):
        raise InputError("--model", spec, "expected 'package.module:factory'")
    module_name, attr = spec.split(":")
    try:
        factory = getattr(_import_from_cwd(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise InputError("--model", spec, f"cannot import it: {exc}") from None
    try:
        task = factory() if callable(factory) else None
    except Exception as exc:  # a factory that needs arguments, or fails: named, as a policy plugin's is
        raise InputError("--model", spec, f"calling it with no arguments failed: {type(exc).__name__}: {exc}") from exc
    if isinstance(task, nn.Module):
        raise InputError("--model", spec, "returned a module; return a task (e.g. SequentialTask(model_fn, batch_fn, "
                         "loss_fn)) so the runtime can make batches and losses")
    if not all(callable(getattr(task, name, None)) for name in ("build_model", "batch", "loss")):
        raise InputError("--model", spec, "must name a callable returning a TrainTask (build_model, batch, loss)")
    return task
