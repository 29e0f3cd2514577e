"""Discrete-event replay of a 1F1B pipeline's point-to-point transfers (blocking or buffered).

Prices what the closed form cannot (buffered sends) and checks it where it can: the simulator's
closed-form pipeline time
(:func:`heteroplan.planner.model.simulator.simulate_plan`): it executes, stage by stage, the instruction
stream of DeepSpeed's ``TrainSchedule`` (the pipeline engine of Sailor's runtime, which ran the
measured GH200 and MIT runs) and lets every transfer block both of its ends until it is done.

Schedule (per stage ``s`` of ``S``, ``M`` microbatches, ``2 (M + S - 1)`` steps): even stages
run forwards on even steps and backwards on odd ones, odd stages the other way round; a forward
step first sends the previous microbatch's input gradient to stage ``s - 1`` and then receives
this microbatch's activation from it, a backward step first receives the gradient from
``s + 1`` and then sends it the previous forward's activation. Sailor's ``p2p.send`` and
``p2p.recv`` are blocking (``dist.send`` / ``dist.recv``; asynchronous sends are refused), so a
transfer starts when both stages have reached it and occupies both for its whole duration:
nothing of a transfer hides behind compute -- unless the transport buffers it: a message that
fits the receiver's pre-posted buffers (NCCL's ``NCCL_BUFFSIZE``, 4 MiB by default) is handed
over without waiting for the receiver, so the sender goes on computing while it crosses, and the
receiver waits only for what has not arrived yet (``buffered`` boundaries below): the transfer
hides behind compute exactly when it is shorter than the compute between the send and the
matching receive. Transfers on one boundary and direction cross one after another (one NCCL
communicator per pair of neighbours runs its operations in stream order). With ``shared_nic``
a stage's sends in both directions leave through its one NIC's egress and its receives from both
neighbours land through its ingress (full duplex: two directions), and flows of different pairs
that are on one NIC direction at once share it max-min fairly, as TCP or RDMA flows through one
port do: each direction carries at most one full-rate flow's worth, so two flows through it each
cross at half their full rate until one lands. Events run in time order (landings first, then
the stage with the earliest clock), so flows go on the wire in the order they are issued.

Unlike :func:`heteroplan.planner.model.schedule.schedule_1f1b` (a timeline of Megatron's op order,
every op charging its own transfers), this replays DeepSpeed's instruction stream, where a
transfer is one event shared by its two stages; :func:`one_f_one_b_timeline` returns the replay
op by op, which :func:`heteroplan.planner.model.schedule.pipeline_schedule` lays out for a replica the
simulator replays.

Units: seconds.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from heteroplan.errors import InputError

__all__ = ["ReplayTimeline", "stage_instructions", "one_f_one_b_time", "one_f_one_b_timeline", "one_f_one_b_lower_bound"]

# instruction -> (matching instruction on the neighbour, neighbour offset)
_PEER = {"send_act": ("recv_act", 1), "recv_act": ("send_act", -1), "send_grad": ("recv_grad", -1),
         "recv_grad": ("send_grad", 1)}


@dataclass(eq=False)
class _Flow:
    """One transfer on the wire. ``work``: seconds it still needs at its link's full rate."""

    sender: int
    receiver: int
    work: float
    microbatch: int
    receive: str = ""  # buffered: the receiver's instruction that takes it ("recv_act" or "recv_grad")
    blocking: bool = False
    rate: float = 0.0  # share of its full rate it gets now
    since: float = 0.0  # when ``work`` was last brought up to date
    lands: float = math.inf
    started: float = math.nan  # when it went on the wire


