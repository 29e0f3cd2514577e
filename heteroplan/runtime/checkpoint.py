"""Checkpoints stored per layer, so a run can resume under a different plan.

Layout: ``<root>/step-00000012/layer-0003.pt`` holds layer 3's parameters and its optimizer
state (per parameter name); ``manifest.json`` is written last, by rank 0, after every rank has
saved, so a directory without it is an incomplete checkpoint and is ignored. Because state is
keyed by *layer* rather than by rank, a checkpoint written with 2 data-parallel replicas and 1
stage resumes with 4 replicas and 2 stages (rescale).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from heteroplan.atomic_json import write_json_atomic
from heteroplan.errors import InputError

__all__ = ["Checkpoint", "latest_checkpoint", "save_layers", "load_layers", "write_manifest", "prune"]

MANIFEST = "manifest.json"


@dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint: the iteration it follows and where it lies."""

    step: int
    path: Path
    manifest: dict[str, Any]

    @property
    def loss(self) -> float | None:
        """Training loss of the last iteration before the checkpoint."""
        return self.manifest.get("loss")

    def model_state(self) -> dict[str, torch.Tensor]:
        """The full model's ``state_dict`` (keys ``"<layer>.<name>"``, as in ``nn.Sequential``)."""
        out: dict[str, torch.Tensor] = {}
        for i in range(int(self.manifest["num_layers"])):
            blob = torch.load(self.path / f"layer-{i:04d}.pt", map_location="cpu", weights_only=True)
            out.update({f"{i}.{k}": v for k, v in blob["params"].items()})
        return out


def step_dir(root: str | Path, step: int) -> Path:
    return Path(root) / f"step-{step:08d}"


def latest_checkpoint(root: str | Path | None) -> Checkpoint | None:
    """The newest complete checkpoint under ``root`` (``None`` when there is none)."""
    if root is None or not Path(root).is_dir():
        return None
    best = None
    for d in Path(root).glob("step-*"):
        manifest = d / MANIFEST
        if manifest.is_file():
            data = json.loads(manifest.read_text())
            if best is None or data["step"] > best.step:
                best = Checkpoint(int(data["step"]), d, data)
    return best


def save_layers(root: str | Path, step: int, first_layer: int, layers: nn.Sequential,
                optimizer: torch.optim.Optimizer) -> None:
    """Save each layer of this stage with its optimizer state (atomic per file)."""
    d = step_dir(root, step)
    d.mkdir(parents=True, exist_ok=True)
    for offset, layer in enumerate(layers):
        state = {
            name: {k: (v.detach().cpu().clone() if torch.is_tensor(v) else v) for k, v in optimizer.state.get(p, {}).items()}
            for name, p in layer.named_parameters()
        }
        params = {k: v.detach().cpu().clone() for k, v in layer.state_dict().items()}
        path = d / f"layer-{first_layer + offset:04d}.pt"
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        torch.save({"params": params, "optim": state}, tmp)
        os.replace(tmp, path)


def load_layers(ckpt: Checkpoint, first_layer: int, layers: nn.Sequential, optimizer: torch.optim.Optimizer) -> None:
    """Restore this stage's layers and their optimizer state from ``ckpt``."""
    num_layers = int(ckpt.manifest["num_layers"])
    if first_layer + len(layers) > num_layers:
        raise InputError("checkpoint.num_layers", num_layers, f"the model has at least {first_layer + len(layers)} layers")
    for offset, layer in enumerate(layers):
        blob = torch.load(ckpt.path / f"layer-{first_layer + offset:04d}.pt", map_location="cpu", weights_only=True)
        layer.load_state_dict(blob["params"])
        for name, p in layer.named_parameters():
            saved = blob["optim"].get(name)
            if saved:
                optimizer.state[p] = {k: (v.to(p.device) if torch.is_tensor(v) and v.dim() > 0 else v)
                                      for k, v in saved.items()}


def write_manifest(root: str | Path, step: int, num_layers: int, extra: dict[str, Any]) -> Checkpoint:
    """Mark the checkpoint of ``step`` complete (call once every layer is saved)."""
    d = step_dir(root, step)
    data = {"step": step, "num_layers": num_layers, **extra}
    write_json_atomic(d / MANIFEST, data)
    return Checkpoint(step, d, data)


def prune(root: str | Path, keep: int) -> None:
    """Delete all but the ``keep`` newest complete checkpoints (and incomplete older ones)."""
    if keep < 1:
        return
    dirs = sorted(Path(root).glob("step-*"))
    complete = [d for d in dirs if (d / MANIFEST).is_file()]
    if len(complete) <= keep:
        return
    cutoff = complete[-keep]
    for d in dirs:
        if d < cutoff:
            shutil.rmtree(d, ignore_errors=True)
