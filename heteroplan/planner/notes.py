"""What a plan result says about how it was found: typed notes, each a kind and a sentence."""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["NoteKind", "PlanNote"]


class NoteKind(enum.Enum):
    """Why the planner added a note to its result.

    - ``RECOMPUTATION``: no plan fits (or meets the goal) keeping every activation; every stage
      of the plan recomputes them.
    - ``OPTIMIZER_SHARDING``: stages shard their optimizer state (ZeRO-1), and why.
    - ``UNCALIBRATED``: GPU types of the plan had no fitted simulator constants, and how to fit them.
    """

    RECOMPUTATION = "recompute"
    OPTIMIZER_SHARDING = "optimizer_sharding"
    UNCALIBRATED = "uncalibrated_gpu_types"


@dataclass(frozen=True)
class PlanNote:
    """One note of a :class:`~heteroplan.planner.api.PlanResult`: its ``kind`` and the sentence
    ``message`` that ``describe()`` (what ``heteroplan plan`` prints) shows."""

    kind: NoteKind
    message: str

    def __str__(self) -> str:
        return self.message

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind.value, "message": self.message}