class _Wire:
    """Transfers in flight. One communicator per (sender, receiver) pair runs its transfers one
    after another (NCCL executes a communicator's operations in stream order); with
    ``shared_nic``, flows of different pairs through one stage's egress (or ingress) share it
    max-min fairly, each NIC direction carrying at most one full-rate flow's worth; otherwise
    every pair has a link of its own."""

    def __init__(self, shared_nic: bool) -> None:
        self.shared_nic = shared_nic
        self.active: list[_Flow] = []
        self.queued: dict[tuple[int, int], deque[_Flow]] = {}
        self.first: tuple[float, _Flow | None] = (math.inf, None)  # the next flow to land, and when

    def send(self, flow: _Flow, at: float) -> None:
        """Issue ``flow`` at ``at`` seconds (not before any earlier event)."""
        queue = self.queued.setdefault((flow.sender, flow.receiver), deque())
        queue.append(flow)
        if len(queue) == 1:
            self._settle(at)
            flow.since = flow.started = at
            self.active.append(flow)
            self._share(at)

    def finish(self, flow: _Flow, at: float) -> None:
        """``flow`` has landed at ``at``: the next one of its pair goes on the wire."""
        self._settle(at)
        self.active.remove(flow)
        queue = self.queued[(flow.sender, flow.receiver)]
        queue.popleft()
        if queue:
            queue[0].since = queue[0].started = at
            self.active.append(queue[0])
        self._share(at)

    def _settle(self, at: float) -> None:
        for fl in self.active:
            fl.work = max(fl.work - fl.rate * (at - fl.since), 0.0)
            fl.since = at

    def _share(self, at: float) -> None:
        """Rates by progressive filling: raise every unfrozen flow's rate together until a NIC
        direction it crosses is full, freeze the flows through it, repeat."""
        todo = self.active
        alone = not self.shared_nic or len(todo) == 1
        for fl in todo:
            fl.rate = 1.0 if alone else 0.0
        used: dict[int, float] = {}  # 2 stage: egress, 2 stage + 1: ingress
        while not alone and todo:
            users: dict[int, int] = {}
            for fl in todo:
                for nic in (2 * fl.sender, 2 * fl.receiver + 1):
                    users[nic] = users.get(nic, 0) + 1
            step = min((1.0 - used.get(nic, 0.0)) / n for nic, n in users.items())
            for fl in todo:
                fl.rate += step
            for nic, n in users.items():
                used[nic] = used.get(nic, 0.0) + step * n
            todo = [fl for fl in todo if used[2 * fl.sender] < 1 - 1e-12 and used[2 * fl.receiver + 1] < 1 - 1e-12]
        self.first = (math.inf, None)
        for fl in self.active:
            fl.lands = at + fl.work / fl.rate
            if fl.lands < self.first[0]:
                self.first = (fl.lands, fl)


@dataclass(frozen=True)
class ReplayTimeline:
    """What one replay did (seconds from the first forward).

    Attributes:
        forward_start, forward_end, backward_start, backward_end: ``(S, M)`` per stage and
            microbatch.
        transfers: ``(K, 5)``, one row per transfer: sending stage, receiving stage (``s + 1``:
            an activation, ``s - 1``: a gradient), microbatch, when it went on the wire, when it
            landed.
    """

    forward_start: np.ndarray
    forward_end: np.ndarray
    backward_start: np.ndarray
    backward_end: np.ndarray
    transfers: np.ndarray

    @property
    def makespan(self) -> float:
        """Seconds until the last backward ends (:func:`one_f_one_b_time`)."""
        return float(max(self.backward_end.max(), self.forward_end.max()))


class _Log:
    """Collects a replay's intervals for :class:`ReplayTimeline`."""

    def __init__(self, stages: int, microbatches: int) -> None:
        self.ops = {k: np.full((stages, microbatches), np.nan) for k in
                    ("forward_start", "forward_end", "backward_start", "backward_end")}
        self.transfers: list[tuple[float, float, float, float, float]] = []

    def op(self, kind: str, stage: int, mb: int, start: float, end: float) -> None:
        self.ops[f"{kind}_start"][stage, mb] = start
        self.ops[f"{kind}_end"][stage, mb] = end

    def timeline(self) -> ReplayTimeline:
        transfers = np.array(sorted(self.transfers, key=lambda t: (t[3], t[0], t[1])), dtype=float).reshape(-1, 5)
        return ReplayTimeline(**self.ops, transfers=transfers)


@lru_cache(maxsize=4096)
def _program(stage: int, stages: int, microbatches: int) -> tuple[tuple[str, int], ...]:
    return tuple(stage_instructions(stage, stages, microbatches))


