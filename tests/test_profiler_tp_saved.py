"""The profiler's saved-for-backward bytes of a tensor-parallel layer.

A layer sharded with ``shard_layers`` computes on DTensors, and autograd saves DTensors for its
backward; the profiler counts the local shard each holds. Oracle: sharded over a one-rank group
(gloo, world size 1), a block holds the whole layer and must save exactly the bytes the plain
block saves (before the fix, the DTensors were skipped and the block counted 49920 of 132096 B
per sample in the closed loop's TP-2 profile).
"""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch", reason="the runtime tests need torch: pip install torch==2.13.0 (CPU wheel: --index-url https://download.pytorch.org/whl/cpu)")


from heteroplan.runtime import TinyGPTTask  # noqa: E402
from heteroplan.runtime.profiler import _saved_bytes  # noqa: E402
from heteroplan.runtime.tensor_parallel import shard_layers  # noqa: E402


def test_a_sharded_block_saves_the_bytes_of_the_plain_block(one_rank_group) -> None:
    task = TinyGPTTask(vocab=64, seq_len=16, d_model=32, n_layers=1, n_heads=4)
    torch.manual_seed(0)
    model = task.build_model()
    index = next(i for i, layer in enumerate(model) if hasattr(layer, "tensor_parallel_plan"))
    x = torch.randn(4, task.seq_len, task.d_model, requires_grad=True)
    plain = _saved_bytes(torch, model[index], x, index)
    sharded = torch.nn.Sequential(copy.deepcopy(model[index]))
    shard_layers(sharded, one_rank_group, 1, "cpu")
    assert any(hasattr(p, "to_local") for p in sharded.parameters())  # it computes on DTensors
    assert _saved_bytes(torch, sharded[0], x, index) == plain > 0
