"""The training loop of one rank, and the entry points that start it.

``train_rank`` assumes ``torch.distributed`` is initialised; it is called by the local
launcher (:mod:`heteroplan.runtime.launch`, one process per rank) and by ``torchrun``
(``python -m heteroplan.runtime.worker``) across nodes.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from heteroplan.errors import InputError, LossNotFinite
from heteroplan.planner.pipeline_set import PipelineSet
from heteroplan.planner.plan import Plan
from heteroplan.run_options import Device, FaultKind, PipelineEngine
from heteroplan.runtime import checkpoint as ckpt
from heteroplan.runtime.appliers import (
    APPLIERS,
    DimensionApplier,
    LayerRange,
    StageContext,
    build_stage,
    check_plan,
)
from heteroplan.runtime.comm import TAG_ACTIVATION, TAG_GRADIENT, Links, PendingSend
from heteroplan.runtime.config import RunConfig, StepMetrics
from heteroplan.runtime.dimensions import local_optimizer
from heteroplan.runtime.graphs import GraphedMicrobatch
from heteroplan.runtime.layout import (
    PipelineSlot,
    RankInfo,
    check_runnable,
    load_run,
    neighbours,
    rank_layout,
    run_from_dict,
    run_pipelines,
    stage_tp,
    tp_degrees,
    uniform_stage_tp,
)
from heteroplan.runtime.memory import PeakMemory, persistent_bytes
from heteroplan.runtime.models import TrainTask
from heteroplan.runtime.pipelining import TorchPipeline
from heteroplan.runtime.schedule import (
    SCHEDULES,
    PipelineChoice,
    PipelineSetChoice,
    choose_pipeline,
)
from heteroplan.runtime.segment_sync import SegmentSync, uses_segment_sync
from heteroplan.runtime.tensor_parallel import (
    ProcessGroups,
    copy_slices,
    create_groups,
    local_gradients,
)
from heteroplan.training_args import add_training_arguments, model_kwargs, run_config_kwargs

__all__ = ["LayerRange", "StageTrainer", "flat_gradients", "pipeline_choice", "run_pipeline_choice",
           "make_trainer", "train_rank", "rank_entry", "main"]

log = logging.getLogger(__name__)


def pipeline_choice(plan: Plan, config: RunConfig) -> PipelineChoice:
    """The engine and per-replica schedules ``plan`` runs with under ``config`` (see
    :func:`heteroplan.runtime.schedule.choose_pipeline`); with ``config.cuda_graphs`` heteroplan's
    loop, which replays the graphs (:class:`InputError` where a dimension's applier cannot run the
    plan: :func:`heteroplan.runtime.appliers.check_plan`)."""
    check_plan(plan, config)
    return _choose_engine(plan, config)


def _choose_engine(plan: Plan, config: RunConfig) -> PipelineChoice:
    """:func:`pipeline_choice` of a plan already checked (the trainer checks it with its model's dtype)."""
    if config.cuda_graphs:
        choice = choose_pipeline(stage_tp(plan), plan.microbatches(), config.schedule, PipelineEngine.HETEROPLAN)
        return replace(choice, reason="CUDA graphs: each microbatch replayed as one graph")
    if uniform_stage_tp(plan) is None:  # a stage's replicas differ in TP: torch's pipelines need one degree
        if config.pipeline is PipelineEngine.TORCH:
            stage_tp(plan)  # InputError naming the stage
        return PipelineChoice(PipelineEngine.HETEROPLAN, tuple(config.schedule for _ in plan.microbatches()), plan.microbatches(),
                              "replicas of a stage differ in TP degree; torch's pipelines need one per stage")
    return choose_pipeline(stage_tp(plan), plan.microbatches(), config.schedule, config.pipeline)


def run_pipeline_choice(run: Plan | PipelineSet, config: RunConfig) -> PipelineChoice | PipelineSetChoice:
    """:func:`pipeline_choice` of a plan, or of every pipeline of a set."""
    if isinstance(run, Plan):
        return pipeline_choice(run, config)
    return PipelineSetChoice(tuple(pipeline_choice(slot.plan, config) for slot in run_pipelines(run)))


def _device(config: RunConfig, rank: int) -> torch.device:
    if config.device is Device.CUDA:
        if not torch.cuda.is_initialized():  # the allocator reads its settings when CUDA starts
            os.environ.update(config.allocator_environment(os.environ))
        local = int(os.environ.get("LOCAL_RANK", rank % max(torch.cuda.device_count(), 1)))
        torch.cuda.set_device(local)
        return torch.device("cuda", local)
    return torch.device("cpu")


_NORM_CHUNK = 1 << 16


def _squared_norm(flat: torch.Tensor) -> float:
    """``sum(flat ** 2)``: the 2-norm of each chunk of 2^16 elements in ``flat``'s precision (one
    reduction kernel over a ``(chunks, 2^16)`` view, no transient copy), squared and added in
    float64. (A float64 copy and its square, ``c.double().square()``, are 16 bytes per parameter
    of the chunk: on a small model, where one chunk of 2^20 was the whole gradient, they set a
    data-parallel rank's peak, 16P above the weights, gradients, state and the flat copy; a dot
    product per chunk launched P / 2^16 kernels, 4,900 for 320M parameters, twice an iteration.)"""
    whole = flat.numel() // _NORM_CHUNK * _NORM_CHUNK
    norms = torch.linalg.vector_norm(flat[:whole].view(-1, _NORM_CHUNK), dim=1)
    tail = torch.linalg.vector_norm(flat[whole:]).reshape(1)
    return float(torch.cat([norms, tail]).double().square().sum())


def _host_to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``t`` on ``device`` without waiting for the device: a CUDA copy from pageable memory
    (``t.to(device)``) synchronises the stream, so that each microbatch's input and target waited
    for every kernel launched before them and the host could not run ahead of the GPU. A copy from
    pinned memory with ``non_blocking`` is queued like a kernel (the caching host allocator keeps
    the pinned block until the copy is done)."""
    if device.type == "cuda" and t.device.type == "cpu":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def flat_gradients(params: list[nn.Parameter]) -> torch.Tensor | None:
    """One zeroed buffer holding every parameter's gradient: each ``p.grad`` becomes a view of it
    (as torch's DDP does with ``gradient_as_bucket_view``), so autograd accumulates into the buffer
    and the data-parallel all-reduce works on it in place. Without it the all-reduce needed a flat
    copy of the gradients (``4 P`` bytes on a rank's peak, and two copies of them an iteration),
    and gradients freed after every step came back during the next backward, among that
    backward's transient blocks. ``None`` (gradients stay per tensor) for tensor-parallel
    (DTensor) parameters or parameters of several dtypes."""
    if not params or any(hasattr(p, "to_local") for p in params) or len({p.dtype for p in params}) != 1:
        return None
    buffer = torch.zeros(sum(p.numel() for p in params), dtype=params[0].dtype, device=params[0].device)
    for p, part in zip(params, torch.split(buffer, [p.numel() for p in params]), strict=True):
        p.grad = part.view_as(p)
    return buffer


class StageTrainer:
    """This rank's share of ``plan``: its stage's layers (sharded when the stage has ``tp > 1``),
    optimizer and links; :meth:`step` trains one iteration.

    Ranks of the plan are the global ranks ``0 .. plan ranks - 1`` (a larger world may hold other
    plans' ranks too). ``groups`` are the plan's data- and tensor-parallel groups, as
    :func:`~heteroplan.runtime.tensor_parallel.create_groups` returns them; ``group`` the plan's
    ranks for the end-of-iteration control all-reduce (``None``: the default group). The stage is
    built by ``appliers``, one per dimension, in order (precision, recomputation, tensor
    parallelism, compile, CUDA graphs, optimizer sharding: :data:`~heteroplan.runtime.appliers.APPLIERS`).

    The forwards and backwards of an iteration run under ``torch.distributed.pipelining`` when
    :func:`pipeline_choice` says so (``groups`` must then hold the pipeline groups:
    ``create_groups(plan, pipelines=True)``), else under heteroplan's own schedule; the
    data-parallel all-reduce, the update and the timing are the same for both.

    ``slot``: where ``plan`` sits in a larger run (a pipeline of a set: its first rank and sample,
    the run's batch; default: alone); ``segment_sync``: the run's gradient all-reduce when its
    replicas of a layer are sharded differently (:mod:`heteroplan.runtime.segment_sync`), instead
    of the data-parallel groups; ``choice``: the plan's :func:`pipeline_choice`, when the caller made
    it (default: made here, after the plan is checked with the model's dtype).
    """

    def __init__(self, plan: Plan, task: TrainTask, config: RunConfig, rank: int, groups: ProcessGroups,
                 group: Any = None, slot: PipelineSlot | None = None, segment_sync: SegmentSync | None = None,
                 appliers: Sequence[DimensionApplier] = APPLIERS, choice: PipelineChoice | None = None) -> None:
        slot = slot or PipelineSlot.alone(plan)
        layout = rank_layout(plan, slot.rank_offset, slot.sample_offset)
        self.me: RankInfo = layout[rank - slot.rank_offset]
        self.plan, self.task, self.rank, self.group = plan, task, rank, group
        self.batch_size, self.segment_sync = slot.batch_size, segment_sync
        self.dp_group = None if segment_sync is not None else groups.dp[(self.me.stage, self.me.tp_index)]
        self.solo = slot.world == 1
        self.device = _device(config, rank)
        torch.set_num_threads(config.threads_per_rank)
        self.config = config
        full = task.build_model()
        check_runnable(plan, len(full))
        check_plan(plan, config, next((p.dtype for p in full.parameters() if p.is_floating_point()), None), appliers)
        ctx = StageContext(plan, config, self.me.stage, self.device, self.me.tp,
                           groups.tp.get((self.me.stage, self.me.replica)), self.dp_group)
        build = build_stage(LayerRange(full, self.me.first_layer, self.me.last_layer).to(self.device), task.loss,
                            ctx, appliers)
        del full
        self.stage, self.loss = build.layers, build.loss
        self.params = [p for p in self.stage.parameters() if p.requires_grad]
        self.grad_buffer = flat_gradients(self.params)
        self.optimizer = build.make_optimizer(self.params)
        if config.cuda_graphs:
            if self.grad_buffer is None:
                raise InputError("config.cuda_graphs", True, "needs the stage's parameters in one buffer: one dtype, "
                                 "no tensor parallelism")
        self.graphed: GraphedMicrobatch | None = None  # captured at the first microbatch (cuda_graphs)
        self.first, self.last = self.me.stage == 0, self.me.stage == plan.pp - 1
        self.act_source = neighbours(plan, self.me, -1, "source", slot.rank_offset)
        self.act_destinations = neighbours(plan, self.me, +1, "destination", slot.rank_offset)
        self.grad_source = neighbours(plan, self.me, +1, "source", slot.rank_offset)
        self.grad_destinations = neighbours(plan, self.me, -1, "destination", slot.rank_offset)
        self.reports_loss = self.last and self.me.tp_index == 0  # every TP rank computes the same loss
        # gradient noise statistics need each replica's whole gradient on one rank: pure data parallelism
        self.grad_stats = plan.pp == 1 and self.me.tp == 1 and plan.dp > 1 and segment_sync is None
        self.choice = choice or _choose_engine(plan, config)  # the plan was checked above
        self.pipeline: TorchPipeline | None = None
        if self.choice.engine is PipelineEngine.TORCH:
            scale = plan.microbatch_size / self.batch_size
            self.pipeline = TorchPipeline(
                self.stage, self.me.stage, plan.pp, self.device, groups.pipe[(self.me.replica, self.me.tp_index)],
                self.me.num_microbatches, self.choice.schedules[self.me.replica],
                lambda output, target: self.loss(output, target) * scale)
        self.ops = SCHEDULES[config.schedule](plan.pp, self.me.stage, self.me.num_microbatches)
        self.links = Links()
        # stop, loss, |G|^2, tr(Sigma), then every rank's peak allocated and reserved bytes (memory_step only)
        self.control = torch.zeros(4 + 2 * slot.world, dtype=torch.float64, device=self.device)

    def step(self, step: int, request_stop: bool = False) -> tuple[StepMetrics, bool]:
        """Train iteration ``step`` (0-based; it picks the data); returns what rank 0 reports
        (``step`` + 1 done, loss, seconds) and whether any rank asked to stop."""
        measure = self.config.memory_step == step
        peak = PeakMemory(self.device, persistent_bytes(self.stage, local_optimizer(self.optimizer))) if measure else None
        if peak is not None:
            peak.start()
        t0 = time.perf_counter()
        if self.pipeline is not None:
            loss_sum: float | torch.Tensor = self._run_torch_pipeline(step)
        else:
            loss_sum = self._run_graphed(step) if self.config.cuda_graphs else self._run_own_schedule(step)
        if self.config.emulate is not None:  # emulated GPUs: the compute lasts what the GPU type's would
            samples = self.me.num_microbatches * self.plan.microbatch_size
            time.sleep(max(0.0, self.config.emulate.compute_seconds(self.me.gpu_type, samples)
                           - (time.perf_counter() - t0)))
        t_sync = time.perf_counter()
        global_sqr = 0.0
        if self.segment_sync is not None:
            self.segment_sync.reduce(self.stage, self.grad_buffer)
        elif self.dp_group is not None:
            if self.grad_buffer is not None:
                flat = self.grad_buffer
            else:
                grads = local_gradients(self.params)
                flat = torch.cat([g.reshape(-1) for g in grads])
            local_sqr = _squared_norm(flat) if self.grad_stats else 0.0
            dist.all_reduce(flat, group=self.dp_group)
            if self.grad_buffer is None:
                copy_slices(grads, flat)
            if self.grad_stats:
                global_sqr = _squared_norm(flat)
            del flat  # a flat copy of the gradients must not live through the optimizer step
        sync_time = time.perf_counter() - t_sync
        self.optimizer.step()
        if self.grad_buffer is not None:
            self.grad_buffer.zero_()
        else:
            self.optimizer.zero_grad(set_to_none=True)
        self.control.zero_()
        if peak is not None:
            allocated, reserved = peak.stop()
            world = (len(self.control) - 4) // 2
            self.control[4 + self.rank] = allocated
            self.control[4 + world + self.rank] = reserved
        self.control[0] = 1.0 if request_stop else 0.0
        if self.reports_loss:
            self.control[1] = loss_sum
        if self.grad_stats:
            self.control[2:4] = torch.tensor(self._noise_terms(local_sqr, global_sqr),
                                             dtype=torch.float64)
        if not self.solo:
            dist.all_reduce(self.control, group=self.group)
        # this rank's part of the iteration's loss (0 off the loss-reporting ranks); read once the
        # iteration's work is queued (a device tensor on the own schedule's last stage)
        self.local_loss = float(loss_sum)
        world = (len(self.control) - 4) // 2
        metrics = StepMetrics(
            step + 1, float(self.control[1]), time.perf_counter() - t0, sync_time,
            grad_sqr=float(self.control[2]) if self.grad_stats else None,
            grad_var=float(self.control[3]) if self.grad_stats else None,
            peak_allocated_bytes=tuple(int(v) for v in self.control[4:4 + world].tolist()) if measure else (),
            peak_reserved_bytes=tuple(int(v) for v in self.control[4 + world:].tolist()) if measure else ())
        return metrics, bool(self.control[0] > 0)

    def _run_torch_pipeline(self, step: int) -> float:
        """Iteration ``step``'s forwards and backwards under ``torch.distributed.pipelining``;
        returns the sum of this rank's scaled microbatch losses (0 off the last stage)."""
        assert self.pipeline is not None
        me, count = self.me, self.me.num_microbatches * self.plan.microbatch_size
        batch = self.task.batch(step, me.sample_offset, count) if self.first or self.last else None
        inputs = _host_to_device(batch[0], self.device) if self.first and batch is not None else None
        target = _host_to_device(batch[1], self.device) if self.last and batch is not None else None
        return self.pipeline.run(inputs, target)

    def _run_own_schedule(self, step: int) -> float | torch.Tensor:
        """Iteration ``step``'s forwards and backwards under heteroplan's schedule (``self.ops``)
        and point-to-point links; returns the sum of this rank's scaled microbatch losses (on the
        last stage a float64 tensor on the device, added there so that no microbatch waits for the
        device to read its loss; the float64 sum of the float32 losses in order, as a Python sum of
        floats would give)."""
        me, mbs, gbs, device = self.me, self.plan.microbatch_size, self.batch_size, self.device
        pending: list[PendingSend] = []
        saved: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        loss_sum: float | torch.Tensor = torch.zeros((), dtype=torch.float64, device=device) if self.last else 0.0
        for op in self.ops:
            offset = me.sample_offset + op.microbatch * mbs
            if op.kind == "F":
                if self.first:
                    x = _host_to_device(self.task.batch(step, offset, mbs)[0], device)
                else:
                    x = self.links.recv(self.act_source[0], TAG_ACTIVATION, device)
                    if not x.is_floating_point():
                        raise RuntimeError(f"stage {me.stage} receives {x.dtype} activations: cannot backpropagate")
                    x.requires_grad_(True)
                y = self.stage(x)
                if self.last:
                    target = _host_to_device(self.task.batch(step, offset, mbs)[1], device)
                    y = self.loss(y, target) * (mbs / gbs)
                    loss_sum += y.detach().double()
                else:
                    pending.extend(self.links.send(y, dst, TAG_ACTIVATION) for dst in self.act_destinations)
                saved[op.microbatch] = (x, y)
            else:
                x, y = saved.pop(op.microbatch)
                if self.last:
                    y.backward()
                else:
                    y.backward(self.links.recv(self.grad_source[0], TAG_GRADIENT, device))
                if not self.first:
                    pending.extend(self.links.send(x.grad, dst, TAG_GRADIENT) for dst in self.grad_destinations)
        for send in pending:
            send.wait()
        return loss_sum

    def _run_graphed(self, step: int) -> torch.Tensor:
        """Iteration ``step``'s microbatches, each replayed as one CUDA graph (captured at the first
        microbatch of the first iteration, while the gradients are still zero; a one-stage plan,
        :func:`~heteroplan.runtime.graphs.check_cuda_graphs`); returns the float64 sum of the
        scaled microbatch losses, on the device."""
        me, mbs, device = self.me, self.plan.microbatch_size, self.device
        scale = mbs / self.batch_size
        loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        for j in range(me.num_microbatches):
            inputs, target = self.task.batch(step, me.sample_offset + j * mbs, mbs)
            inputs, target = _host_to_device(inputs, device), _host_to_device(target, device)
            if self.graphed is None:
                assert self.grad_buffer is not None
                self.graphed = GraphedMicrobatch(lambda x, y: self.loss(self.stage(x), y) * scale, (inputs, target),
                                                 self.grad_buffer.zero_)
            loss_sum += self.graphed(inputs, target).double()
        return loss_sum

    def _noise_terms(self, local_sqr: float, global_sqr: float) -> tuple[float, float]:
        """This replica's share of the mean unbiased estimates of ``|G|^2`` and ``tr(Sigma)`` (the
        gradient's squared norm and per-sample variance; Pollux / McCandlish et al. 2018).

        The replica's gradient contribution is ``b/B`` times the mean gradient of its ``b`` samples,
        so that mean has squared norm ``a = (B/b)^2 local_sqr``; the global batch's gradient has
        ``g = global_sqr``. With ``E a = |G|^2 + S/b`` and ``E g = |G|^2 + S/B``:
        ``S = (a - g) / (1/b - 1/B)`` and ``|G|^2 = (B g - b a) / (B - b)``, averaged over replicas.
        """
        b, total = self.me.num_microbatches * self.plan.microbatch_size, self.plan.global_batch_size
        a = (total / b) ** 2 * local_sqr
        variance = (a - global_sqr) / (1 / b - 1 / total)
        sqr = (total * global_sqr - b * a) / (total - b)
        return sqr / self.plan.dp, variance / self.plan.dp


def train_rank(
    plan: Plan | PipelineSet,
    task: TrainTask,
    config: RunConfig,
    should_stop: Callable[[], bool] = lambda: False,
    report: Callable[[StepMetrics], None] = lambda m: None,
) -> int:
    """Train this rank's share of ``plan`` (a plan, or a set of independent pipelines); returns the
    iterations done in total.

    Every replica of a stage runs its own microbatch count; gradients are summed over the
    samples of the global batch (each microbatch loss is scaled by ``mbs / global_batch``) and
    all-reduced within the stage (per layer range over every pipeline holding it, for a set or
    a stage whose replicas differ in TP degree), so the update equals single-process training on
    the whole batch.
    """
    rank, world = dist.get_rank(), dist.get_world_size()
    ckpt.check_writable(config.checkpoint_dir)
    slots = run_pipelines(plan)
    if world != slots[0].world:
        raise RuntimeError(f"world size {world} but the plan has {slots[0].world} ranks")
    if rank == 0 and log.isEnabledFor(logging.DEBUG):
        log.debug("pipeline: %s", run_pipeline_choice(plan, config).describe())
    trainer = make_trainer(slots, task, config, rank)
    start = 0
    resume = ckpt.latest_checkpoint(config.checkpoint_dir) if config.resume else None
    if resume is not None:
        ckpt.load_state(resume, trainer.stage, local_optimizer(trainer.optimizer), trainer.group)
        start = resume.step
    deadline = time.monotonic() + config.max_seconds if config.max_seconds else None
    done = start
    for step in range(start, config.steps):
        if config.fault is not None and tuple(config.fault[1:]) == (rank, step):
            if config.fault[0] is FaultKind.EXIT:
                os._exit(17)  # die without a word, as a crashed node would
            time.sleep(10 * config.timeout_s)  # hang, as a wedged GPU would
        ask = rank == 0 and (should_stop() or (deadline is not None and time.monotonic() > deadline))
        metrics, stop = trainer.step(step, ask)
        done = step + 1
        if rank == 0:
            report(metrics)
        if not math.isfinite(metrics.loss):  # every rank has the same all-reduced loss: all stop here
            _stop_diverged(trainer, done, metrics.loss)
            return done
        due = config.checkpoint_every and done % config.checkpoint_every == 0
        if config.checkpoint_dir and (due or stop or done == config.steps):
            _checkpoint(plan, config, trainer, done, metrics.loss)
        if stop:
            break
    return done


def make_trainer(slots: tuple[PipelineSlot, ...], task: TrainTask, config: RunConfig, rank: int) -> StageTrainer:
    """Create the process groups of a run's pipelines (collective: every rank creates every group, in
    the same order) and the :class:`StageTrainer` of ``rank``."""
    segment = uses_segment_sync(slots)
    mine: tuple[PipelineSlot, ProcessGroups, PipelineChoice] | None = None
    for slot in slots:
        choice = pipeline_choice(slot.plan, config)  # every rank checks every plan: all refuse a bad one alike
        groups = create_groups(slot.plan, pipelines=choice.engine is PipelineEngine.TORCH, rank_offset=slot.rank_offset,
                               data_parallel=not segment)
        if slot.holds(rank):
            mine = (slot, groups, choice)
    assert mine is not None, f"rank {rank} is in no pipeline"
    sync = SegmentSync(slots, rank) if segment else None
    slot, groups, choice = mine
    return StageTrainer(slot.plan, task, config, rank, groups, slot=slot, segment_sync=sync, choice=choice)


def _stop_diverged(trainer: StageTrainer, step: int, loss: float) -> None:
    """Iteration ``step``'s loss is not finite: raise :class:`LossNotFinite` on the lowest rank whose
    own part of it is not finite (rank 0 when every part is finite but not their sum); the other
    ranks return. No checkpoint: the diverged update must not overwrite a good one."""
    world = dist.get_world_size()
    mine = trainer.reports_loss and not math.isfinite(trainer.local_loss)
    first = torch.tensor([trainer.rank if mine else world], dtype=torch.int64, device=trainer.device)
    if not trainer.solo:
        dist.all_reduce(first, op=dist.ReduceOp.MIN, group=trainer.group)
    culprit = int(first) if int(first) < world else None
    if trainer.rank == (culprit if culprit is not None else 0):
        raise LossNotFinite(culprit, step, trainer.local_loss if culprit is not None else loss)


def _checkpoint(plan: Plan | PipelineSet, config: RunConfig, trainer: StageTrainer, step: int, loss: float) -> None:
    written = trainer.segment_sync.written_layers() if trainer.segment_sync is not None else None
    ckpt.save_state(config.checkpoint_dir, step, trainer.stage, local_optimizer(trainer.optimizer), trainer.group,
                    layers=written)
    dist.barrier(group=trainer.group)
    if trainer.rank == 0:
        run = {"plan": plan.to_dict()} if isinstance(plan, Plan) else {"pipelines": plan.to_dict()["pipelines"]}
        ckpt.write_manifest(config.checkpoint_dir, step, plan.num_layers, {"loss": loss, **run})
        ckpt.prune(config.checkpoint_dir, config.keep_checkpoints)


def rank_entry(rank: int, world_size: int, init_method: str, plan_dict: dict, task: TrainTask,
               config: RunConfig, stop_event: Any, queue: Any) -> None:
    """Process target of the local launcher: init, train, report to the parent through ``queue``."""
    try:
        follow_launcher()
        join_process_group(config, init_method, rank, world_size)
        plan = run_from_dict(plan_dict)
        done = train_rank(plan, task, config, stop_event.is_set, lambda m: queue.put(("step", rank, m)))
        queue.put(("done", rank, done))
        dist.destroy_process_group()
    except LossNotFinite as exc:  # typed, for the launcher to raise the same
        report_failure_and_exit(queue, rank, ("diverged", rank, exc))
    except BaseException:  # noqa: BLE001 - report anything to the parent, then fail
        report_failure_and_exit(queue, rank)


def follow_launcher() -> None:
    """In a locally launched rank: leave SIGINT (a terminal's Ctrl-C reaches the whole process
    group) to the launcher, which stops the ranks itself, and die with the launcher (Linux
    ``PR_SET_PDEATHSIG``) if it is killed outright, so no rank is ever orphaned."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
        except OSError:  # pragma: no cover - no glibc
            pass
        if os.getppid() == 1:  # the launcher died before prctl took effect
            os._exit(1)


def join_process_group(config: RunConfig, init_method: str, rank: int, world_size: int) -> None:
    """Initialise ``torch.distributed`` for a locally launched rank (the config's backend and timeout)."""
    dist.init_process_group(config.resolved_backend, init_method=init_method, rank=rank,
                            world_size=world_size, timeout=timedelta(seconds=config.timeout_s))


def report_failure_and_exit(queue: Any, rank: int, report: tuple | None = None) -> None:
    """Send ``report`` (default: ``("error", rank, the current exception's traceback)``) to the
    launcher and end the process (exit code 1).

    The queue is flushed first: ``os._exit`` would otherwise kill its feeder thread before the
    report left, and the launcher would only see the exit code.
    """
    queue.put(report or ("error", rank, traceback.format_exc(limit=8)))
    queue.close()
    queue.join_thread()
    sys.stdout.flush()
    os._exit(1)


def main(argv: list[str] | None = None) -> int:
    """``torchrun ... -m heteroplan.runtime.worker --plan plan.json`` (env:// rendezvous)."""
    from heteroplan.runtime.models import TinyGPTTask, load_task

    parser = argparse.ArgumentParser(prog="python -m heteroplan.runtime.worker")
    parser.add_argument("--plan", required=True, help="plan JSON (plan --out/--json, Plan.to_json or Sailor plan_config)")
    add_training_arguments(parser, steps=10, optimizer="sgd", lr=0.05)
    args = parser.parse_args(argv)
    plan = load_run(args.plan)
    config = RunConfig(**run_config_kwargs(args))
    task = load_task(args.model) if args.model else TinyGPTTask(**model_kwargs(args, plan.num_layers, tp_degrees(plan)))
    dist.init_process_group(config.resolved_backend, timeout=timedelta(seconds=config.timeout_s))
    if dist.get_rank() == 0:
        print(f"pipeline: {run_pipeline_choice(plan, config).describe()}", flush=True)

    def show(m: StepMetrics) -> None:
        print(f"step {m.step:5d}  loss {m.loss:.4f}  {m.iteration_time * 1e3:8.1f} ms", flush=True)

    done = train_rank(plan, task, config, report=show)
    dist.destroy_process_group()
    return 0 if done >= config.steps else 1


if __name__ == "__main__":
    sys.exit(main())