def stage_instructions(stage: int, stages: int, microbatches: int) -> list[tuple[str, int]]:
    """Instructions ``(kind, microbatch)`` of ``stage`` in DeepSpeed's 1F1B ``TrainSchedule``.

    Kinds: ``forward``, ``backward``, ``send_act``, ``recv_act`` (with stage ``s - 1``),
    ``send_grad`` (to ``s - 1``), ``recv_grad`` (from ``s + 1``).
    """
    s, S, M = stage, stages, microbatches
    out: list[tuple[str, int]] = []
    prev = -1
    for step in range(2 * (M + S - 1)):
        forward = step % 2 == s % 2
        base = step // 2 if step % 2 == 0 else (step - 1) // 2
        if forward:
            mb = base - s // 2
        elif step % 2 == 0:  # odd stage, backward on an even step
            mb = base - S + (s + 1) // 2
        else:  # even stage, backward on an odd step
            mb = base - S + 1 + s // 2
        valid, prev_valid = 0 <= mb < M, 0 <= prev < M
        if forward and s > 0:
            if prev_valid:
                out.append(("send_grad", prev))
            if valid:
                out.append(("recv_act", mb))
        if not forward and s < S - 1:
            if valid:
                out.append(("recv_grad", mb))
            if prev_valid:
                out.append(("send_act", prev))
        if valid:
            out.append(("forward" if forward else "backward", mb))
        prev = mb
    return out


def one_f_one_b_time(
    forward_s: Sequence[float], backward_s: Sequence[float], transfer_s: Sequence[float], microbatches: int,
    buffered: Sequence[bool] | None = None, shared_nic: bool = False,
) -> float:
    """Seconds from the first forward to the last backward of one pipeline replica.

    Args:
        forward_s, backward_s: per stage, seconds of one microbatch's forward / backward.
        transfer_s: per boundary, seconds of one activation (or gradient) transfer between
            stage ``s`` and ``s + 1`` (``S - 1`` values).
        microbatches: microbatches per iteration (>= 1).
        buffered: per boundary, whether its sends are buffered (the sender does not wait for the
            receiver; the data arrives ``transfer_s`` after the send, or after the previous
            send in the same direction has arrived, later where it shares a NIC); default: none
            (every transfer blocks both ends).
        shared_nic: whether a stage's node has one NIC for both neighbours: its sends to
            ``s + 1`` (activations) and to ``s - 1`` (gradients) share its egress, its receives
            from both share its ingress (max-min fair; a NIC direction carries one full-rate
            flow's worth); default: each boundary and direction has its own link.
    """
    return _replay(*_validated(forward_s, backward_s, transfer_s, microbatches, buffered), shared_nic)


def one_f_one_b_timeline(
    forward_s: Sequence[float], backward_s: Sequence[float], transfer_s: Sequence[float], microbatches: int,
    buffered: Sequence[bool] | None = None, shared_nic: bool = False,
) -> ReplayTimeline:
    """The replay of :func:`one_f_one_b_time` (same arguments), op by op and transfer by
    transfer, for timelines; its ``makespan`` is :func:`one_f_one_b_time`'s result."""
    args = _validated(forward_s, backward_s, transfer_s, microbatches, buffered)
    log = _Log(len(args[0]), args[4])
    _replay(*args, shared_nic, log)
    return log.timeline()


