"""The Ray backend of the round executor: a job's ranks as Ray actors on the decision's nodes.

Each launch reserves one placement-group bundle per rank (``{"GPU": 1, "CPU": cpus_per_rank}``),
each pinned by a label selector to the Ray node the decision's placement names (gang placement:
every bundle or none, within ``config.startup_timeout_s``). One actor per bundle runs the
runtime's own worker (:func:`~heteroplan.runtime.worker.train_rank`, so any plan the runtime
trains) in a thread; ``torch.distributed`` rendezvous at a free port of rank 0's node (gloo on
CPU, NCCL on GPUs). Checkpoints go to ``config.checkpoint_dir``, which every node must reach: each
rank writes a probe file there before training, and the driver refuses the run
(:class:`~heteroplan.errors.InputError`) unless it sees every probe.

The driver polls the actors; a dead actor (killed, its process crashed, its node gone) or a rank
that reports an error is a :class:`~heteroplan.errors.RankFailure`, after which every actor of the
job is killed and its placement group removed, so nothing is left running. Stopping asks rank 0
to stop at the next iteration boundary, where every rank checkpoints.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from heteroplan.cluster import Cluster, GPUType
from heteroplan.errors import InputError, LossNotFinite, RankFailure
from heteroplan.inputs import real_value
from heteroplan.planner.plan import Plan
from heteroplan.policies.base import Allocation
from heteroplan.runtime.checkpoint import check_writable, latest_checkpoint
from heteroplan.runtime.config import RunConfig, StepMetrics
from heteroplan.runtime.launch import RunResult, prepare_run
from heteroplan.runtime.layout import rank_layout, world_size
from heteroplan.runtime.models import TrainTask
from heteroplan.runtime.ray_cluster import (
    NODE_ID_LABEL,
    RayNodes,
    check_reader_options,
    cluster_from_ray,
    connect,
)

__all__ = ["RankPlacement", "RayBackend", "RayJobHandle"]

log = logging.getLogger(__name__)

POLL_TIMEOUT_S = 30.0
"""Seconds one poll of a job's actors may take at least before the job counts as stalled (the
run's ``config.timeout_s`` when longer: a loaded machine answers late, which is no failure)."""


@dataclass(frozen=True)
class RankPlacement:
    """Where one rank ran, as its actor saw it: Ray node id, GPU ids Ray gave it, process id."""

    rank: int
    node_id: str
    gpu_ids: tuple[str, ...]
    pid: int


