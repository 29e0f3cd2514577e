"""heteroplan: plan and schedule deep-learning training on heterogeneous GPU clusters.

Subpackages:
    cluster        GPU types, nodes, zones, prices (frozen, validated)
    formulations   solver-neutral MILP/LP models (data in, Model out)
    solvers        Model -> Solution (HiGHS by default; pulp, cvxpy, scipy exports)
    perf           performance models (Pollux/Sia goodput, Sailor profiles and networks)
    policies       round-based cluster schedulers behind one Policy protocol
    planner        Sailor: plans, iteration-time/memory simulator, search
    sim            discrete-event cluster simulator and metrics
    runtime        thin PyTorch runtime (extra ``[runtime]``)
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