def _validated(
    forward_s: Sequence[float], backward_s: Sequence[float], transfer_s: Sequence[float], microbatches: int,
    buffered: Sequence[bool] | None,
) -> tuple[list[float], list[float], list[float], list[bool], int]:
    """The replay's arguments checked (clear errors) and as plain lists."""
    f = np.asarray(forward_s, dtype=float)
    b = np.asarray(backward_s, dtype=float)
    c = np.asarray(transfer_s, dtype=float)
    S = f.size
    if S < 1 or b.shape != f.shape or c.shape != (S - 1,):
        raise InputError("stages", (f.size, b.size, c.size), "need S forwards, S backwards and S - 1 transfers")
    if not (np.all(np.isfinite(f)) and np.all(np.isfinite(b)) and np.all(np.isfinite(c))) \
            or min(f.min(), b.min(), c.min(initial=0.0)) < 0:
        raise InputError("stage times", (f.tolist(), b.tolist(), c.tolist()), "must be finite seconds >= 0")
    if isinstance(microbatches, bool) or not isinstance(microbatches, int | np.integer) or microbatches < 1:
        raise InputError("microbatches", microbatches, "must be an integer >= 1")
    eager = np.zeros(S - 1, dtype=bool) if buffered is None else np.asarray(buffered, dtype=bool)
    if eager.shape != (S - 1,):
        raise InputError("buffered", buffered, f"need one flag per boundary ({S - 1})")
    return f.tolist(), b.tolist(), c.tolist(), eager.tolist(), int(microbatches)


# long: one discrete-event loop whose handlers (land, parked_at) share its state (program
# counters, clocks, the wire, arrivals); the loop body is one instruction's cases.
def _replay(f: list[float], b: list[float], c: list[float], eager: list[bool], microbatches: int,
            shared_nic: bool, log: _Log | None = None) -> float:
    """:func:`one_f_one_b_time` on validated plain lists; ``log`` collects the intervals."""
    S = len(f)
    program = [_program(s, S, microbatches) for s in range(S)]
    arrival: dict[tuple[int, str, int], float] = {}  # (receiving stage, receive kind, microbatch) -> landed at
    pc = [0] * S
    clock = [0.0] * S
    waiting: set[int] = set()  # stages stopped at a transfer their neighbour has not reached or sent
    ready = [(0.0, s) for s in range(S)]  # (clock, stage): stages that can try their next instruction
    heapq.heapify(ready)
    wire = _Wire(shared_nic)

    def parked_at(o: int, instruction: tuple[str, int]) -> bool:
        """Whether stage ``o`` waits at ``instruction``."""
        return o in waiting and pc[o] < len(program[o]) and program[o][pc[o]] == instruction

    def land(flow: _Flow, now: float) -> None:
        """A flow has crossed: a buffered message waits for (or wakes) its receiver, a blocking
        transfer releases both of its stages."""
        if log is not None:
            log.transfers.append((flow.sender, flow.receiver, flow.microbatch, flow.started, now))
        if flow.blocking:
            for stage in (flow.sender, flow.receiver):
                clock[stage] = now
                pc[stage] += 1
                heapq.heappush(ready, (now, stage))
            return
        receiver = flow.receiver
        arrival[(receiver, flow.receive, flow.microbatch)] = now
        if parked_at(receiver, (flow.receive, flow.microbatch)):
            waiting.discard(receiver)
            heapq.heappush(ready, (max(clock[receiver], now), receiver))

    # Events in time order: a flow that lands before (or when) the next stage goes on is handled
    # first; then one instruction of the stage with the earliest clock, so flows go on the wire
    # in the order they are issued.
    while True:
        t_flow, flow = wire.first
        if flow is not None and (not ready or t_flow <= ready[0][0]):
            wire.finish(flow, t_flow)
            land(flow, t_flow)
            continue
        if not ready:
            break
        t, s = heapq.heappop(ready)
        clock[s] = max(clock[s], t)
        if pc[s] >= len(program[s]):
            continue
        kind, mb = program[s][pc[s]]
        if kind in ("forward", "backward"):
            start = clock[s]
            clock[s] += f[s] if kind == "forward" else b[s]
            if log is not None:
                log.op(kind, s, mb, start, clock[s])
            pc[s] += 1
            heapq.heappush(ready, (clock[s], s))
            continue
        peer_kind, offset = _PEER[kind]
        o = s + offset
        cost = c[min(s, o)]
        if eager[min(s, o)]:
            if kind.startswith("send"):  # hand over and go on; it lands when the wire allows
                wire.send(_Flow(s, o, cost, mb, peer_kind), clock[s])
            elif (s, kind, mb) in arrival:
                clock[s] = max(clock[s], arrival.pop((s, kind, mb)))
            else:
                waiting.add(s)  # not landed yet
                continue
            pc[s] += 1
            heapq.heappush(ready, (clock[s], s))
            continue
        if not parked_at(o, (peer_kind, mb)):
            waiting.add(s)  # blocked until the neighbour reaches the matching instruction
            continue
        waiting.discard(o)  # both ends are held until the flow lands
        sender, receiver = (s, o) if kind.startswith("send") else (o, s)
        wire.send(_Flow(sender, receiver, cost, mb, blocking=True), max(clock[s], clock[o]))
    if any(pc[s] < len(program[s]) for s in range(S)):  # cannot happen for this schedule; guards the loop
        raise RuntimeError("1F1B replay deadlocked")
    return max(clock)