class _RankActor:
    """One rank: trains in a thread, answers polls and stop requests meanwhile."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._reports: list[StepMetrics] = []
        self._done: int | None = None
        self._error: str | None = None
        self._diverged: LossNotFinite | None = None

    def where(self, rank: int) -> RankPlacement:
        import os

        import ray

        ctx = ray.get_runtime_context()
        return RankPlacement(rank, ctx.get_node_id(), tuple(str(g) for g in ray.get_gpu_ids()), os.getpid())

    def address(self) -> str:
        """A rendezvous address on this node (its IP, a free port)."""
        import socket

        import ray

        ip = ray.util.get_node_ip_address()
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((ip, 0))
            return f"tcp://{ip}:{s.getsockname()[1]}"

    def probe(self, directory: str, token: str) -> tuple[str, str]:
        """Write a probe file into the checkpoint directory (the driver looks for it); returns
        ``(token, "")``, or ``("", why)`` when this node cannot write there."""
        try:
            check_writable(directory)
            Path(directory, token).write_text("ok")
        except (InputError, OSError) as exc:
            return "", getattr(exc, "reason", str(exc))
        return token, ""

    def start(self, rank: int, world: int, init_method: str, plan_dict: dict, task: TrainTask,
              config: RunConfig) -> None:
        threading.Thread(target=self._train, args=(rank, world, init_method, plan_dict, task, config),
                         daemon=True).start()

    def _train(self, rank: int, world: int, init_method: str, plan_dict: dict, task: TrainTask,
               config: RunConfig) -> None:
        import torch.distributed as dist

        from heteroplan.runtime.worker import join_process_group, train_rank

        try:
            join_process_group(config, init_method, rank, world)
            self._done = train_rank(Plan.from_dict(plan_dict), task, config, self._stop.is_set, self._reports.append)
            dist.destroy_process_group()
        except LossNotFinite as exc:
            self._diverged = exc
        except BaseException:  # noqa: BLE001 - the driver reports it
            self._error = traceback.format_exc(limit=8)

    def poll(self, seen: int) -> tuple[list[StepMetrics], int | None, str | None, LossNotFinite | None]:
        return self._reports[seen:], self._done, self._error, self._diverged

    def stop(self) -> None:
        self._stop.set()


_ACTOR_CLASS: Any = None


def _actor_class() -> Any:
    global _ACTOR_CLASS
    if _ACTOR_CLASS is None:
        import ray

        _ACTOR_CLASS = ray.remote(_RankActor)
    return _ACTOR_CLASS


class RayJobHandle:
    """A job's ranks as Ray actors in one placement group (see the module doc)."""

    def __init__(self, plan: Plan, task: TrainTask, config: RunConfig, node_ids: list[str],
                 cpus_per_rank: float, job_id: str) -> None:
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        if not isinstance(plan, Plan):  # prepare_run accepts a PipelineSet; the actors' layout is a plan's
            raise InputError("plan", type(plan).__name__, "the Ray backend runs a Plan; run a PipelineSet on local "
                             "processes (run_plan) or across nodes with torchrun")
        self.setup = prepare_run(plan, task, config)  # the local launcher's checks and counts
        self.plan, self.config, self.job_id = plan, config, job_id
        self.world_size = world_size(plan)
        self.start_step = self.setup.start_step
        self._t0 = time.perf_counter()
        self._reports: list[StepMetrics] = []
        self._done: dict[int, int] = {}
        self._actors: list[Any] = []
        self.placements: tuple[RankPlacement, ...] = ()
        self._pg = placement_group([{"GPU": 1, "CPU": cpus_per_rank}] * self.world_size, strategy="PACK",
                                   bundle_label_selector=[{NODE_ID_LABEL: n} for n in node_ids],
                                   name=f"heteroplan-{job_id}-{uuid.uuid4().hex[:6]}")
        try:
            ready, _ = ray.wait([self._pg.ready()], timeout=config.startup_timeout_s)
            if not ready:
                raise RankFailure(None, f"the job's {self.world_size} GPUs could not be reserved on its nodes "
                                  f"within {config.startup_timeout_s:.0f} s", latest_checkpoint(config.checkpoint_dir))
            actor = _actor_class()
            self._actors = [actor.options(num_cpus=cpus_per_rank, num_gpus=1, scheduling_strategy=
                                          PlacementGroupSchedulingStrategy(self._pg, placement_group_bundle_index=r),
                                          name=None).remote() for r in range(self.world_size)]
            self.placements = tuple(self._call([a.where.remote(r) for r, a in enumerate(self._actors)]))
            self._check_shared_storage()
            init = self._call([self._actors[0].address.remote()])[0]
            self._call([a.start.remote(r, self.world_size, init, plan.to_dict(), task, config)
                        for r, a in enumerate(self._actors)])
        except BaseException:
            self.terminate()
            raise
        self._last_progress = time.monotonic() + config.startup_timeout_s

    def _call(self, refs: list[Any]) -> list[Any]:
        """``ray.get`` with the poll timeout; a dead actor or a timeout is a RankFailure."""
        import ray

        wait = max(POLL_TIMEOUT_S, self.config.timeout_s)
        try:
            return ray.get(refs, timeout=wait)
        except InputError as exc:  # a rank refused its input (Ray re-raises it as a subclass)
            self.terminate()
            raise InputError(exc.field, exc.value, exc.reason) from None
        except ray.exceptions.GetTimeoutError:
            self._fail(None, f"the job's actors did not answer within {wait:.0f} s")
        except ray.exceptions.RayActorError as exc:
            dead = getattr(exc, "actor_id", None)
            rank = next((r for r, a in enumerate(self._actors) if dead in (a._actor_id, a._actor_id.hex())), None)
            self._fail(rank, f"its actor died ({type(exc).__name__}: {str(exc).splitlines()[0][:300]})")
        except ray.exceptions.RayError as exc:
            self._fail(None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
        raise AssertionError("unreachable")  # pragma: no cover

    def _check_shared_storage(self) -> None:
        directory = self.config.checkpoint_dir
        if directory is None:
            return
        token = f".heteroplan-reach-{uuid.uuid4().hex}"
        answers = self._call([a.probe.remote(directory, f"{token}-{r}") for r, a in enumerate(self._actors)])
        failed = [(self.placements[r].node_id[:8], why) for r, (_, why) in enumerate(answers) if why]
        if failed:
            raise InputError("config.checkpoint_dir", directory, f"node {failed[0][0]} cannot write checkpoints "
                             f"there: {failed[0][1]}")
        probes = [p for p, _ in answers]
        missing = [p for p in probes if not Path(directory, p).is_file()]
        for p in probes:
            Path(directory, p).unlink(missing_ok=True)
        if missing:
            raise InputError("config.checkpoint_dir", directory, f"not shared: {len(missing)} rank(s) wrote probes "
                             "this process cannot see; give a path every node reaches (NFS, a shared volume)")

    @property
    def steps(self) -> list[StepMetrics]:
        return list(self._reports)

    def poll(self) -> bool:
        answers = self._call([a.poll.remote(len(self._reports) if r == 0 else 0)
                              for r, a in enumerate(self._actors)])
        for r, (reports, done, error, diverged) in enumerate(answers):
            if r == 0 and reports:
                self._reports.extend(reports)
                self._last_progress = time.monotonic()
            if diverged is not None:
                self.terminate()
                raise LossNotFinite(diverged.rank, diverged.step, diverged.loss,
                                    latest_checkpoint(self.config.checkpoint_dir), tuple(self._reports))
            if error is not None:
                self._fail(r, error.strip().splitlines()[-1] + "\n" + error[-1500:])
            if done is not None:
                self._done[r] = done
        if len(self._done) < self.world_size and time.monotonic() - self._last_progress > self.config.timeout_s:
            self._fail(None, f"no iteration finished for {self.config.timeout_s:.0f} s")
        return len(self._done) < self.world_size

    def stop(self) -> None:
        if self._actors:
            self._call([self._actors[0].stop.remote()])

    def wait(self, timeout: float | None = None) -> RunResult:
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while self.poll():
                if deadline is not None and time.monotonic() > deadline:
                    self._fail(None, f"did not finish within {timeout:.0f} s")
                time.sleep(0.05)
        finally:
            self.terminate()
        return self.setup.result(self.plan, self.config, list(self._reports), self._done,
                                 time.perf_counter() - self._t0, None, f"ray: {self.setup.pipeline.describe()}")

    def _fail(self, rank: int | None, reason: str) -> None:
        self.terminate()
        raise RankFailure(rank, reason, latest_checkpoint(self.config.checkpoint_dir))

    def terminate(self) -> None:
        import ray
        from ray.util.placement_group import remove_placement_group

        for actor in self._actors:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already dead
                pass
        self._actors = []
        if self._pg is not None:
            try:
                remove_placement_group(self._pg)
            except Exception:  # noqa: BLE001 - its node is gone
                pass
            self._pg = None


class RayBackend:
    """Run the executor's jobs on a Ray cluster (see the module doc).

    Args:
        address: ``"auto"`` (the cluster ``ray start`` began on this machine), ``"host:port"``, or
            ``None`` (a new one-node Ray in this process; only for trying it out). Ignored when this
            process is already connected.
        gpu_types: GPU types by heteroplan name (memory, price), for labels the built-in table lacks.
        type_labels: Ray accelerator label -> heteroplan GPU type name.
        cpus_per_rank: CPUs each rank's actor reserves.
    """

    def __init__(self, address: str | None = "auto", gpu_types: tuple[GPUType, ...] = (),
                 type_labels: Mapping[str, str] | None = None, cpus_per_rank: float = 1.0) -> None:
        if not 0 <= real_value(cpus_per_rank) < 1024:  # True was 1 CPU; np.float32 is CPUs
            raise InputError("cpus_per_rank", cpus_per_rank, "must be CPUs >= 0")
        check_reader_options(gpu_types, type_labels)  # before joining Ray: gpu_types=5 was a TypeError
        connect(address)
        self.gpu_types, self.type_labels, self.cpus_per_rank = tuple(gpu_types), type_labels, float(cpus_per_rank)
        self._nodes: RayNodes = self.read()

    def read(self) -> RayNodes:
        """The Ray cluster's GPU nodes now."""
        return cluster_from_ray(self.gpu_types, self.type_labels)

    def cluster(self) -> Cluster | None:
        self._nodes = self.read()
        return self._nodes.cluster

    def launch(self, job_id: str, plan: Plan, allocation: Allocation, task: TrainTask,
               config: RunConfig) -> RayJobHandle:
        return RayJobHandle(plan, task, config, self.rank_nodes(plan, allocation, config), self.cpus_per_rank, job_id)

    def rank_nodes(self, plan: Plan, allocation: Allocation, config: RunConfig) -> list[str]:
        """The Ray node id of each rank of ``plan``: a GPU of ``allocation.placement`` of the rank's
        GPU type (plans over several types, e.g. pipeline stages on different types), in placement
        order; a plan whose types the cluster does not have takes the GPUs in placement order."""
        slots: list[tuple[str, str]] = []  # (GPU type, Ray node id), one per GPU
        types = self._nodes.cluster.node_types
        for name, count in allocation.placement:
            if name not in self._nodes.node_ids:
                raise RankFailure(None, f"node {name} is not in the Ray cluster any more",
                                  latest_checkpoint(config.checkpoint_dir))
            slots += [(types[name], self._nodes.node_ids[name])] * count
        if len(slots) != world_size(plan):
            raise InputError("allocation.placement", allocation.placement,
                             f"places {len(slots)} GPUs; the plan has {world_size(plan)} ranks")
        wanted = [info.gpu_type for info in rank_layout(plan)]
        if sorted(wanted) != sorted(t for t, _ in slots):
            return [node for _, node in slots]
        out = []
        for gpu_type in wanted:
            i = next(i for i, (t, _) in enumerate(slots) if t == gpu_type)
            out.append(slots.pop(i)[1])
        return out
