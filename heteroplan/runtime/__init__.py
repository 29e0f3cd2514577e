"""Thin PyTorch runtime: execute plans (pipeline + heterogeneous data + tensor parallelism) for real.

Needs PyTorch >= 2.5: ``pip install torch==2.13.0`` (on a machine without a GPU the CPU wheel,
``--index-url https://download.pytorch.org/whl/cpu``); the ``[runtime]`` extra would pull a CUDA build on Linux.
"""

from __future__ import annotations

try:
    import torch  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without torch
    raise ImportError(
        "heteroplan.runtime needs PyTorch: pip install torch==2.13.0 (the CPU wheel without a GPU: "
        "--index-url https://download.pytorch.org/whl/cpu)"
    ) from exc

from heteroplan.runtime.checkpoint import Checkpoint, latest_checkpoint
from heteroplan.runtime.config import RunConfig, StepMetrics
from heteroplan.runtime.launch import RunHandle, RunResult, run_plan
from heteroplan.runtime.models import SequentialTask, TinyGPTTask, TrainTask, tiny_gpt
from heteroplan.runtime.reference import train_reference
from heteroplan.runtime.schedule import gpipe, one_f_one_b

__all__ = [
    "Checkpoint", "latest_checkpoint", "RunConfig", "StepMetrics", "RunHandle", "RunResult", "run_plan",
    "SequentialTask", "TinyGPTTask", "TrainTask", "tiny_gpt", "train_reference", "gpipe", "one_f_one_b",
]