def one_f_one_b_lower_bound(forward_s: np.ndarray, backward_s: np.ndarray, transfer_s: np.ndarray,
                            microbatches: int, buffered: np.ndarray | None = None) -> np.ndarray:
    """A lower bound on :func:`one_f_one_b_time` (any buffering, any NIC sharing), vectorized over
    leading axes: ``(..., S)`` forwards and backwards, ``(..., S - 1)`` transfers.

    Per stage ``s``: its first forward waits for microbatch 0 to come down the pipeline
    (``sum_{j<s} f_j + c_j``); before its last forward it runs ``M`` forwards and the
    ``k = max(0, M - (S - s))`` backwards 1F1B puts first; its last backward then waits at least for
    microbatch ``M - 1`` to go down and back up (``sum_{j>s} (f_j + b_j) + 2 sum_{j>=s} c_j``) and
    for its own other backwards; the gradient then goes back up (``sum_{j<s} b_j + c_j``). A
    transfer takes at least its own seconds (it can only wait for a link), so each path is a bound.
    With ``buffered`` (per boundary; default none), a blocking transfer also holds both of its
    stages: a stage is busy ``M (f + b)`` plus ``2 M c`` per blocking boundary it touches, after
    microbatch 0 came down and before the last gradient goes up.
    Per boundary ``j``: its ``M`` activations cross one after another (``M c_j``) between stage
    ``j``'s first forward and microbatch ``M - 1``'s round trip below it.
    """
    f, b, c = (np.asarray(x, dtype=float) for x in (forward_s, backward_s, transfer_s))
    S, M = f.shape[-1], int(microbatches)
    zero = np.zeros(c.shape[:-1] + (1,))
    up_f = np.concatenate([zero, np.cumsum(f[..., :-1] + c, axis=-1)], axis=-1)
    up_b = np.concatenate([zero, np.cumsum(b[..., :-1] + c, axis=-1)], axis=-1)
    fb = f + b
    after = np.cumsum(fb[..., ::-1], axis=-1)[..., ::-1] - fb  # sum_{j>s} fb_j
    c_after = np.concatenate([np.cumsum(c[..., ::-1], axis=-1)[..., ::-1], zero], axis=-1)  # sum_{j>=s} c_j
    down = after + 2 * c_after
    k = np.maximum(0, M - (S - np.arange(S)))
    per_stage = up_f + M * f + k * b + np.maximum(down, (M - k - 1) * b) + b + up_b
    # a blocking transfer holds both of its stages: a stage is busy M (f + b) plus twice M per blocking boundary
    blocking = np.ones(c.shape, dtype=bool) if buffered is None else ~np.broadcast_to(np.asarray(buffered, dtype=bool), c.shape)
    held = np.where(blocking, c, 0.0)
    held_in, held_out = np.concatenate([zero, held], axis=-1), np.concatenate([held, zero], axis=-1)
    busy = up_f + up_b - 2 * held_in + M * fb + 2 * M * (held_in + held_out)
    per_stage = np.maximum(per_stage, busy)
    # boundary j carries M activations one after another, the first after stage j's first forward,
    # the last followed by microbatch M - 1's way down, back and up
    per_link = (up_f + f + up_b + b)[..., :-1] + (M + 1) * c + fb[..., 1:] + down[..., 1:]
    return np.maximum(per_stage.max(axis=-1), per_link.max(axis=-1, initial=0.0))
