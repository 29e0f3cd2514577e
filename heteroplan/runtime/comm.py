"""Point-to-point tensors of any shape between pipeline stages.

The first tensor on each link (peer rank, tag) is preceded by a fixed-size header (dtype
code, dims), so stages need not know each other's activation shapes; every later tensor on
that link must have the same shape and dtype and travels as one message. In a pipeline the
activation and the gradient transfer of every microbatch lie on the critical path, and on a
busy 2-core machine a separate header message cost about 1 ms per transfer (PP 2 x mbs 2: 12%
of the iteration; docs/runtime.md). Sends are asynchronous: wait on what :meth:`Links.send`
returns before the buffers may be reused.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from heteroplan.errors import InputError

__all__ = ["Links", "PendingSend", "TAG_ACTIVATION", "TAG_GRADIENT"]

TAG_ACTIVATION = 1
TAG_GRADIENT = 2
_HEADER = 10
_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.bool]

Signature = tuple[torch.dtype, tuple[int, ...]]


@dataclass
class PendingSend:
    """Sends in flight; holds their buffers until :meth:`wait` returns."""

    works: list
    buffers: list[torch.Tensor]

    def wait(self) -> None:
        for work in self.works:
            work.wait()


class Links:
    """One rank's point-to-point links; remembers the tensor shape agreed on each link."""

    def __init__(self) -> None:
        self._sent: dict[tuple[int, int], Signature] = {}
        self._received: dict[tuple[int, int], Signature] = {}

    def send(self, tensor: torch.Tensor, dst: int, tag: int) -> PendingSend:
        """Start sending ``tensor`` to rank ``dst`` (a header first, on a new link only)."""
        payload = tensor.detach().contiguous()
        signature = (payload.dtype, tuple(payload.shape))
        known = self._sent.get((dst, tag))
        if known is None:
            header = _header(payload)
            self._sent[(dst, tag)] = signature
            return PendingSend([dist.isend(header, dst, tag=tag), dist.isend(payload, dst, tag=tag)],
                               [header, payload])
        if known != signature:
            raise InputError(
                f"tensor to rank {dst} (tag {tag})", f"{signature[0]} {list(signature[1])}",
                f"the first tensor on this link was {known[0]} {list(known[1])}; pipeline boundary "
                "tensors must keep their shape and dtype for the whole run",
            )
        return PendingSend([dist.isend(payload, dst, tag=tag)], [payload])

    def recv(self, src: int, tag: int, device: torch.device) -> torch.Tensor:
        """Receive a tensor sent with :meth:`send` from rank ``src`` (blocking)."""
        signature = self._received.get((src, tag))
        if signature is None:
            header = torch.empty(_HEADER, dtype=torch.int64, device=device)
            dist.recv(header, src, tag=tag)
            h = header.tolist()
            signature = (_DTYPES[h[0]], tuple(h[2 : 2 + h[1]]))
            self._received[(src, tag)] = signature
        out = torch.empty(signature[1], dtype=signature[0], device=device)
        dist.recv(out, src, tag=tag)
        return out


def _header(tensor: torch.Tensor) -> torch.Tensor:
    if tensor.dtype not in _DTYPES:
        raise InputError("activation.dtype", str(tensor.dtype), f"cannot be sent between stages; use one of {_DTYPES}")
    if tensor.dim() > _HEADER - 2:
        raise InputError("activation.shape", tuple(tensor.shape), f"at most {_HEADER - 2} dimensions")
    header = torch.zeros(_HEADER, dtype=torch.int64, device=tensor.device)
    header[0] = _DTYPES.index(tensor.dtype)
    header[1] = tensor.dim()
    if tensor.dim():
        header[2 : 2 + tensor.dim()] = torch.tensor(tensor.shape, dtype=torch.int64)
    return header
