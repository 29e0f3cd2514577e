"""Pipeline links: a shape header on a link's first tensor only, checked thereafter.

``torch.distributed``'s point-to-point calls are replaced by an in-memory wire, so the test
sees exactly which messages a link sends and receives (the real gloo path runs in
``test_runtime_train.py``, where pipelined training must match single-process training).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the runtime tests need torch: pip install torch==2.13.0 (CPU wheel: --index-url https://download.pytorch.org/whl/cpu)")


from heteroplan.errors import InputError  # noqa: E402
from heteroplan.runtime import comm  # noqa: E402


class _Wire:
    """Messages in flight per (tag): isend appends a copy, recv pops into the given buffer."""

    def __init__(self) -> None:
        self.queue: list[torch.Tensor] = []
        self.sends = 0
        self.recvs = 0

    def isend(self, tensor: torch.Tensor, dst: int, tag: int):
        self.sends += 1
        self.queue.append(tensor.clone())

        class _Done:
            def wait(self) -> None:
                return None

        return _Done()

    def recv(self, tensor: torch.Tensor, src: int, tag: int) -> None:
        self.recvs += 1
        message = self.queue.pop(0)
        assert message.shape == tensor.shape and message.dtype == tensor.dtype, (message.shape, tensor.shape)
        tensor.copy_(message)


@pytest.fixture
def wire(monkeypatch: pytest.MonkeyPatch) -> _Wire:
    w = _Wire()
    monkeypatch.setattr(comm.dist, "isend", w.isend)
    monkeypatch.setattr(comm.dist, "recv", w.recv)
    return w


def test_header_only_on_first_tensor_of_a_link(wire: _Wire) -> None:
    sender, receiver = comm.Links(), comm.Links()
    cpu = torch.device("cpu")
    tensors = [torch.randn(4, 8, 3, dtype=torch.float64) * i for i in range(4)]
    for i, t in enumerate(tensors):
        sender.send(t, dst=1, tag=comm.TAG_ACTIVATION).wait()
        assert wire.sends == i + 2  # header + payload, then payload only
        got = receiver.recv(0, comm.TAG_ACTIVATION, cpu)
        assert wire.recvs == i + 2
        assert got.dtype == torch.float64 and torch.equal(got, t)
    # A new link (other tag) starts with its own header.
    sender.send(torch.ones(2), dst=1, tag=comm.TAG_GRADIENT)
    assert wire.sends == 4 + 1 + 2
    assert torch.equal(receiver.recv(0, comm.TAG_GRADIENT, cpu), torch.ones(2))


def test_changed_shape_on_a_link_is_refused(wire: _Wire) -> None:
    links = comm.Links()
    links.send(torch.zeros(4, 8), dst=1, tag=comm.TAG_ACTIVATION)
    sent = wire.sends
    with pytest.raises(InputError, match=r"tensor to rank 1 \(tag 1\).*first tensor on this link was torch.float32 \[4, 8\]"):
        links.send(torch.zeros(2, 8), dst=1, tag=comm.TAG_ACTIVATION)
    with pytest.raises(InputError, match="first tensor on this link"):
        links.send(torch.zeros(4, 8, dtype=torch.float64), dst=1, tag=comm.TAG_ACTIVATION)
    assert wire.sends == sent  # nothing went out
    links.send(torch.zeros(2, 8), dst=2, tag=comm.TAG_ACTIVATION)  # another peer: its own link


def test_unsendable_tensors_name_the_field(wire: _Wire) -> None:
    with pytest.raises(InputError, match="activation.dtype"):
        comm.Links().send(torch.zeros(2, dtype=torch.complex64), dst=1, tag=1)
    with pytest.raises(InputError, match="activation.shape"):
        comm.Links().send(torch.zeros((1,) * 9), dst=1, tag=1)
