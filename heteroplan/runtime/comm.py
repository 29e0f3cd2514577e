"""Point-to-point tensors of any shape between pipeline stages.

Each tensor is preceded by a fixed-size header (dtype code, rank, dims), so stages need not
know each other's activation shapes. Sends are asynchronous; the caller keeps the returned
handles (and thereby the buffers) alive until it waits on them.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from heteroplan.errors import InputError

__all__ = ["send_tensor", "recv_tensor", "TAG_ACTIVATION", "TAG_GRADIENT"]

TAG_ACTIVATION = 1
TAG_GRADIENT = 2
_HEADER = 10
_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.bool]


def send_tensor(tensor: torch.Tensor, dst: int, tag: int) -> list:
    """Start sending ``tensor`` to rank ``dst``; returns the pending work handles."""
    if tensor.dtype not in _DTYPES:
        raise InputError("activation.dtype", str(tensor.dtype), f"cannot be sent between stages; use one of {_DTYPES}")
    if tensor.dim() > _HEADER - 2:
        raise InputError("activation.shape", tuple(tensor.shape), f"at most {_HEADER - 2} dimensions")
    header = torch.zeros(_HEADER, dtype=torch.int64, device=tensor.device)
    header[0] = _DTYPES.index(tensor.dtype)
    header[1] = tensor.dim()
    if tensor.dim():
        header[2 : 2 + tensor.dim()] = torch.tensor(tensor.shape, dtype=torch.int64)
    payload = tensor.detach().contiguous()
    return [dist.isend(header, dst, tag=tag), dist.isend(payload, dst, tag=tag), header, payload]


def recv_tensor(src: int, tag: int, device: torch.device) -> torch.Tensor:
    """Receive a tensor sent with :func:`send_tensor` from rank ``src`` (blocking)."""
    header = torch.empty(_HEADER, dtype=torch.int64, device=device)
    dist.recv(header, src, tag=tag)
    h = header.tolist()
    shape = tuple(h[2 : 2 + h[1]])
    out = torch.empty(shape, dtype=_DTYPES[h[0]], device=device)
    dist.recv(out, src, tag=tag)
    return out
