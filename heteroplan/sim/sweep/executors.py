"""Where sweep cells run: in this process, in local worker processes, or on a Ray cluster.

Every executor takes a picklable cell function (``cell -> record``, normally
:func:`~heteroplan.sim.sweep.cell.execute_cell`) and yields the records in the order the cells
finish; the sweep runner writes each one as it arrives. Closing the iterator early (Ctrl-C,
SIGTERM) cancels the cells not started and stops the workers.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from enum import StrEnum
from typing import Any, Protocol

from heteroplan.errors import InputError
from heteroplan.inputs import enum_choice
from heteroplan.sim.sweep.cell import failed_record
from heteroplan.sim.sweep.spec import CellSpec

__all__ = ["ExecutorKind", "Executor", "InProcessExecutor", "ProcessExecutor", "RayExecutor", "make_executor"]

log = logging.getLogger(__name__)
CellRunner = Callable[[CellSpec], dict[str, Any]]


class Executor(Protocol):
    """Runs cells and yields their records as they finish."""

    def run(self, fn: CellRunner, cells: Sequence[CellSpec]) -> Iterator[dict[str, Any]]: ...


class InProcessExecutor:
    """One cell after the other in this process (debugging: breakpoints and tracebacks work)."""

    workers = 1

    def run(self, fn: CellRunner, cells: Sequence[CellSpec]) -> Iterator[dict[str, Any]]:
        for cell in cells:
            yield fn(cell)


def cores() -> int:
    """CPU cores this process may use (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def _one_core_each() -> None:
    """A worker solves with one HiGHS thread (unless ``HETEROPLAN_SOLVER_THREADS`` says otherwise):
    HiGHS's default pool lets one cell use ~1.5 cores, so N workers on N cores slowed each other
    1.6x (measured: 2 workers gave 1.24x one worker; 74.9 s -> 60.5 s for 80 cells)."""
    os.environ.setdefault("HETEROPLAN_SOLVER_THREADS", "1")


def _worker_init(parent: int) -> None:
    """Set up a worker: leave Ctrl-C to the parent (which stops the workers), one solver thread,
    and exit when the sweep process dies (SIGKILL gives it no chance to stop its workers)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _one_core_each()
    _exit_with(parent)


def _exit_with(parent: int) -> None:
    """End this process soon after process ``parent`` is gone: at once by ``PR_SET_PDEATHSIG``
    when it is our parent on Linux, else within a second by polling (forkserver, macOS)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
        except (OSError, AttributeError):
            pass

    def watch() -> None:
        while True:
            time.sleep(1.0)
            try:
                os.kill(parent, 0)
            except ProcessLookupError:
                os._exit(1)
            except PermissionError:  # alive, another user's: cannot happen for our parent
                pass
            if os.getppid() == 1:  # re-parented to init: whoever started us is gone
                os._exit(1)

    threading.Thread(target=watch, name="heteroplan-parent-watch", daemon=True).start()


class ProcessExecutor:
    """Local worker processes (``concurrent.futures``, ``forkserver`` where available, else
    ``spawn``: no state forked from the parent); ``workers`` defaults to every core and is capped
    at the cores (``requested`` keeps what was asked) and, per run, at the cells. Workers exit
    when the sweep process dies, even by SIGKILL."""

    def __init__(self, workers: int | None = None, start_method: str | None = None) -> None:
        if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
            raise InputError("workers", workers, "must be an integer >= 1")
        methods = multiprocessing.get_all_start_methods()
        method = start_method or ("forkserver" if "forkserver" in methods else "spawn")
        if method not in methods:
            raise InputError("start_method", method, f"choose one of {methods}")
        self.requested = workers
        self.workers = min(workers or cores(), cores())  # CPU-bound cells: more processes only contend
        self.start_method = method

    def run(self, fn: CellRunner, cells: Sequence[CellSpec]) -> Iterator[dict[str, Any]]:
        if not cells:
            return
        ctx = multiprocessing.get_context(self.start_method)
        pool = ProcessPoolExecutor(min(self.workers, len(cells)), mp_context=ctx, initializer=_worker_init,
                                   initargs=(os.getpid(),))
        futures: dict[Future[dict[str, Any]], CellSpec] = {pool.submit(fn, c): c for c in cells}
        clean = False
        try:
            for fut in as_completed(futures):
                try:
                    yield fut.result()
                except Exception as exc:  # the worker died (BrokenProcessPool) or the record did not pickle
                    yield failed_record(futures[fut], f"worker failed: {type(exc).__name__}: {exc}")
            clean = True
        finally:
            if clean:
                pool.shutdown(wait=True)
            else:  # interrupted: drop queued cells and stop the running ones now
                processes = list(getattr(pool, "_processes", {}).values())
                pool.shutdown(wait=False, cancel_futures=True)
                for p in processes:
                    p.terminate()


class RayExecutor:
    """Cells as Ray tasks: ``address="auto"`` starts a local Ray instance (``num_cpus`` CPUs,
    default all); any other address joins that cluster (``ray://host:10001`` or ``host:6379``).
    An already initialized Ray session is used as it is and left running."""

    def __init__(self, address: str = "auto", num_cpus: int | None = None) -> None:
        try:
            import ray  # noqa: F401
        except ImportError:
            raise InputError("ray", address, "Ray is not installed: pip install 'heteroplan[ray]'") from None
        if not isinstance(address, str) or not address:
            raise InputError("ray", address, "give 'auto' or a cluster address")
        self.address = address
        self.num_cpus = num_cpus
        self.workers = num_cpus or cores()

    def run(self, fn: CellRunner, cells: Sequence[CellSpec]) -> Iterator[dict[str, Any]]:
        import ray

        started = False
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"include_dashboard": False, "logging_level": logging.WARNING,
                                      "configure_logging": False}
            if self.address == "auto":
                kwargs["num_cpus"] = self.num_cpus
            else:
                kwargs["address"] = self.address
            try:
                ray.init(**kwargs)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise InputError("ray", self.address, f"cannot start or join Ray: {exc}") from None
            started = True
        self.workers = int(ray.cluster_resources().get("CPU", self.workers))
        task = ray.remote(_call)
        pending = {task.remote(fn, c): c for c in cells}
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    cell = pending.pop(ref)
                    try:
                        yield ray.get(ref)
                    except ray.exceptions.RayError as exc:  # the worker or node died
                        yield failed_record(cell, f"ray task failed: {type(exc).__name__}: {exc}")
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)
            if started:
                ray.shutdown()


def _call(fn: CellRunner, cell: CellSpec) -> dict[str, Any]:
    _one_core_each()
    return fn(cell)


class ExecutorKind(StrEnum):
    """Where a sweep's cells run."""

    INPROCESS = "inprocess"  # one after another in this process
    PROCESSES = "processes"  # a pool of local processes
    RAY = "ray"  # Ray tasks (a local instance or a cluster)


def make_executor(kind: ExecutorKind | str = ExecutorKind.PROCESSES, workers: int | None = None,
                  ray_address: str | None = None) -> Executor:
    """An executor by :class:`ExecutorKind` or its value: ``"inprocess"``, ``"processes"``
    (``workers``, default all cores) or ``"ray"`` (``ray_address``: ``"auto"`` for a local
    instance, default); :class:`~heteroplan.errors.InputError` naming ``executor`` otherwise."""
    kind = enum_choice(ExecutorKind, "executor", kind)
    if ray_address is not None and kind is ExecutorKind.PROCESSES:
        kind = ExecutorKind.RAY
    if kind is ExecutorKind.INPROCESS:
        return InProcessExecutor()
    if kind is ExecutorKind.PROCESSES:
        return ProcessExecutor(workers)
    return RayExecutor(ray_address or "auto", workers)
