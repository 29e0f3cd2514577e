"""The solver backends, each with what it can honour.

A :class:`Backend` pairs a solve function with its :class:`Capabilities`. :func:`solve`
(in :mod:`heteroplan.solvers`) checks the requested :class:`SolveOptions` against them and
raises :class:`~heteroplan.errors.InputError` naming the option and the backend when one
cannot be honoured, instead of silently dropping it. Users add their own backend with
:func:`register_backend`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from heteroplan.errors import InputError, ModelError
from heteroplan.inputs import is_count, real_value
from heteroplan.milp import Model, Solution
from heteroplan.milp.args import brief

__all__ = ["Capabilities", "SolveOptions", "Backend", "register_backend", "get_backend", "backend_names"]


@dataclass(frozen=True)
class Capabilities:
    """What a backend can honour.

    Attributes:
        mip: solves models with integer variables (without it only LPs or ``relax=True``).
        time_limit: stops at a wall-clock limit (without it only ``time_limit=math.inf``).
        threads: takes a thread count.
        warm_start: takes a starting point.
        algorithms: values of ``algorithm`` it accepts (``"auto"`` is its own choice).
        verbose: can show its log.
    """

    mip: bool = True
    time_limit: bool = True
    threads: bool = False
    warm_start: bool = False
    algorithms: frozenset[str] = frozenset({"auto"})
    verbose: bool = True


MAX_THREADS = 1024
"""Most solver threads a solve may ask for (a thread pool of 10**9 fails to allocate inside HiGHS)."""


@dataclass(frozen=True)
class SolveOptions:
    """One solve's options (see :func:`heteroplan.solvers.solve` for their meaning).

    Attributes:
        time_limit: wall-clock limit (seconds).
        mip_gap: relative MIP gap at which to stop.
        threads: solver threads, ``None`` for the backend's choice.
        relax: drop integrality.
        warm_start: starting values per variable block, or ``None``.
        algorithm: ``"auto"`` or a backend-specific algorithm name.
        verbose: show the solver log.
    """

    time_limit: float = 60.0
    mip_gap: float = 1e-4
    threads: int | None = None
    relax: bool = False
    warm_start: dict[str, np.ndarray] | None = field(default=None, hash=False, compare=False)
    algorithm: str = "auto"
    verbose: bool = False

    def __post_init__(self) -> None:
        t = real_value(self.time_limit)  # np.float32 too; NaN for a bool, a string and 10**400
        if not t > 0:  # inf allowed: no limit
            raise ModelError("time_limit", self.time_limit, "must be a positive number of seconds")
        if not 0 <= real_value(self.mip_gap) < math.inf:
            raise ModelError("mip_gap", self.mip_gap, "must be a finite number >= 0")
        object.__setattr__(self, "time_limit", t)  # a Python float to every backend
        object.__setattr__(self, "mip_gap", real_value(self.mip_gap))
        if not isinstance(self.algorithm, str):
            raise ModelError("algorithm", self.algorithm, "must be a string")
        if self.warm_start is not None and not isinstance(self.warm_start, Mapping):
            raise ModelError("warm_start", brief(self.warm_start), "must be a mapping of variable block names to values")
        if self.threads is not None and (not is_count(self.threads) or self.threads < 1):
            raise ModelError("threads", self.threads, "must be a positive integer or None")
        if self.threads is not None:
            object.__setattr__(self, "threads", int(self.threads))  # np.int64 too
        if self.threads is not None and self.threads > MAX_THREADS:  # 10**9: std::bad_alloc inside HiGHS
            raise ModelError("threads", self.threads, f"must be at most {MAX_THREADS}")
        for name in ("relax", "verbose"):  # relax="no" is truthy: it would solve the relaxation
            if not isinstance(getattr(self, name), bool | np.bool_):
                raise ModelError(name, getattr(self, name), "must be True or False")



@dataclass(frozen=True)
class Backend:
    """A named solver backend: ``solve(model, options) -> Solution`` and its capabilities."""

    name: str
    capabilities: Capabilities
    solve: Callable[[Model, SolveOptions], Solution]
    description: str = ""

    def check(self, model: Model, options: SolveOptions) -> None:
        """Raise :class:`InputError` for the first option this backend cannot honour."""
        caps = self.capabilities
        where = f"backend {self.name!r} cannot honour it"
        if not caps.mip and model.to_standard_form().is_mip and not options.relax:
            raise InputError("model", model.name, f"has integer variables and {where} (LP only); pass relax=True")
        if not caps.time_limit and math.isfinite(options.time_limit):
            raise InputError("time_limit", options.time_limit, f"{where}; pass time_limit=math.inf")
        if not caps.threads and options.threads is not None:
            raise InputError("threads", options.threads, f"{where}; leave threads=None")
        if not caps.warm_start and options.warm_start:
            raise InputError("warm_start", sorted(map(str, options.warm_start)), f"{where}; leave warm_start=None")
        if options.algorithm not in caps.algorithms:
            raise InputError("algorithm", options.algorithm, f"{where}; choose from {sorted(caps.algorithms)}")
        if not caps.verbose and options.verbose:
            raise InputError("verbose", options.verbose, where)


_BACKENDS: dict[str, Backend] = {}


def register_backend(backend: Backend, *, replace: bool = False) -> None:
    """Add ``backend`` to the registry (``replace=True`` to overwrite one of the same name)."""
    if not replace and backend.name in _BACKENDS:
        raise InputError("backend", backend.name, "already registered; pass replace=True to overwrite")
    _BACKENDS[backend.name] = backend


def get_backend(name: str) -> Backend:
    """The registered backend called ``name``."""
    try:
        return _BACKENDS[name]
    except (KeyError, TypeError):
        raise ModelError("backend", name, f"unknown backend; choose from {backend_names()}") from None


def backend_names() -> tuple[str, ...]:
    """Names of the registered backends, in registration order."""
    return tuple(_BACKENDS)
