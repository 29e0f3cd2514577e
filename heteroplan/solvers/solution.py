"""Deprecated location of Solution/SolveStatus; they live in :mod:`heteroplan.milp` now."""

from heteroplan.milp.solution import Solution, SolveStatus, relative_gap

__all__ = ["Solution", "SolveStatus", "relative_gap"]
