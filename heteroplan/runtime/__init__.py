"""Thin PyTorch runtime: execute plans (pipeline + heterogeneous data + tensor parallelism) for real.

Needs the ``[runtime]`` extra (``pip install 'heteroplan[runtime]'``, torch >= 2.5).
"""

from __future__ import annotations

try:
    import torch  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without torch
    raise ImportError(
        "heteroplan.runtime needs PyTorch: pip install 'heteroplan[runtime]' (or pip install torch)"
    ) from exc

from heteroplan.runtime.checkpoint import Checkpoint, latest_checkpoint
from heteroplan.runtime.config import RunConfig, StepMetrics
from heteroplan.runtime.launch import RunHandle, RunResult, launch, run_plan
from heteroplan.runtime.models import SequentialTask, TinyGPTTask, TrainTask, tiny_gpt
from heteroplan.runtime.reference import train_reference
from heteroplan.runtime.schedule import gpipe, one_f_one_b

__all__ = [
    "Checkpoint", "latest_checkpoint", "RunConfig", "StepMetrics", "RunHandle", "RunResult", "launch", "run_plan",
    "SequentialTask", "TinyGPTTask", "TrainTask", "tiny_gpt", "train_reference", "gpipe", "one_f_one_b",
]
